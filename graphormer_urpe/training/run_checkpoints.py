"""A training run's checkpoints: what one holds, writing it (rolling, best, at a non-finite
loss) and restoring it on ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..io.checkpoint import (
    CheckpointKeeper,
    incompatible_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from ..runtime.capture import portable_optimizer_state
from .history import History
from .pacing import Schedule, epochs_of
from .run_state import RunParts, log

__all__ = ["RunCheckpoints", "portable_state"]


class RunCheckpoints:
    """The checkpoints of a run (``run``): each holds everything to continue from (its
    progress and ``history`` among it), rolling ones are kept by ``keeper``; rank 0 writes
    them, every process takes part (a collective under DDP)."""

    def __init__(self, run: RunParts, keeper: CheckpointKeeper, history: History) -> None:
        self.launch, self.model, self.optim = run.launch, run.model, run.optim
        self.data, self.progress = run.data, run.progress
        self.keeper, self.history = keeper, history

    def restore(self, ckpt: dict[str, Any], path: Path | None) -> list[dict[str, Any]]:
        """Load a checkpoint's weights, optimizer, RNG and position; return its history rows."""
        launch, optim, progress = self.launch, self.optim, self.progress
        ctx, device = launch.ctx, launch.device
        with incompatible_checkpoint(path):
            self.model.model.load_state_dict(ckpt["model"])
            optim.optimizer.load_state_dict(ckpt["optimizer"])
            optim.scheduler.load_state_dict(ckpt["scheduler"])
            launch.precision.scaler.load_state_dict(ckpt["scaler"])
        ranks = ckpt.get("rng_ranks")
        if ranks is not None and len(ranks) == ctx.world_size:
            set_rng_state(ranks[ctx.rank], device)
        else:
            if ctx.enabled:
                log.warning("the checkpoint was written by another number of processes")
            set_rng_state(ckpt["rng"], device)
        position = ckpt.get("position") or {"epoch": ckpt["epoch"] + 1, "batch": 0}
        progress.epoch, progress.start_batch = position["epoch"], position["batch"]
        progress.step = ckpt["step"]
        progress.loss_sum, progress.loss_count = ckpt.get("epoch_loss", (0.0, 0))
        progress.best, progress.best_epoch = ckpt["best"], ckpt["best_epoch"]
        progress.best_metrics = ckpt.get("best_metrics", {})
        progress.train_seconds, progress.train_graphs = ckpt["train_seconds"], ckpt["train_graphs"]
        if "schedule" in ckpt:  # a run re-planned by its pacer goes on with that plan
            optim.schedule = Schedule.from_state(ckpt["schedule"])
            progress.total = optim.schedule.total
            progress.epochs = epochs_of(progress.total, self.data.steps_per_epoch)
        if progress.start_batch >= self.data.steps_per_epoch:
            progress.epoch, progress.start_batch = progress.epoch + 1, 0
        return json.loads(ckpt["history"])

    def state(self, epoch: int, batch: int) -> dict[str, Any]:
        """Everything needed to continue at batch ``batch`` of epoch ``epoch`` (a collective
        under DDP: every process takes part)."""
        launch, optim, progress, data = self.launch, self.optim, self.progress, self.data
        ctx, splits = launch.ctx, data.splits
        ranks = None
        if ctx.enabled:
            ranks = [None] * ctx.world_size
            torch.distributed.all_gather_object(ranks, rng_state(launch.device))
        return {
            "config": launch.config.to_json(),
            "model": self.model.model.state_dict(),
            "optimizer": portable_optimizer_state(optim.optimizer),
            "scheduler": portable_state(optim.scheduler.state_dict()),
            "scaler": launch.precision.scaler.state_dict(),
            "rng": rng_state(launch.device),
            "rng_ranks": ranks,
            "epoch": epoch,
            "position": {"epoch": epoch, "batch": batch},
            "epoch_loss": (progress.loss_sum, progress.loss_count),
            "step": progress.step,
            "best": progress.best,
            "best_metrics": progress.best_metrics,
            "best_epoch": progress.best_epoch,
            "history": json.dumps(self.history.rows),
            "train_seconds": progress.train_seconds,
            "train_graphs": progress.train_graphs,
            "schedule": optim.schedule.state(),
            "world_size": ctx.world_size,
            "featurizer": splits.featurizer,
            "target_names": list(splits.target_names),
            "metric": data.metric,
            "task_type": splits.task_type,
            "train_mean": data.mean,
            **({"pretrain": splits.pretrain} if splits.pretrain is not None else {}),
            **({"mol_features": splits.mol_features} if splits.mol_features else {}),
            **({"domain": data.domain} if data.domain is not None else {}),
        }

    def save(self, epoch: int, batch: int) -> Path | None:
        """A rolling checkpoint (rank 0 writes it and gets its path)."""
        s = self.state(epoch, batch)
        return self.keeper.save(s, self.progress.step) if self.launch.main else None

    def save_best(self, epoch: int) -> None:
        """``best.pt``, continuing at the start of epoch ``epoch`` (rank 0 writes it)."""
        s = self.state(epoch, 0)  # every process takes part in the collective
        if self.launch.main:
            save_checkpoint(self.launch.out / "best.pt", s)

    def save_nonfinite(self, epoch: int, batch: int) -> Path:
        """``nonfinite.pt``: the weights before a non-finite loss (rank 0 writes it)."""
        path = self.launch.out / "nonfinite.pt"
        good = self.state(epoch, batch)  # updates from the first bad step on were skipped
        if self.launch.main:
            save_checkpoint(path, good)
        return path


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
