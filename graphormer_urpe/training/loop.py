"""The training loop: AdamW, linear warm-up + linear decay, masked L1/MSE/BCE, best-checkpointing.

:func:`train` runs a whole experiment from a :class:`~graphormer_urpe.runtime.config.TrainConfig`
and writes into ``config.out``:

* ``config.json``: the resolved config (model included)
* ``history.csv``: one row per evaluated epoch (TensorBoard events too when installed)
* ``checkpoints/step-<step>.pt``: rolling checkpoints (the newest ``keep_checkpoints``), written
  at every epoch end and every ``checkpoint_every`` steps, each holding model, optimizer,
  scheduler, grad scaler, every process's RNG states and the data position (epoch, batch);
  ``last.pt`` is the newest of them and ``best.pt`` the best validation epoch (all atomic,
  loaded with ``torch.load(weights_only=True)``). SIGTERM / SIGINT save one at the current
  step before stopping; ``resume=True`` continues exactly where a checkpoint left off.
* ``metrics.json``: dataset, attention, preset, parameters, steps, epochs,
  ``best_valid_<metric>``, ``test_<metric>`` at the best checkpoint (only when the test split
  has labels: ``test_has_labels``), the mean-predictor baseline, wall time and training graphs
  per second.

A pretraining set (``pretrain:PATH``, see :mod:`graphormer_urpe.datasets.pretrain`) is trained
like any multi-target regression; its checkpoints also hold ``"pretrain"`` (the descriptor
names, their normalisation and the RDKit version), and its test split writes no
``test_predictions.csv``.

The dataset decides the loss and the selection rule: ``task_type == "binary"`` trains one
logit per task with BCE (missing labels masked), otherwise ``config.loss`` (by default MSE for
``csv:`` datasets, selected on RMSE, and L1 for the benchmarks, selected on their metric); the
best checkpoint maximises the metric when ``higher_is_better`` (ROC-AUC, AP) and minimises it
otherwise. A ``csv:`` regression also standardises its targets (``normalize_targets``): the
model's head predicts ``(y - mean) / std`` of the training split, the loss is taken in those
units, and the model returns predictions in the targets' own.

A run is the object ``_Run``: its ``__init__`` is here, its phases live in modules of their
own (:mod:`~graphormer_urpe.training.run_state` lists them); the step, the loaders, the
predictions and the run's inputs are in :mod:`.steps`, :mod:`.loaders`, :mod:`.prediction`
and :mod:`.inputs`, and their names stay importable from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..attention.kernel_choice import attention_kernel
from ..inference.prediction import predict, predict_dataset
from ..io.checkpoint import CheckpointKeeper, TrainingInterrupted, stop_requests, write_atomic
from ..runtime.capture import CapturedForward
from ..runtime.config import TrainConfig, plan_steps, resolve_mol_features, resolve_trees
from ..runtime.distributed import DistContext, init_distributed
from ..runtime.inputs import _default_loss as _default_loss
from ..runtime.inputs import (
    build_model,
    dataset_targets,
    load_splits,
    resolve_device,
    seed_everything,
    selection_metric,
)
from ..runtime.loaders import _eval_loader as _eval_loader
from ..runtime.loaders import _read as _read
from ..runtime.loaders import loader_workers as loader_workers
from ..runtime.loaders import make_loader
from ..runtime.precision import Precision
from .budget import NoTimeToTrain, RunCosts
from .history import _History as _History
from .run_budget import PACE_WINDOW as PACE_WINDOW
from .run_budget import RunBudget
from .run_budget import _work as _work
from .run_checkpoints import RunCheckpoints
from .run_checkpoints import _portable as _portable
from .run_epochs import RunEpochs
from .run_plan import TIMED_STEPS as TIMED_STEPS
from .run_plan import RunPlan
from .run_report import RunReport
from .run_setup import _PER_LAUNCH_FIELDS as _PER_LAUNCH_FIELDS
from .run_setup import RunSetup, first_missing
from .run_state import log as log
from .steps import (
    StepTotals,
    linear_schedule,
    make_optimizer,
    masked_loss,
    parameter_groups,
    step_body,
    train_step,
)

__all__ = [
    "train",
    "TrainingInterrupted",
    "stop_requests",
    "predict",
    "masked_loss",
    "linear_schedule",
    "resolve_device",
    "Precision",
    "build_model",
    "make_optimizer",
    "parameter_groups",
    "load_splits",
    "make_loader",
    "dataset_targets",
    "seed_everything",
    "train_step",
    "step_body",
    "predict_dataset",
    "StepTotals",
]


READ_EVERY = 100
"""Training steps between two reads of the running loss by the host (see :func:`train_step`)."""


def train(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    started: float | None = None,
    costs: RunCosts | None = None,
    check: Callable[[Any], None] | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train, select on the validation split, test at the best checkpoint; see module doc.

    Under ``torchrun`` (``WORLD_SIZE > 1`` in the environment) this runs distributed data
    parallel: ``config.batch_size`` graphs per process and step, metrics over whole splits,
    rank 0 writing everything.

    Args:
        config: the run.
        resume: continue from the newest checkpoint in ``config.out`` when there is one (the
            saved config wins, except for ``out``, ``device`` and the checkpointing fields).
        progress: show a tqdm progress bar.
        started: the ``time.perf_counter()`` from which ``config.time_limit`` counts (default:
            now; the command line passes its own start).
        costs: the run's costs measured earlier (an ensemble measures once); ``None``:
            measured here where needed (:class:`~graphormer_urpe.training.budget.RunCosts`).
        check: called with the set-up run before its first step (it may refuse the plan by
            raising).
        on_epoch: called after each validated epoch, once its history row and checkpoint
            are written, with the epoch and every validation metric of it (the selection
            metric among them) and ``progress``, the share of the planned steps done; an
            exception it raises ends the run there and reaches the
            caller (a hyper-parameter search prunes a trial this way).

    Returns:
        The ``metrics.json`` contents (``measured_costs`` among them).

    Raises:
        TrainingInterrupted: SIGTERM or SIGINT arrived; a checkpoint was saved first.
        RuntimeError: the loss became non-finite (the last good state is in ``nonfinite.pt``).
        NoTimeToTrain: the time limit went to loading the data and measuring.
    """
    ctx = init_distributed(resolve_device(config.device))
    try:
        with stop_requests() as stop, attention_kernel(config.attention_kernel):
            run = _Run(config, ctx, resume, stop, started, costs)
            run.on_epoch = on_epoch
            if check is not None:
                check(run)
            if run.no_time is not None:
                run.discard()
                raise NoTimeToTrain(run.no_time)
            run.evaluate_starting_point()
            run.fit(progress)
            return run.finish()
    finally:
        ctx.close()


