"""One training run as a :class:`Trainer` made of parts you can see.

Setting a trainer up (its ``__init__``, in the order that keeps runs reproducible) loads the
data, builds the model, measures and plans, and restores a checkpoint when resuming; then
:meth:`Trainer.run` trains and reports. The parts, each handed what it needs:

* :class:`~graphormer_urpe.training.run_budget.RunBudget`: the measured costs (a
  :class:`~graphormer_urpe.training.run_costs.CostProbe` measures them), the steps that fill a
  time limit, the pace;
* :class:`~graphormer_urpe.training.run_plan.PlanLog`: the plan line;
* :class:`~graphormer_urpe.training.run_checkpoints.RunCheckpoints`: writing and restoring;
* :class:`~graphormer_urpe.training.run_epochs.EpochLoop`: the epochs, steps and validations;
* :class:`~graphormer_urpe.training.run_report.RunReport`: the test and ``metrics.json``;
* :class:`~graphormer_urpe.training.run_trees.RunTrees`: the trees head, when the run has one.

What they share is in the dataclasses of :mod:`~graphormer_urpe.training.run_state`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..io.checkpoint import CheckpointKeeper, write_atomic
from ..runtime.capture import CapturedForward
from ..runtime.distributed import DistContext
from ..runtime.precision import Precision
from ..runtime.run_inputs import default_loss, seed_everything, selection_metric
from ..runtime.train_config import TrainConfig, plan_steps, resolve_mol_features, resolve_trees
from . import run_setup as setup
from .history import History
from .pacing import RunCosts
from .run_budget import RunBudget
from .run_checkpoints import RunCheckpoints
from .run_costs import CostProbe, StepMaker
from .run_epochs import EpochHook, EpochLoop
from .run_plan import PlanLog
from .run_report import RunReport
from .run_state import Clock, RunData, RunLaunch, RunModel, RunParts, RunProgress
from .run_trees import RunTrees

__all__ = ["READ_EVERY", "Trainer"]

READ_EVERY = 100
"""Training steps between two reads of the running loss by the host (see ``train_step``)."""


class Trainer:
    """One training run (see :func:`~graphormer_urpe.training.run.train`), set up.

    Args:
        config: the run.
        ctx: the processes (:func:`~graphormer_urpe.runtime.distributed.init_distributed`).
        stop: the stop request (:func:`~graphormer_urpe.io.checkpoint.stop_requests`).
        resume: continue from the newest checkpoint in ``config.out`` when there is one.
        started: the clock reading ``config.time_limit`` counts from (default: now).
        costs: the run's costs measured earlier (an ensemble measures once).
        on_epoch: called after each validated epoch (see ``train``).
        clock: seconds on a monotonic clock (default ``time.perf_counter``).
        probe: makes the part that measures the costs (:class:`CostProbe`'s arguments).
        backend: chooses how steps are captured
            (:func:`~graphormer_urpe.training.run_setup.capture_backend`'s arguments).

    Attributes:
        launch, model, data, optim, progress: the shared parts (:mod:`.run_state`).
        budget, plan, checkpoints, epochs, report: the collaborators; ``trees`` the trees
        head (``None`` without one); ``history`` the per-epoch rows; ``folder`` the run's
        folder, which :meth:`discard` removes.
    """

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        stop: dict[str, int],
        *,
        resume: bool = False,
        started: float | None = None,
        costs: RunCosts | None = None,
        on_epoch: EpochHook | None = None,
        clock: Clock | None = None,
        probe: type[CostProbe] = CostProbe,
        backend: setup.BackendChoice = setup.capture_backend,
    ) -> None:
        clock = clock or time.perf_counter
        start = clock() if started is None else started
        keeper = CheckpointKeeper(Path(config.out), config.keep_checkpoints)
        config, ckpt, ckpt_path = setup.resumed_config(config, keeper, resume)
        self.launch = self._launch(config, ctx, stop, clock, start, fresh=ckpt is None)
        notes: list[str] = []  # set-up lines, logged after the plan's duration
        self._set_up_model_and_data(ckpt, backend, notes)
        measure = probe(*self._probe_parts()).measure
        self.budget = RunBudget(self.launch, self.data.steps_per_epoch, costs, measure)
        warmup = self._plan()
        self.optim = setup.make_run_optimizer(
            self.launch.config, self.model.model, ckpt, ckpt_path, warmup, self.progress.total,
            ctx.device,
        )  # fmt: skip
        self.parts = RunParts(self.launch, self.model, self.data, self.optim, self.progress)
        self.plan = PlanLog(self.parts, self.costs, notes)
        self.plan.log(warmup)
        self.history = History(self.launch.out, [], write=self.launch.main)
        self.checkpoints = RunCheckpoints(self.parts, keeper, self.history)
        if ckpt is not None:
            for row in self.checkpoints.restore(ckpt, ckpt_path):
                self.history.add(row)
        self._set_up_step()
        self.epochs = EpochLoop(
            self.parts, self.history, self.checkpoints, self.budget, self.plan, on_epoch
        )
        self.report = RunReport(self.parts, self.history, self.budget, self.trees)

    @staticmethod
    def _launch(
        config: TrainConfig,
        ctx: DistContext,
        stop: dict[str, int],
        clock: Clock,
        start: float,
        fresh: bool,
    ) -> RunLaunch:
        """The launch of ``config`` (resolved), with the RNG seeded and the threads set."""
        config = resolve_mol_features(config)  # config.json records the kind used
        config = resolve_trees(config, ctx.enabled)
        if config.init_from and fresh:  # before any data is loaded or folder made
            from .pretrained import check_init_source

            check_init_source(config.init_from)
        precision = Precision(config.precision, ctx.device)
        seed_everything(config.seed)
        if config.threads:
            torch.set_num_threads(config.threads)
        return RunLaunch(config, ctx, stop, clock, start, Path(config.out), precision)

    def _set_up_model_and_data(
        self, ckpt: dict[str, Any] | None, backend: setup.BackendChoice, notes: list[str]
    ) -> None:
        """The splits, the run's folder, the model (and trees head), the loaders, targets."""
        launch = self.launch
        config, ctx = launch.config, launch.ctx
        splits = setup.load_run_splits(config, ctx)
        domain = setup.domain_record(splits, launch.clock, notes) if launch.main else None
        self.folder = setup.RunFolder(launch.out, launch.main)  # once the data loaded
        model, init_report = setup.build_run_model(config, ckpt, splits, notes)
        model = model.to(launch.device)
        self.trees: RunTrees | None = None
        if config.trees == "on":
            self.trees = setup.fit_trees(launch, splits, model, ckpt is None, notes)
        loss = config.loss or default_loss(splits)
        launch.config = replace(config, model=model.config, loss=loss)  # config.json: both
        metric = selection_metric(splits, loss)
        if ctx.enabled:  # different dropout masks per process
            torch.manual_seed(launch.config.seed * 1_000 + ctx.rank)
        chosen = backend(launch.config, ctx, launch.precision)  # None: steps run eagerly
        forward = None  # captured evaluation passes
        if chosen is not None:
            autocast = launch.precision.autocast
            forward = CapturedForward(model, lambda: autocast(False), launch.device, chosen)
        self.model = RunModel(model, chosen, forward, init_report)
        static = chosen is not None
        self.data = setup.make_run_data(launch, splits, model, static, domain, metric)

    def _probe_parts(self) -> tuple[RunLaunch, RunModel, RunData, StepMaker]:
        """What the cost probe is made of: the run's parts and a maker of its step."""

        def make_step(net, optimizer, scheduler, totals, precision):
            return setup.make_stepper(
                self.launch, self.data, self.model.backend, net, optimizer, scheduler, totals,
                precision,
            )  # fmt: skip

        return self.launch, self.model, self.data, make_step

    def _plan(self) -> int:
        """The steps to train (filling the time limit when asked), the progress, the pacer
        and ``config.json``; returns the warm-up steps."""
        launch = self.launch
        config = launch.config
        if config.fill_time_limit and config.max_steps is None:
            steps = self.budget.steps_for_budget()
            config = replace(config, max_steps=steps, epochs=None)
        total, epochs, warmup = plan_steps(config, self.data.steps_per_epoch)
        launch.config = replace(config, warmup_steps=warmup)  # config.json records it
        self.progress = RunProgress(total, epochs, self.data.higher)
        self.budget.start_pacer()
        if launch.main:
            write_atomic(launch.out / "config.json", launch.config.to_json())
        return warmup

    def _set_up_step(self) -> None:
        """The model as trained, and its step. Steps read nothing back from the device; the
        host reads the running totals every :data:`READ_EVERY` steps, at checkpoints, at stop
        requests and at epoch ends. Without the fused AdamW (which skips updates after a
        non-finite loss on the device), they are read after every step, so that a non-finite
        loss stops the run at once."""
        launch, optim = self.launch, self.optim
        self.model.net = setup.wrap_model(self.model.model, launch.config, launch.ctx)
        optim.read_every = READ_EVERY if optim.optimizer.defaults.get("fused") else 1
        if launch.ctx.enabled and launch.config.time_limit:  # all stop at the same step
            optim.read_every = 1
        optim.stepper = setup.make_stepper(
            launch, self.data, self.model.backend, self.model.net, optim.optimizer,
            optim.scheduler, optim.totals, launch.precision,
        )  # fmt: skip

    @property
    def config(self) -> TrainConfig:
        """The resolved config (what ``config.json`` holds)."""
        return self.launch.config

    @property
    def costs(self) -> RunCosts | None:
        """The measured costs (``None``: not measured)."""
        return self.budget.costs

    @property
    def no_time(self) -> str | None:
        """Why the time limit leaves no time to train (``None``: it does)."""
        return self.budget.no_time

    def run(self, progress: bool = True) -> dict[str, Any]:
        """Train from the starting point (validated first with ``--init-from``), then test
        the best checkpoint; returns the ``metrics.json`` contents."""
        self.epochs.evaluate_starting_point()
        self.epochs.fit(progress)
        return self.report.finish()

    def discard(self) -> None:
        """Remove what setting up this run wrote, for a run refused before its first step."""
        if self.launch.main:
            self.history.close()
        self.folder.discard()
