"""What the parts of a training run share, as plain dataclasses.

A run (:class:`~graphormer_urpe.training.trainer.Trainer`) is made of parts, each a small class
of its own module that is handed what it needs:

* :class:`RunLaunch`: the config, the processes, the stop request, the clock, the folder;
* :class:`RunModel`: the network, as built and as trained, and its captured passes;
* :class:`RunData`: the splits, the loaders, the evaluation targets and the selection rule;
* :class:`RunOptimizer`: AdamW, its schedule and the (captured) training step;
* :class:`RunProgress`: where the run is and what it has recorded (a checkpoint saves it);
* :class:`RunParts`: the five together, as the run's collaborators receive them.

Their log lines keep the name of the training loop's logger, whichever module writes them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..graph.batch import GraphormerCollator
from ..graph.model import Graphormer
from ..runtime.capture import CaptureBackend, CapturedForward, CapturedStep
from ..runtime.distributed import DistContext
from ..runtime.precision import Precision
from ..runtime.sampler import EpochBatchSampler
from ..runtime.train_config import TrainConfig
from .pacing import Schedule
from .steps import StepTotals

if TYPE_CHECKING:
    from ..datasets import DatasetSplits

__all__ = [
    "Clock",
    "RunData",
    "RunLaunch",
    "RunModel",
    "RunOptimizer",
    "RunParts",
    "RunProgress",
    "log",
]

log = logging.getLogger(__package__ + ".loop")  # the run's log, under the name it always had
"""The run's logger, ``graphormer_urpe.training.loop``."""

Clock = Callable[[], float]
"""Seconds on a monotonic clock (``time.perf_counter``; tests give a fake one)."""


@dataclass
class RunLaunch:
    """What a run is launched with: its config (the resolved one, once set up), its
    processes, the stop request, the clock, when its time limit started and its folder."""

    config: TrainConfig
    ctx: DistContext
    stop: dict[str, int]  # {"signal": the stop request's signal number, 0: none}
    clock: Clock
    started: float  # the clock reading the time limit counts from
    out: Path
    precision: Precision

    @property
    def device(self) -> torch.device:
        """This process's device."""
        return self.ctx.device

    @property
    def main(self) -> bool:
        """Rank 0: the process that writes files."""
        return self.ctx.is_main


@dataclass
class RunModel:
    """The network a run trains: ``model`` as built, ``net`` as trained (DDP, compiled),
    ``forward`` its captured evaluation passes (``None``: eager) and ``init_report``,
    ``--init-from``'s report (``None`` without it)."""

    model: Graphormer
    backend: CaptureBackend | None  # how steps are captured; None: eagerly
    forward: CapturedForward | None
    init_report: Any
    net: nn.Module | None = None  # set once the checkpoint is restored

    @property
    def n_params(self) -> int:
        """The model's parameter count."""
        return sum(p.numel() for p in self.model.parameters())


@dataclass
class RunData:
    """A run's data and what it is judged on.

    ``eval_loaders`` maps ``valid`` and ``test`` to this process's loader and its graphs'
    positions ``[n_r]``; ``targets`` the same splits to their targets ``[n, T]``; ``mean``
    ``[1, T]`` is the training targets' mean (the baseline predictor), ``baseline`` its
    metric per split (``None``: no test labels); ``loss_scale`` ``[T]`` the standardised
    loss's scale (``None``: the targets' own units).
    """

    splits: DatasetSplits
    domain: dict[str, Any] | None  # what the training molecules are made of (rank 0)
    sampler: EpochBatchSampler
    train_loader: DataLoader
    eval_loaders: dict[str, tuple[DataLoader, Tensor]]
    collate: GraphormerCollator
    loss_kind: str
    loss_scale: Tensor | None
    metric: str
    higher: bool
    mean: Tensor
    targets: dict[str, Tensor]
    baseline: dict[str, float | None]
    test_labelled: bool

    @property
    def steps_per_epoch(self) -> int:
        """This process's batches per epoch."""
        return len(self.sampler)


@dataclass
class RunOptimizer:
    """AdamW, its re-plannable schedule and scheduler, the device-side loss totals and the
    training step (captured per batch shape when the run captures); the host reads the
    totals every ``read_every`` steps."""

    optimizer: torch.optim.Optimizer
    schedule: Schedule
    totals: StepTotals
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None  # follows ``schedule``
    stepper: CapturedStep | None = None  # set once the model is wrapped
    read_every: int = 1


@dataclass
class RunProgress:
    """Where a run is (``epoch``, ``start_batch``, ``step`` of ``total`` planned over
    ``epochs``) and what it has recorded so far: the best validation, the training time,
    graphs and the current epoch's loss. A checkpoint saves and restores it."""

    total: int
    epochs: int
    higher: bool  # the selection metric is maximised
    epoch: int = 0
    start_batch: int = 0
    step: int = 0
    best: float = field(init=False)  # the best validation value so far (a start: the worst)
    best_epoch: int = -1
    best_metrics: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0
    train_graphs: int = 0
    loss_sum: float = 0.0
    loss_count: int = 0
    timed_out: bool = False
    wall_start: float = 0.0

    def __post_init__(self) -> None:
        self.best = -math.inf if self.higher else math.inf

    def improves(self, value: float) -> bool:
        """Whether ``value`` of the selection metric beats the best so far."""
        return (value > self.best) if self.higher else (value < self.best)

    @property
    def epoch_loss(self) -> float:
        """The current epoch's mean training loss so far (``nan`` before any is read)."""
        return self.loss_sum / self.loss_count if self.loss_count else math.nan

    def epochs_trained(self, steps_per_epoch: int) -> float:
        """Epochs' worth of steps taken (fractional)."""
        return self.step / max(1, steps_per_epoch)


@dataclass
class RunParts:
    """The parts of a set-up run that its collaborators (the plan line, the checkpoints, the
    epoch loop, the report) read and move on."""

    launch: RunLaunch
    model: RunModel
    data: RunData
    optim: RunOptimizer
    progress: RunProgress