class _Run(RunSetup, RunBudget, RunPlan, RunCheckpoints, RunEpochs, RunReport):
    """One training run: what a checkpoint saves, and the phases that change it.

    ``__init__`` sets everything up (resumed from a checkpoint when asked), :meth:`fit` trains
    epoch by epoch, :meth:`finish` tests the best checkpoint and writes ``metrics.json``.
    """

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        resume: bool,
        stop: dict[str, int],
        started: float | None = None,
        costs: RunCosts | None = None,
    ) -> None:
        self.now = time.perf_counter  # the run's clock
        self.launch_start = self.now() if started is None else started
        self.no_time: str | None = None  # why the time limit leaves no time to train
        self.ctx, self.stop, self.device = ctx, stop, ctx.device
        self.main = ctx.is_main
        self.out = Path(config.out)
        self.keeper = CheckpointKeeper(self.out, config.keep_checkpoints)
        config, ckpt, ckpt_path = self._resumed_config(config, resume)
        config = resolve_mol_features(config)  # config.json records the kind used
        config = resolve_trees(config, ctx.enabled)
        if config.init_from and ckpt is None:  # before any data is loaded or folder made
            from .pretrained import check_init_source

            check_init_source(config.init_from)
        self.precision = Precision(config.precision, self.device)
        seed_everything(config.seed)
        if config.threads:
            torch.set_num_threads(config.threads)
        self.splits = self._load_splits(config)
        self._after_plan: list[str] = []  # set-up lines: the plan's duration comes first
        self.domain = self._domain_record() if self.main else None
        self.made = self.out.absolute()  # the topmost folder this run creates (discard removes it)
        if self.main:  # only once the data loaded: a failed start leaves no empty run folder
            self.made = first_missing(self.out)
            self.out.mkdir(parents=True, exist_ok=True)
        self.model, self.init_report = self._build_model(config, ckpt)
        self.trees = None
        if config.trees == "on":  # its passes draw nothing the network's training then lacks
            with torch.random.fork_rng(devices=[]):
                self.trees = self._fit_trees(config, ckpt is None)
        loss = config.loss or _default_loss(self.splits)
        self.config = replace(config, model=self.model.config, loss=loss)  # config.json: both
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.metric = selection_metric(self.splits, loss)
        if ctx.enabled:  # different dropout masks per process
            torch.manual_seed(self.config.seed * 1_000 + ctx.rank)
        self.backend = self._capture_backend()  # None: steps run eagerly
        self.forward = None  # captured evaluation passes
        if self.backend is not None:
            self.forward = CapturedForward(
                self.model, lambda: self.precision.autocast(False), self.device, self.backend
            )
        self._make_loaders()
        self._targets_and_baselines()
        self.costs = self._costs(costs)  # None: not measured (no time limit, a large model)
        if self.config.fill_time_limit and self.config.max_steps is None:
            steps = self._steps_for_budget()
            self.config = replace(self.config, max_steps=steps, epochs=None)
        self.total, self.epochs, warmup = plan_steps(self.config, len(self.sampler))
        self.config = replace(self.config, warmup_steps=warmup)  # config.json records it
        self.pacer = self._pacer()
        if self.main:
            write_atomic(self.out / "config.json", self.config.to_json())
        self._make_optimizer(ckpt, ckpt_path, warmup)
        self._log_plan(warmup)
        # the position and what has been recorded so far (a checkpoint restores them)
        self.epoch, self.start_batch, self.step = 0, 0, 0
        self.best, self.best_epoch = (-math.inf if self.higher else math.inf), -1
        self.best_metrics: dict[str, float] = {}  # every validation metric at the best epoch
        self.train_seconds, self.train_graphs = 0.0, 0
        self.loss_sum, self.loss_count = 0.0, 0  # the current epoch's training loss so far
        rows: list[dict[str, Any]] = []
        if ckpt is not None:
            rows = self._restore(ckpt, ckpt_path)
        self.history = _History(self.out, [], write=self.main)
        for r in rows:
            self.history.add(r)
        self.net = self._wrap(self.model)
        # Steps read nothing back from the device (see train_step); the host reads the running
        # totals every READ_EVERY steps, at checkpoints, at stop requests and at epoch ends.
        # Without the fused AdamW (which skips updates after a non-finite loss on the device),
        # they are read after every step, so that a non-finite loss stops the run at once.
        self.read_every = READ_EVERY if self.optimizer.defaults.get("fused") else 1
        if ctx.enabled and self.config.time_limit:  # all processes must stop at the same step
            self.read_every = 1
        self.totals = StepTotals(self.device)
        self.stepper = self._stepper(self.net, self.optimizer, self.scheduler, self.totals)
        self.timed_out = False
