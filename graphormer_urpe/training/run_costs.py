"""What a training run's parts cost on this machine, measured before it trains: a few training
steps on a copy of the model, a few evaluation batches and a checkpoint write
(:class:`~graphormer_urpe.training.pacing.RunCosts` holds the result).

:class:`CostProbe` is the part of a :class:`~graphormer_urpe.training.trainer.Trainer` that
measures; a test hands the trainer a probe of its own (fixed seconds) instead.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..io.checkpoint import rng_state, save_checkpoint, set_rng_state
from ..runtime.capture import CapturedStep
from ..runtime.loaders import read_graphs
from ..runtime.precision import Precision
from .pacing import RunCosts
from .run_state import RunData, RunLaunch, RunModel
from .steps import StepTotals, make_optimizer, parameter_groups

__all__ = ["CostProbe", "StepMaker", "batch_work"]

StepMaker = Callable[..., CapturedStep]
"""``(net, optimizer, scheduler, totals, precision)`` -> the run's training step of ``net``
(:func:`~graphormer_urpe.training.run_setup.make_stepper` with the run's other parts)."""


def batch_work(sizes: np.ndarray, index: Sequence[int]) -> float:
    """A batch's padded size, ``B (n + 1)^2`` for its ``B`` graphs of at most ``n`` atoms
    (``sizes``: every graph's atom count): what its time follows."""
    index = np.asarray(index, dtype=np.int64)
    return float(index.size * (int(sizes[index].max()) + 1) ** 2) if index.size else 0.0


class CostProbe:
    """Measures a run's costs (:meth:`measure`) from its parts: ``launch``, ``model``, ``data``
    and ``make_step``, which builds a training step like the run's."""

    def __init__(
        self, launch: RunLaunch, model: RunModel, data: RunData, make_step: StepMaker
    ) -> None:
        self.launch, self.model, self.data, self.make_step = launch, model, data, make_step

    def work(self, sizes: np.ndarray, index: Sequence[int]) -> float:
        """The unit a batch's time is measured in (:func:`batch_work`)."""
        return batch_work(sizes, index)

    def measure(self) -> RunCosts:
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

        launch, data, ctx = self.launch, self.data, self.launch.ctx
        setup = launch.clock() - launch.started
        saved = rng_state(launch.device)
        train_sizes = graph_sizes(data.splits.train)
        per_work, save_s = self.seconds_per_step(train_sizes)
        epoch = [b[ctx.rank :: ctx.world_size] for b in data.sampler.global_batches(0)]
        step_s = per_work * float(np.mean([self.work(train_sizes, b) for b in epoch]))
        eval_s = {}
        for name in ("valid", "test"):
            dataset = getattr(data.splits, name)
            sizes = graph_sizes(dataset)
            loader = data.eval_loaders[name][0]
            work = sum(self.work(sizes, b) for b in loader.batch_sampler)
            per_work = self.seconds_per_eval(dataset, sizes, loader.batch_sampler)
            eval_s[name] = per_work * work if work else 0.0
        set_rng_state(saved, launch.device)
        measure = launch.clock() - launch.started - setup
        measured = [step_s, eval_s["valid"], eval_s["test"], save_s, setup, measure]
        mine = [v if launch.main else 0.0 for v in measured]
        shared = ctx.all_sum(torch.tensor(mine).double())
        step_s, valid_s, test_s, save_s, setup, measure = (float(v) for v in shared)
        test_s = test_s if data.test_labelled else 0.0
        steps, every = data.steps_per_epoch, launch.config.eval_every
        return RunCosts(step_s, valid_s, test_s, save_s, steps, every, setup, measure)

    def samples(
        self, dataset: Dataset, count: int, batches: Sequence[Sequence[int]] = ()
    ) -> list[list[int]]:
        """``count`` batches' worth of random indices of ``dataset`` (fixed by the run's
        seed, apart from its RNG); with a token budget, ``count`` of its ``batches`` (the
        measurement's unit, the padded size, follows their sizes)."""
        config = self.launch.config
        rng = np.random.default_rng(config.seed)
        if config.max_tokens is not None and len(batches):
            picks = rng.choice(len(batches), size=count, replace=len(batches) < count)
            return [list(batches[k]) for k in picks]
        n = min(len(dataset), config.batch_size)
        return [rng.choice(len(dataset), size=n, replace=False).tolist() for _ in range(count)]

    def seconds_per_step(self, sizes: np.ndarray, batches: int = 5) -> tuple[float, float]:
        """Seconds of a training step per unit of padded batch size (:meth:`work`), over
        ``batches`` random batches on a copy of the model (one untimed step first; when the
        run captures its steps, every batch's shape is warmed up and captured first), and the
        seconds of writing a checkpoint of the copy's weights and optimizer state."""
        launch, data, clock, device = self.launch, self.data, self.launch.clock, self.launch.device
        config, ctx = launch.config, launch.ctx
        probe = copy.deepcopy(self.model.model).train()
        groups = parameter_groups(probe, config.weight_decay, config.urpe_weight_decay)
        opt = make_optimizer(groups, config.lr, config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        precision, totals = Precision(launch.precision.kind, device), StepTotals(device)
        step = self.make_step(probe, opt, sched, totals, precision)
        epoch = [b[ctx.rank :: ctx.world_size] for b in data.sampler.global_batches(0)]
        samples = self.samples(data.splits.train, batches + 1, epoch)
        warm = samples[:1]
        if self.model.backend is not None:  # each shape warmed up and captured, as in the run
            warm = [i for i in samples for _ in range(step.cycle.warmup + 1)]
        for i, index in enumerate(warm):
            step(data.collate(read_graphs(data.splits.train, index)), i)
        seconds = work = 0.0
        for i, index in enumerate(samples[1:]):
            start = clock()
            step(data.collate(read_graphs(data.splits.train, index)), i)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds, work = seconds + clock() - start, work + self.work(sizes, index)
        save_s = 0.0
        if launch.main:
            with tempfile.TemporaryDirectory(dir=launch.out) as tmp:
                start = clock()
                state = {"model": probe.state_dict(), "optimizer": opt.state_dict()}
                save_checkpoint(Path(tmp) / "probe.pt", state)
                save_s = clock() - start
        return seconds / work, save_s

    def seconds_per_eval(
        self, dataset: Dataset, sizes: np.ndarray, split: Sequence[Sequence[int]], batches: int = 3
    ) -> float:
        """Seconds per unit of padded batch size (:meth:`work`) to read, collate and run
        (forward only) ``batches`` random batches of ``dataset`` (with a token budget, of
        ``split``, its loader's batches); one untimed batch first (every batch warmed up and
        captured first, when the run captures)."""
        if len(dataset) == 0:
            return 0.0
        launch, model, forward = self.launch, self.model.model, self.model.forward
        clock, device = launch.clock, launch.device
        model.eval()
        samples = self.samples(dataset, batches + 1, split)
        warm = samples[:1]
        if forward is not None:
            warm = [i for i in samples for _ in range(forward.cycle.warmup + 1)]
        seconds = work = 0.0
        for i, index in enumerate(warm + samples[1:]):
            start = clock()
            batch = self.data.collate(read_graphs(dataset, index))
            if forward is not None:
                forward(batch)
            else:
                with torch.no_grad(), launch.precision.autocast():
                    model(batch.to(device))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= len(warm):
                seconds, work = seconds + clock() - start, work + self.work(sizes, index)
        model.train()
        return seconds / work
