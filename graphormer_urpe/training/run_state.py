"""What one training run holds: the attributes that its phases share.

A run (``_Run`` in :mod:`~graphormer_urpe.training.loop`) is one object whose methods live in
modules of one concept each, every one a base class of the run on top of :class:`RunState`:

* :mod:`.run_setup`: data, model, loaders, optimizer, targets and baselines;
* :mod:`.run_budget`: measured costs, the plan that fills a time limit, the pace;
* :mod:`.run_plan`: the plan line (the duration the run expects, then the set-up's lines);
* :mod:`.run_checkpoints`: checkpoints, resuming, reads of the device totals;
* :mod:`.run_epochs`: the epoch and step loop with its validations;
* :mod:`.run_report`: the test at the best checkpoint and ``metrics.json`` (``history.csv``:
  :mod:`.history`).

Their log lines keep the name of the training loop's logger, whichever module writes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..graph.model import Graphormer
from ..io.checkpoint import CheckpointKeeper
from ..runtime.capture import CaptureBackend, CapturedForward, CapturedStep
from ..runtime.config import TrainConfig
from ..runtime.distributed import DistContext
from ..runtime.precision import Precision
from ..runtime.sampler import EpochBatchSampler
from .budget import Pacer, RunCosts, Schedule
from .history import History
from .steps import StepTotals

if TYPE_CHECKING:
    from ..datasets import DatasetSplits
    from .run_trees import RunTrees

__all__ = ["RunState", "log"]

log = logging.getLogger(__package__ + ".loop")
"""The run's logger, named after the training loop (:mod:`~graphormer_urpe.training.loop`)."""


class RunState:
    """The attributes of a training run, set up by its ``__init__`` (and a checkpoint)."""

    # the launch
    config: TrainConfig
    ctx: DistContext
    device: torch.device
    main: bool  # rank 0: the process that writes files
    stop: dict[str, int]  # {"signal": the stop request's signal number, 0: none}
    now: Callable[[], float]  # the run's clock (time.perf_counter)
    launch_start: float  # the clock reading the time limit counts from
    no_time: str | None  # why the time limit leaves no time to train
    out: Path
    made: Path  # the topmost folder the run created (``out`` or a parent: runs/)
    keeper: CheckpointKeeper
    precision: Precision

    # data and model
    splits: DatasetSplits
    domain: dict[str, Any] | None
    model: Graphormer
    net: nn.Module  # the model as trained (DDP, compiled)
    init_report: Any  # --init-from's report, or None
    trees: RunTrees | None  # the trees head (config.trees == "on")
    trees_record: dict[str, Any]  # what metrics.json records of the trees' blend
    n_params: int
    backend: CaptureBackend | None  # None: steps run eagerly
    forward: CapturedForward | None  # captured evaluation passes
    workers: int
    sampler: EpochBatchSampler
    train_loader: DataLoader
    eval_loaders: dict[str, tuple[DataLoader, Tensor]]

    # loss, targets and selection
    loss_kind: str
    loss_scale: Tensor | None  # [T]: standardised loss
    metric: str
    higher: bool
    mean: Tensor  # [1, T]
    targets: dict[str, Tensor]
    baseline: dict[str, float | None]
    test_labelled: bool

    # plan, budget and optimizer
    costs: RunCosts | None
    pacer: Pacer | None
    total: int
    epochs: int
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    scheduler: torch.optim.lr_scheduler.LRScheduler
    totals: StepTotals
    stepper: CapturedStep
    read_every: int
    _after_plan: list[str]  # set-up lines: the plan's duration comes first
    _plan_pending: int | None  # the warm-up steps, while the plan line waits for timed steps
    _first_steps: tuple[float, int] | None

    # the position and what has been recorded so far (a checkpoint restores them)
    epoch: int
    start_batch: int
    step: int
    best: float
    best_epoch: int
    best_metrics: dict[str, float]
    train_seconds: float
    train_graphs: int
    loss_sum: float
    loss_count: int
    history: History
    timed_out: bool
    wall_start: float
    on_epoch: Callable[[int, dict[str, float]], None] | None  # after each validated epoch
