"""A training run's checkpoints: what one holds, writing it (rolling, best, at a non-finite
loss), restoring it on ``--resume``, and the reads of the device totals that decide when to
stop."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..io.checkpoint import incompatible_checkpoint, rng_state, save_checkpoint, set_rng_state
from ..runtime.capture import portable_optimizer_state
from .budget import Schedule, epochs_of
from .run_state import RunState, log

__all__ = ["RunCheckpoints"]


class RunCheckpoints(RunState):
    """Checkpoints of a run and the reads of its device totals (collectives under DDP)."""

    def _restore(self, ckpt: dict[str, Any], path: Path | None) -> list[dict[str, Any]]:
        """Load a checkpoint's weights, optimizer, RNG and position; its history rows."""
        with incompatible_checkpoint(path):
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.scheduler.load_state_dict(ckpt["scheduler"])
            self.precision.scaler.load_state_dict(ckpt["scaler"])
        ranks = ckpt.get("rng_ranks")
        if ranks is not None and len(ranks) == self.ctx.world_size:
            set_rng_state(ranks[self.ctx.rank], self.device)
        else:
            if self.ctx.enabled:
                log.warning("the checkpoint was written by another number of processes")
            set_rng_state(ckpt["rng"], self.device)
        position = ckpt.get("position") or {"epoch": ckpt["epoch"] + 1, "batch": 0}
        self.epoch, self.start_batch = position["epoch"], position["batch"]
        self.step = ckpt["step"]
        self.loss_sum, self.loss_count = ckpt.get("epoch_loss", (0.0, 0))
        self.best, self.best_epoch = ckpt["best"], ckpt["best_epoch"]
        self.best_metrics = ckpt.get("best_metrics", {})
        self.train_seconds, self.train_graphs = ckpt["train_seconds"], ckpt["train_graphs"]
        if "schedule" in ckpt:  # a run re-planned by its pacer goes on with that plan
            self.schedule = Schedule.from_state(ckpt["schedule"])
            self.total = self.schedule.total
            self.epochs = epochs_of(self.total, len(self.sampler))
        if self.start_batch >= len(self.sampler):
            self.epoch, self.start_batch = self.epoch + 1, 0
        return json.loads(ckpt["history"])

    def state(self, epoch: int, batch: int) -> dict[str, Any]:
        """Everything needed to continue at batch ``batch`` of epoch ``epoch`` (a collective
        under DDP: every process takes part)."""
        ranks = None
        if self.ctx.enabled:
            ranks = [None] * self.ctx.world_size
            torch.distributed.all_gather_object(ranks, rng_state(self.device))
        splits = self.splits
        return {
            "config": self.config.to_json(),
            "model": self.model.state_dict(),
            "optimizer": portable_optimizer_state(self.optimizer),
            "scheduler": portable_state(self.scheduler.state_dict()),
            "scaler": self.precision.scaler.state_dict(),
            "rng": rng_state(self.device),
            "rng_ranks": ranks,
            "epoch": epoch,
            "position": {"epoch": epoch, "batch": batch},
            "epoch_loss": (self.loss_sum, self.loss_count),
            "step": self.step,
            "best": self.best,
            "best_metrics": self.best_metrics,
            "best_epoch": self.best_epoch,
            "history": json.dumps(self.history.rows),
            "train_seconds": self.train_seconds,
            "train_graphs": self.train_graphs,
            "schedule": self.schedule.state(),
            "world_size": self.ctx.world_size,
            "featurizer": splits.featurizer,
            "target_names": list(splits.target_names),
            "metric": self.metric,
            "task_type": splits.task_type,
            "train_mean": self.mean,
            **({"pretrain": splits.pretrain} if splits.pretrain is not None else {}),
            **({"mol_features": splits.mol_features} if splits.mol_features else {}),
            **({"domain": self.domain} if self.domain is not None else {}),
        }

    def checkpoint(self, epoch: int, batch: int) -> Path | None:
        """A rolling checkpoint (rank 0 writes it)."""
        s = self.state(epoch, batch)
        return self.keeper.save(s, self.step) if self.main else None

    def save_best(self, epoch: int) -> None:
        """``best.pt``, continuing at the start of epoch ``epoch`` (rank 0 writes it)."""
        s = self.state(epoch, 0)  # every process takes part in the collective
        if self.main:
            save_checkpoint(self.out / "best.pt", s)

    def read_totals(self, epoch: int, batch: int) -> tuple[int, bool]:
        """Add the device totals to the host's, stop on a non-finite loss, and return the stop
        signal agreed by every process (0: none) and whether rank 0's clock says the time is
        up (``--time-limit``), the same on every process. A collective under DDP."""
        part, count, first_bad = self.totals.read()
        self.totals.reset()
        time_up = self.main and self._out_of_time()
        flags = [part, float(first_bad >= 0), float(self.stop["signal"]), float(time_up)]
        shared = self.ctx.all_sum(torch.tensor(flags).double())
        self.loss_sum += float(shared[0]) / self.ctx.world_size
        self.loss_count += count
        if float(shared[1]) > 0:
            good = self.state(epoch, batch)  # updates from the first bad step on were skipped
            if self.main:
                save_checkpoint(self.out / "nonfinite.pt", good)
            where = f"step {first_bad}" if first_bad >= 0 else "another process's step"
            raise RuntimeError(
                f"non-finite loss at {where} (epoch {epoch}); the weights before it are saved "
                f"to {self.out / 'nonfinite.pt'}; lower --lr or check the data"
            )
        return int(shared[2]) and (self.stop["signal"] or signal.SIGTERM), bool(shared[3])


def portable_state(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict with its 0-d tensors (a captured run's learning rates) as floats."""
    out = {}
    for k, v in state.items():
        if isinstance(v, Tensor) and v.dim() == 0:
            v = float(v)
        elif isinstance(v, list) and any(isinstance(x, Tensor) for x in v):
            v = [float(x) if isinstance(x, Tensor) else x for x in v]
        out[k] = v
    return out
