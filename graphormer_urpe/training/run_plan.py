"""A training run's plan line: the duration it expects (from its measured costs, or timed
over its first steps), its data, model and schedule, then the set-up's own lines."""

from __future__ import annotations

import math

from .run_state import RunState, log

__all__ = ["RunPlan", "TIMED_STEPS"]


TIMED_STEPS = 5
"""A run without measured costs logs its plan, with the duration it expects, once this many
of its own steps (after the first) are timed."""


class RunPlan(RunState):
    """The plan a run logs before (or, timed over its first steps, early in) training."""

    def _log_plan(self, warmup: int, step_s: float | None = None) -> None:
        """The run's plan, starting with the duration it expects: from the measured costs,
        or from ``step_s``, its first steps' seconds each (without either, the line waits
        for :data:`TIMED_STEPS` steps, see :meth:`_train_epoch`)."""
        if self.costs is None and step_s is None:
            self._plan_pending = warmup
            return
        self._plan_pending = None
        splits, config = self.splits, self.config
        log.info(
            "%s%s: %d/%d/%d graphs, %d targets, %s features | %s %s, %d parameters | %d steps "
            "(%d epochs x %d), warm-up %d, %s x %d process(es) = %s graphs per step, "
            "peak lr %.2g, device %s, %s",
            self._expected(step_s),
            splits.name,
            len(splits.train),
            len(splits.valid),
            len(splits.test),
            splits.num_targets,
            splits.featurizer,
            config.preset,
            self.model.config.attention,
            self.n_params,
            self.total,
            self.epochs,
            len(self.sampler),
            warmup,
            f"batch {config.batch_size}"
            if config.max_tokens is None
            else f"batches of at most {config.max_tokens} tokens",
            self.ctx.world_size,
            ("" if config.max_tokens is None else "about ") + str(self.sampler.global_batch_size),
            config.lr,
            self.device,
            self.precision.kind,
        )
        for line in self._after_plan:
            log.info("%s", line)
        self._after_plan.clear()
        if config.time_limit is not None and config.fill_time_limit:
            log.info(
                "time limit %g min: the %d steps above are planned to fill it; the run still "
                "stops after the step that spends it",
                config.time_limit,
                self.total,
            )
        elif config.time_limit is not None:
            log.info(
                "time limit %g min: the learning-rate schedule stays planned over the %d steps "
                "above; the run stops after the step that spends the budget, wherever the "
                "schedule is",
                config.time_limit,
                self.total,
            )

    def _expected(self, step_s: float | None) -> str:
        """``"expected to take about X min here | "``: from the measured costs, or from
        ``step_s`` seconds per step (an evaluation batch taken as a third of a step)."""
        left = self.total - getattr(self, "step", 0)
        if self.costs is not None:
            seconds, how = self.costs.seconds_for(left), "measured"
        else:
            assert step_s is not None
            valid, test = (len(self.eval_loaders[n][0]) for n in ("valid", "test"))
            evals = math.ceil(left / len(self.sampler)) / self.config.eval_every
            seconds = step_s * (left + (evals * valid + test) / 3)
            how = "from its first steps"
        seconds += self.now() - self.launch_start
        if self.config.time_limit is not None:
            seconds = min(seconds, 60 * self.config.time_limit)
        return f"expected to take about {seconds / 60:.1f} min here ({how}) | "

    def _time_first_steps(self) -> None:
        """Log the pending plan once :data:`TIMED_STEPS` steps after the first are timed (or
        the run's steps are all done)."""
        now = self.now()
        if self._first_steps is None:  # the first step (warm-up of caches and kernels) aside
            self._first_steps = (now, self.step)
            return
        since, first = self._first_steps
        if self.step - first >= TIMED_STEPS or self.step >= self.total:
            step_s = (now - since) / max(1, self.step - first)
            self._log_plan(self._plan_pending, step_s)
