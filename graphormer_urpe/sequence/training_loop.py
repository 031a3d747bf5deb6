r"""The training loop of the sequence runs (synthetic tasks and language models).

A run supplies what differs: the loss of each update (its batches) and its validation
metrics. :class:`TrainingLoop` does the rest: AdamW steps with optional gradient-norm
clipping under a per-update learning-rate schedule (a linear warm-up over ``W`` updates, then
a linear or cosine decay to 0 at update ``T``), the curve (one row per update), validation
every ``eval_every`` updates and after the last one (logged and shown on the progress bar),
and, when asked, rolling resumable checkpoints and a checkpoint on SIGTERM / SIGINT.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..io.checkpoint import CheckpointKeeper, TrainingInterrupted, stop_requests

__all__ = [
    "Checkpoints",
    "Curve",
    "LoopSettings",
    "SCHEDULES",
    "TrainingLoop",
    "adamw",
    "cosine_warmup",
    "linear_warmup_decay",
    "optimizer_update",
]

#: How each validation metric reads in the log line of an evaluation.
METRIC_LABELS = {"valid_loss": "valid loss", "valid_accuracy": "valid acc"}


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    r"""Learning-rate multiplier of update ``step`` (0-based).

    .. math::
        m(s) = \begin{cases} (s + 1) / W & s < W \\ (T - s) / (T - W) & s \ge W \end{cases}

    i.e. a linear ramp to 1 over ``W`` updates, then a linear decay that would reach 0 at
    update ``T`` (fairseq's ``polynomial_decay`` with power 1 and end lr 0).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def cosine_warmup(step: int, warmup_steps: int, total_steps: int) -> float:
    r"""Learning-rate multiplier of update ``step`` (0-based): a linear ramp over ``W``
    updates, then :math:`\tfrac12 (1 + \cos(\pi (s - W) / (T - W)))` (0 at ``T``)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


#: The decays after warm-up, by name.
SCHEDULES: dict[str, Callable[[int, int, int], float]] = {
    "linear": linear_warmup_decay,
    "cosine": cosine_warmup,
}


def adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    schedule: tuple[str, int, int],
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over ``model``'s parameters and its per-update schedule; ``schedule`` is
    ``(name in SCHEDULES, warm-up updates, total updates)``."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay
    )
    decay = SCHEDULES[schedule[0]]
    warmup_steps, total_steps = schedule[1:]
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: decay(s, warmup_steps, total_steps)
    )
    return optimizer, scheduler


def optimizer_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loss: Tensor,
    clip_norm: float | None,
    step: int,
) -> float:
    """One update from ``loss`` (a scalar): backward, optional gradient-norm clipping, optimiser
    and schedule steps. Returns the loss as a float; a non-finite one raises
    ``FloatingPointError`` naming update ``step``."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    scheduler.step()
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite training loss {value} at update {step}")
    return value


@dataclass
class Checkpoints:
    """Resumable checkpoints of a loop: ``state()`` is saved with ``keeper`` every ``every``
    updates (0: only at the end), after the last update, and after the update during which
    SIGTERM / SIGINT arrived (then :class:`TrainingInterrupted` is raised; without a
    ``keeper``, ``KeyboardInterrupt``)."""

    keeper: CheckpointKeeper | None
    every: int
    state: Callable[[], dict[str, Any]]


class LoopSettings(Protocol):
    """The fields of a run's configuration that the loop reads."""

    steps: int  # the last update
    eval_every: int  # validate every this many updates (and after the last one)
    clip_norm: float | None  # gradient-norm clipping, ``None`` for none


@dataclass(frozen=True)
class Curve:
    """What a run records: its curve ``columns`` in order (``step``, ``lr``, ``train_loss``,
    ..., ``elapsed_s``) and the ``(label, validation metric)`` on the progress bar."""

    columns: tuple[str, ...]
    bar_metric: tuple[str, str]


@dataclass
class TrainingLoop:
    """Updates ``model`` from update ``step`` to ``settings.steps``, recording the curve.

    Attributes:
        model, optimizer, scheduler: what is trained, and how.
        settings: the number of updates, the validation cadence and the clipping.
        name: the run's name on the progress bar and in the log lines (``"pi/urpe"``).
        log: the logger of the log lines.
        curve: the curve columns and the metric on the progress bar.
        progress: show the tqdm progress bar.
        checkpoints: resumable checkpoints and signal handling; ``None`` for neither.
        step: updates done (non-zero when resumed).
        rows: the curve so far, one row per update.
        evals: the validation metrics so far, with their ``step``.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    settings: LoopSettings
    name: str
    log: logging.Logger
    curve: Curve
    progress: bool = True
    checkpoints: Checkpoints | None = None
    step: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_parameters(self) -> int:
        """Parameters of the model."""
        return sum(p.numel() for p in self.model.parameters())

    def facts(self, wall: float, device: torch.device) -> dict[str, Any]:
        """What the metrics of a run say about how it ran: ``wall_time_s`` (``wall``, the time
        :meth:`run` took), ``num_parameters``, ``torch_threads`` and ``device``."""
        return {
            "wall_time_s": round(wall, 2),
            "num_parameters": self.num_parameters,
            "torch_threads": torch.get_num_threads(),
            "device": str(device),
        }

    def training_state(self) -> dict[str, Any]:
        """Model, optimizer and schedule states and the update count, for a checkpoint."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`training_state`."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])

    def run(
        self,
        train_loss: Callable[[int], tuple[Tensor, dict[str, Any]]],
        validate: Callable[[int], dict[str, float]],
    ) -> float:
        """Train to update ``settings.steps``.

        Args:
            train_loss: the scalar loss of update ``step`` (0-based) in the model's training
                mode, and the run's extra curve columns of that update.
            validate: the validation metrics (``valid_loss``, ...) after update ``step``
                (1-based).

        Returns:
            The wall time of this call in seconds.
        """
        steps = self.settings.steps
        start = time.perf_counter()
        elapsed0 = self.rows[-1]["elapsed_s"] if self.rows else 0.0
        self.model.train()
        bar = tqdm(
            total=steps,
            initial=self.step,
            desc=self.name,
            disable=not self.progress,
            dynamic_ncols=True,
        )
        with self._stop_requests() as stop:
            while self.step < steps:
                lr = self.optimizer.param_groups[0]["lr"]
                loss, extra = train_loss(self.step)
                self.step += 1
                value = optimizer_update(
                    self.model,
                    self.optimizer,
                    self.scheduler,
                    loss,
                    self.settings.clip_norm,
                    self.step,
                )
                row = dict.fromkeys(self.curve.columns)
                row.update(step=self.step, lr=lr, train_loss=round(value, 6), **extra)
                row["elapsed_s"] = round(elapsed0 + time.perf_counter() - start, 3)
                if self.step % self.settings.eval_every == 0 or self.step == steps:
                    self._validated(row, value, validate(self.step), bar)
                self.rows.append(row)
                bar.update(1)
                self._checkpoint(stop, bar)
        bar.close()
        return time.perf_counter() - start

    def _stop_requests(self) -> contextlib.AbstractContextManager[dict[str, int]]:
        if self.checkpoints is None:
            return contextlib.nullcontext({"signal": 0})
        return stop_requests()

    def _validated(
        self, row: dict[str, Any], train_loss: float, metrics: dict[str, float], bar: Any
    ) -> None:
        row.update({k: round(v, 6) for k, v in metrics.items()})
        self.evals.append({"step": self.step, **metrics})
        message = "%s step %d: train loss %.4f" + "".join(
            f", {METRIC_LABELS[k]} %.4f" for k in metrics
        )
        self.log.info(message, self.name, self.step, train_loss, *metrics.values())
        label, key = self.curve.bar_metric
        bar.set_postfix(**{"loss": f"{train_loss:.3f}", label: f"{metrics[key]:.3f}"})

    def _checkpoint(self, stop: dict[str, int], bar: Any) -> None:
        if self.checkpoints is None:
            return
        every = self.checkpoints.every
        last = self.step == self.settings.steps
        due = last or (every and self.step % every == 0)
        stopping = bool(stop["signal"]) and not last  # SIGTERM / SIGINT
        keeper = self.checkpoints.keeper
        if keeper is not None and (due or stopping):
            saved = keeper.save(self.checkpoints.state(), self.step)
            if stopping:  # after this update, resumable from it
                bar.close()
                raise TrainingInterrupted(stop["signal"], saved)
        elif stopping:
            raise KeyboardInterrupt  # no run folder: nothing to save
