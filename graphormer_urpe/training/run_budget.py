"""A training run's time budget: its measured costs, the steps that fill ``--time-limit``, and
the pace that may re-plan them (:mod:`~graphormer_urpe.training.pacing` holds the arithmetic,
:mod:`.run_costs` the measurement)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

import torch

from .pacing import MIN_USEFUL_EPOCHS, Pacer, RunCosts, epochs_of
from .run_state import RunLaunch, RunOptimizer, RunProgress, log

__all__ = ["PACE_WINDOW", "RunBudget"]


PACE_WINDOW = 5.0
"""Seconds of steps over which a time-limited run measures its pace."""


class RunBudget:
    """The costs, plan and pace of a run (``launch``) of ``steps_per_epoch`` steps an epoch.

    ``costs`` are the run's measured costs: ``given`` (an ensemble's, measured once), else
    ``measure()``'s when the run has a time limit; ``None`` without one (the run then times
    its own first steps for the duration it expects). ``no_time`` says why the time limit
    leaves no time to train (``None``: it does). ``pacer`` keeps the deadline once
    :meth:`start_pacer` made it.
    """

    def __init__(
        self,
        launch: RunLaunch,
        steps_per_epoch: int,
        given: RunCosts | None,
        measure: Callable[[], RunCosts],
    ) -> None:
        self.launch, self.steps_per_epoch = launch, steps_per_epoch
        self.no_time: str | None = None
        self.pacer: Pacer | None = None
        if given is not None:  # (this run's own set-up; no measurement)
            spent = launch.clock() - launch.started
            self.costs: RunCosts | None = replace(given, setup=spent, measure=0.0)
        elif launch.config.time_limit is None:  # None: not measured
            self.costs = None
        else:
            self.costs = measure()

    def out_of_time(self) -> bool:
        """Whether ``--time-limit`` leaves just the time to finish (the last validation, the
        best and last checkpoints, the test), at the pace the steps now run."""
        return self.pacer is not None and self.pacer.time_up(self.launch.clock())

    def steps_for_budget(self) -> int:
        """Optimizer steps that fill what is left of ``--time-limit`` (rank 0's plan): the
        measured costs share the budget left between the steps, each epoch's checkpoint, a
        validation (and a best checkpoint) every ``eval_every`` epochs and the finish, less a
        reserve (:class:`~graphormer_urpe.training.pacing.Pacer`); sets :attr:`no_time` when
        nothing fits."""
        launch, costs = self.launch, self.costs
        config = launch.config
        assert costs is not None
        budget = 60 * config.time_limit
        left = budget - (launch.clock() - launch.started)
        reserve = Pacer(0.0, costs, budget).reserve
        steps = costs.steps_for(left - reserve)
        if steps < 1:  # the data (a store built on this call) took the budget
            self.no_time = (
                f"--time-limit {config.time_limit:g}: {(budget - left) / 60:.2f} min went to "
                f"loading the data and measuring, leaving no time to train and test "
                f"({costs.finish:.3g} s for the final validation and test); the data's store "
                "is kept, so the same command now starts faster, or give a longer budget"
            )
            steps = 1
        mine = float(steps if launch.main else 0)
        steps = int(launch.ctx.all_sum(torch.tensor([mine]))[0])
        epochs = steps / self.steps_per_epoch
        if self.no_time is not None:
            return steps  # refused: no plan to log
        log.info(
            "time limit %g min without --epochs/--max-steps: %.3g s per step, %.3g s per "
            "validation and %.3g s per checkpoint measured; planned %d steps (%.1f epochs) "
            "to fill the %.3g min left",
            config.time_limit, costs.step, costs.valid, costs.save, steps, epochs, left / 60,
        )  # fmt: skip
        if epochs < MIN_USEFUL_EPOCHS:
            log.warning(
                "only %.1f epochs fit in --time-limit %g: a run this short is not worth much "
                "(%d epochs need about %.1f min here)",
                epochs, config.time_limit, MIN_USEFUL_EPOCHS, self.minutes_for(MIN_USEFUL_EPOCHS),
            )  # fmt: skip
        return steps

    def minutes_for(self, epochs: float) -> float:
        """Minutes a run of ``epochs`` epochs takes here, its set-up included."""
        assert self.costs is not None
        steps = math.ceil(epochs * self.steps_per_epoch)
        return (self.costs.setup + self.costs.seconds_for(steps)) / 60

    def start_pacer(self) -> None:
        """Make the deadline keeper of a run with a time limit (and measured costs)."""
        time_limit = self.launch.config.time_limit
        if time_limit is None or self.costs is None:
            return
        budget = 60 * time_limit
        start = self.launch.started
        self.pacer = Pacer(start + budget, replace(self.costs), budget, PACE_WINDOW)

    def replan(self, progress: RunProgress, optim: RunOptimizer) -> None:
        """A run planned to fill its time limit, whose steps now run at another pace than
        measured: plan the steps that fit from here (the schedule's decay ends there)."""
        config, pacer = self.launch.config, self.pacer
        if not config.fill_time_limit or self.launch.ctx.enabled or pacer is None:
            return  # (processes would have to agree on the plan: they keep it)
        now, step = self.launch.clock(), progress.step
        total = step + pacer.steps_left(now)
        if not pacer.replans.worth(progress.total, total):
            return
        level = logging.INFO if pacer.replans.log_now(now) else logging.DEBUG
        log.log(
            level,
            "steps at %.2fx the measured time: re-planned from %d to %d steps to end within "
            "--time-limit %g",
            pacer.slowdown, progress.total, max(total, step), config.time_limit,
        )  # fmt: skip
        optim.schedule.replan(step, total)
        progress.total = max(total, step)
        progress.epochs = epochs_of(progress.total, self.steps_per_epoch)
