"""A training run's time budget: what its parts cost on this machine (measured before it
trains), the steps that fill ``--time-limit``, and the pace that may re-plan them
(:mod:`~graphormer_urpe.training.budget` holds the arithmetic)."""

from __future__ import annotations

import copy
import logging
import math
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..io.checkpoint import rng_state, save_checkpoint, set_rng_state
from ..runtime.loaders import read_graphs
from ..runtime.precision import Precision
from .budget import MIN_USEFUL_EPOCHS, Pacer, RunCosts, epochs_of
from .run_state import RunState, log
from .steps import StepTotals, make_optimizer, parameter_groups

__all__ = ["RunBudget", "PACE_WINDOW"]


PACE_WINDOW = 5.0
"""Seconds of steps over which a time-limited run measures its pace."""


def batch_work(sizes: np.ndarray, index: Sequence[int]) -> float:
    """A batch's padded size, ``B (n + 1)^2`` for its ``B`` graphs of at most ``n`` atoms
    (``sizes``: every graph's atom count): what its time follows."""
    index = np.asarray(index, dtype=np.int64)
    return float(index.size * (int(sizes[index].max()) + 1) ** 2) if index.size else 0.0


class RunBudget(RunState):
    """The costs, plan and pace of a run with a time limit."""

    def _out_of_time(self) -> bool:
        """Whether ``--time-limit`` leaves just the time to finish (the last validation, the
        best and last checkpoints, the test), at the pace the steps now run."""
        return self.pacer is not None and self.pacer.time_up(self.now())

    def _costs(self, given: RunCosts | None) -> RunCosts | None:
        """The run's measured costs: ``given`` (an ensemble's, measured once), else measured
        here when the run has a time limit; ``None`` without one (the run then times its own
        first steps for the duration it expects, :meth:`_log_plan`)."""
        if given is not None:  # (this run's own set-up; no measurement)
            return replace(given, setup=self.now() - self.launch_start, measure=0.0)
        if self.config.time_limit is None:
            return None
        return self._measure_costs()

    def _measure_costs(self) -> RunCosts:
        """What the run's parts cost on this machine (rank 0's measurement on every process).

        A few random batches of each split are timed (their own generator: the run's RNG is
        left as it was, so the run is the one ``--max-steps`` with the planned number gives):
        training steps (reading and collating a batch, forward, backward, clipping and the
        AdamW update, on a copy of the model; without DDP's gradient exchange), validation
        batches and a checkpoint write. A batch's time follows its padded size, ``B (n + 1)^2``
        for ``B`` graphs of at most ``n`` atoms (a batch holding one large molecule takes
        several times the median), so the seconds per unit of that size, measured, are
        applied to the sizes of the first epoch's batches and of the validation and test
        batches.
        """
        from ..datasets import graph_sizes

        splits, ctx = self.splits, self.ctx
        setup = self.now() - self.launch_start
        saved = rng_state(self.device)
        train_sizes = graph_sizes(splits.train)
        per_work, save_s = self._seconds_per_step(train_sizes)
        epoch = [b[ctx.rank :: ctx.world_size] for b in self.sampler.global_batches(0)]
        step_s = per_work * float(np.mean([batch_work(train_sizes, b) for b in epoch]))
        eval_s = {}
        for name in ("valid", "test"):
            dataset = getattr(splits, name)
            sizes = graph_sizes(dataset)
            loader = self.eval_loaders[name][0]
            work = sum(batch_work(sizes, b) for b in loader.batch_sampler)
            per_work = self._seconds_per_eval(dataset, sizes, loader.batch_sampler)
            eval_s[name] = per_work * work if work else 0.0
        set_rng_state(saved, self.device)
        measure = self.now() - self.launch_start - setup
        measured = [step_s, eval_s["valid"], eval_s["test"], save_s, setup, measure]
        shared = ctx.all_sum(torch.tensor([v if self.main else 0.0 for v in measured]).double())
        step_s, valid_s, test_s, save_s, setup, measure = (float(v) for v in shared)
        test_s = test_s if self.test_labelled else 0.0
        steps, every = len(self.sampler), self.config.eval_every
        return RunCosts(step_s, valid_s, test_s, save_s, steps, every, setup, measure)

    def _steps_for_budget(self) -> int:
        """Optimizer steps that fill what is left of ``--time-limit`` (rank 0's plan): the
        measured costs (:meth:`_measure_costs`) share the budget left between the steps, each
        epoch's checkpoint, a validation (and a best checkpoint) every ``eval_every`` epochs
        and the finish, less a reserve (:class:`~graphormer_urpe.training.budget.Pacer`)."""
        config, costs = self.config, self.costs
        assert costs is not None
        budget = 60 * config.time_limit
        left = budget - (self.now() - self.launch_start)
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
        steps = int(self.ctx.all_sum(torch.tensor([float(steps if self.main else 0)]))[0])
        epochs = steps / len(self.sampler)
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
        steps = math.ceil(epochs * len(self.sampler))
        return (self.costs.setup + self.costs.seconds_for(steps)) / 60

    def _pacer(self) -> Pacer | None:
        """The deadline keeper of a run with a time limit (and measured costs)."""
        if self.config.time_limit is None or self.costs is None:
            return None
        budget = 60 * self.config.time_limit
        return Pacer(self.launch_start + budget, replace(self.costs), budget, PACE_WINDOW)

    def _samples(
        self, dataset: Dataset, count: int, batches: Sequence[Sequence[int]] = ()
    ) -> list[list[int]]:
        """``count`` batches' worth of random indices of ``dataset`` (fixed by the run's
        seed, apart from its RNG); with a token budget, ``count`` of its ``batches`` (the
        measurement's unit, the padded size, follows their sizes)."""
        rng = np.random.default_rng(self.config.seed)
        if self.config.max_tokens is not None and len(batches):
            picks = rng.choice(len(batches), size=count, replace=len(batches) < count)
            return [list(batches[k]) for k in picks]
        n = min(len(dataset), self.config.batch_size)
        return [rng.choice(len(dataset), size=n, replace=False).tolist() for _ in range(count)]

    def _seconds_per_step(self, sizes: np.ndarray, batches: int = 5) -> tuple[float, float]:
        """Seconds of a training step per unit of padded batch size (:func:`batch_work`), over
        ``batches`` random batches on a copy of the model (one untimed step first; when the
        run captures its steps, every batch's shape is warmed up and captured first), and the
        seconds of writing a checkpoint of the copy's weights and optimizer state."""
        config, static = self.config, self.backend is not None
        collate = self._run_collator()
        probe = copy.deepcopy(self.model).train()
        groups = parameter_groups(probe, config.weight_decay, config.urpe_weight_decay)
        opt = make_optimizer(groups, config.lr, config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        precision, totals = Precision(self.precision.kind, self.device), StepTotals(self.device)
        step = self._stepper(probe, opt, sched, totals, precision)
        epoch = [b[self.ctx.rank :: self.ctx.world_size] for b in self.sampler.global_batches(0)]
        samples = self._samples(self.splits.train, batches + 1, epoch)
        warm = samples[:1]
        if static:  # each shape warmed up and captured, as the run will have it
            warm = [i for i in samples for _ in range(step.cycle.warmup + 1)]
        for i, index in enumerate(warm):
            step(collate(read_graphs(self.splits.train, index)), i)
        seconds = work = 0.0
        for i, index in enumerate(samples[1:]):
            start = self.now()
            step(collate(read_graphs(self.splits.train, index)), i)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds, work = seconds + self.now() - start, work + batch_work(sizes, index)
        save_s = 0.0
        if self.main:
            with tempfile.TemporaryDirectory(dir=self.out) as tmp:
                start = self.now()
                state = {"model": probe.state_dict(), "optimizer": opt.state_dict()}
                save_checkpoint(Path(tmp) / "probe.pt", state)
                save_s = self.now() - start
        return seconds / work, save_s

    def _seconds_per_eval(
        self, dataset: Dataset, sizes: np.ndarray, split: Sequence[Sequence[int]], batches: int = 3
    ) -> float:
        """Seconds per unit of padded batch size (:func:`batch_work`) to read, collate and run
        (forward only) ``batches`` random batches of ``dataset`` (with a token budget, of
        ``split``, its loader's batches); one untimed batch first (every batch warmed up and
        captured first, when the run captures)."""
        if len(dataset) == 0:
            return 0.0
        collate = self._run_collator()
        self.model.eval()
        samples = self._samples(dataset, batches + 1, split)
        warm = samples[:1]
        if self.forward is not None:
            warm = [i for i in samples for _ in range(self.forward.cycle.warmup + 1)]
        seconds = work = 0.0
        for i, index in enumerate(warm + samples[1:]):
            start = self.now()
            batch = collate(read_graphs(dataset, index))
            if self.forward is not None:
                self.forward(batch)
            else:
                with torch.no_grad(), self.precision.autocast():
                    self.model(batch.to(self.device))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            if i >= len(warm):
                seconds, work = seconds + self.now() - start, work + batch_work(sizes, index)
        self.model.train()
        return seconds / work

    def _replan(self) -> None:
        """A run planned to fill its time limit, whose steps now run at another pace than
        measured: plan the steps that fit from here (the schedule's decay ends there)."""
        if not self.config.fill_time_limit or self.ctx.enabled or self.pacer is None:
            return  # (processes would have to agree on the plan: they keep it)
        now = self.now()
        total = self.step + self.pacer.steps_left(now)
        if not self.pacer.replans.worth(self.total, total):
            return
        level = logging.INFO if self.pacer.replans.log_now(now) else logging.DEBUG
        log.log(
            level,
            "steps at %.2fx the measured time: re-planned from %d to %d steps to end within "
            "--time-limit %g",
            self.pacer.slowdown, self.total, max(total, self.step), self.config.time_limit,
        )  # fmt: skip
        self.schedule.replan(self.step, total)
        self.total = max(total, self.step)
        self.epochs = epochs_of(self.total, len(self.sampler))
