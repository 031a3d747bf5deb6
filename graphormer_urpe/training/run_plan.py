"""A training run's plan line: the duration it expects (from its measured costs, or timed
over its first steps), its data, model and schedule, then the set-up's own lines."""

from __future__ import annotations

import math

from .pacing import RunCosts
from .run_state import RunParts, log

__all__ = ["PlanLog", "TIMED_STEPS"]


TIMED_STEPS = 5
"""A run without measured costs logs its plan, with the duration it expects, once this many
of its own steps (after the first) are timed."""


class PlanLog:
    """The plan a run (``run``, its ``costs`` measured or ``None``) logs before (or, timed
    over its first steps, early in) training.

    ``notes`` are the set-up's lines (the domain record, the targets' standardisation, the
    trees head), logged after the plan; ``pending`` holds the warm-up steps while the plan
    waits for :data:`TIMED_STEPS` timed steps (``None``: logged).
    """

    def __init__(self, run: RunParts, costs: RunCosts | None, notes: list[str]) -> None:
        self.launch, self.model, self.data, self.progress = (
            run.launch,
            run.model,
            run.data,
            run.progress,
        )
        self.costs, self.notes = costs, notes
        self.pending: int | None = None
        self.first_steps: tuple[float, int] | None = None

    def log(self, warmup: int, step_s: float | None = None) -> None:
        """Log the run's plan, starting with the duration it expects: from the measured
        costs, or from ``step_s``, its first steps' seconds each (without either, the line
        waits for :data:`TIMED_STEPS` steps, see :meth:`time_first_steps`)."""
        if self.costs is None and step_s is None:
            self.pending = warmup
            return
        self.pending = None
        launch, data, progress = self.launch, self.data, self.progress
        splits, config, sampler = data.splits, launch.config, data.sampler
        log.info(
            "%s%s: %d/%d/%d graphs, %d targets, %s features | %s %s, %d parameters | %d steps "
            "(%d epochs x %d), warm-up %d, %s x %d process(es) = %s graphs per step, "
            "peak lr %.2g, device %s, %s",
            self._expected(step_s), splits.name,
            len(splits.train), len(splits.valid), len(splits.test),
            splits.num_targets, splits.featurizer,
            config.preset, self.model.model.config.attention, self.model.n_params,
            progress.total, progress.epochs, len(sampler), warmup,
            f"batch {config.batch_size}"
            if config.max_tokens is None
            else f"batches of at most {config.max_tokens} tokens",
            launch.ctx.world_size,
            ("" if config.max_tokens is None else "about ") + str(sampler.global_batch_size),
            config.lr, launch.device, launch.precision.kind,
        )  # fmt: skip
        for line in self.notes:
            log.info("%s", line)
        self.notes.clear()
        self._log_time_limit()

    def _log_time_limit(self) -> None:
        config, total = self.launch.config, self.progress.total
        if config.time_limit is not None and config.fill_time_limit:
            log.info(
                "time limit %g min: the %d steps above are planned to fill it; the run still "
                "stops after the step that spends it",
                config.time_limit,
                total,
            )
        elif config.time_limit is not None:
            log.info(
                "time limit %g min: the learning-rate schedule stays planned over the %d steps "
                "above; the run stops after the step that spends the budget, wherever the "
                "schedule is",
                config.time_limit,
                total,
            )

    def _expected(self, step_s: float | None) -> str:
        """``"expected to take about X min here | "``: from the measured costs, or from
        ``step_s`` seconds per step (an evaluation batch taken as a third of a step)."""
        launch, progress, data = self.launch, self.progress, self.data
        left = progress.total - progress.step
        if self.costs is not None:
            seconds, how = self.costs.seconds_for(left), "measured"
        else:
            assert step_s is not None
            valid, test = (len(data.eval_loaders[n][0]) for n in ("valid", "test"))
            evals = math.ceil(left / data.steps_per_epoch) / launch.config.eval_every
            seconds = step_s * (left + (evals * valid + test) / 3)
            how = "from its first steps"
        seconds += launch.clock() - launch.started
        if launch.config.time_limit is not None:
            seconds = min(seconds, 60 * launch.config.time_limit)
        return f"expected to take about {seconds / 60:.1f} min here ({how}) | "

    def time_first_steps(self) -> None:
        """After a step: log the pending plan once :data:`TIMED_STEPS` steps after the first
        are timed (or the run's steps are all done)."""
        now, step = self.launch.clock(), self.progress.step
        if self.first_steps is None:  # the first step (warm-up of caches and kernels) aside
            self.first_steps = (now, step)
            return
        since, first = self.first_steps
        if step - first >= TIMED_STEPS or step >= self.progress.total:
            step_s = (now - since) / max(1, step - first)
            self.log(self.pending, step_s)
