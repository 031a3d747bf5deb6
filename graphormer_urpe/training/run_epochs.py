"""A training run's epochs: the step loop, the reads of the device totals, validation and
the best checkpoint, the epoch's history row and checkpoint, stop requests and the time
limit."""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from typing import Any

import torch
from tqdm.auto import tqdm

from ..inference.prediction import predict_split
from ..io.checkpoint import TrainingInterrupted
from ..runtime.capture import learning_rate
from .history import History
from .run_budget import RunBudget
from .run_checkpoints import RunCheckpoints
from .run_plan import PlanLog
from .run_state import RunData, RunLaunch, RunModel, RunParts, log

__all__ = ["EpochHook", "EpochLoop", "split_outputs"]

EpochHook = Callable[[int, dict[str, float]], None]
"""Called after each validated epoch with the epoch and its metrics (see ``train``)."""


def split_outputs(launch: RunLaunch, model: RunModel, data: RunData, split: str) -> torch.Tensor:
    """The model's outputs ``[n, T]`` on ``split`` (``valid`` or ``test``), each graph
    computed by one process."""
    loader, index = data.eval_loaders[split]
    n, t = len(getattr(data.splits, split)), data.splits.num_targets
    precision, forward = launch.precision, model.forward
    return predict_split(model.model, loader, index, n, t, launch.ctx, precision, forward)


class EpochLoop:
    """Training epoch by epoch (:meth:`fit`), validating when due: moves the run's (``run``)
    progress on, writes ``history`` and checkpoints (``checkpoints``), asks ``budget``
    whether the time is up, logs ``plan`` once its first steps are timed and hands each
    validated epoch to ``on_epoch``."""

    def __init__(
        self,
        run: RunParts,
        history: History,
        checkpoints: RunCheckpoints,
        budget: RunBudget,
        plan: PlanLog,
        on_epoch: EpochHook | None = None,
    ) -> None:
        self.launch, self.model, self.optim = run.launch, run.model, run.optim
        self.data, self.progress = run.data, run.progress
        self.history, self.checkpoints = history, checkpoints
        self.budget, self.plan, self.on_epoch = budget, plan, on_epoch

    def validate(self) -> dict[str, float]:
        """Every validation metric of the current weights (the selection metric among them)."""
        valid = split_outputs(self.launch, self.model, self.data, "valid")
        return self.data.splits.evaluate(valid, self.data.targets["valid"])

    def evaluate_starting_point(self) -> None:
        """With ``--init-from``: the starting point's validation metric, before any step."""
        if self.model.init_report is None:
            return
        metrics, metric, progress = self.validate(), self.data.metric, self.progress
        value = metrics[metric]
        progress.best, progress.best_epoch, progress.best_metrics = value, -1, metrics
        self.history.add(
            {
                "epoch": -1,
                "step": 0,
                "lr": learning_rate(self.optim.optimizer),
                "train_loss": math.nan,
                f"valid_{metric}": value,
                "seconds": 0.0,
            }
        )
        self.checkpoints.save_best(0)
        log.info("initial model (--init-from): valid %s %.4f", metric, value)

    def fit(self, progress_bar: bool) -> None:
        """Train epoch by epoch until the planned steps, the time limit or a stop request."""
        progress = self.progress
        progress.wall_start = self.launch.clock()
        bar = tqdm(
            total=progress.total,
            initial=progress.step,
            desc="train",
            # None: drawn on a terminal only, so a log file gets the epoch lines, not the bar
            disable=None if progress_bar and self.launch.main else True,
            dynamic_ncols=True,
        )
        try:
            while progress.epoch < progress.epochs and progress.step < progress.total:
                batch_index = self._train_epoch(bar)
                if not self._end_epoch(batch_index):
                    break
            if self.plan.pending is not None:  # no step timed (a resumed run that was done)
                self.plan.log(self.plan.pending, 0.0)
        finally:  # also when a stop request or the on_epoch hook ends the run
            bar.close()
            self.history.close()

    def _train_epoch(self, bar: tqdm) -> int:
        """The steps of one epoch from ``start_batch``; returns the batch it stopped at."""
        launch, progress, optim, pacer = self.launch, self.progress, self.optim, self.budget.pacer
        config, ctx, clock = launch.config, launch.ctx, launch.clock
        steps_per_epoch = self.data.steps_per_epoch
        self.model.net.train()
        self.data.sampler.set_epoch(progress.epoch, progress.start_batch)
        batch_index = progress.start_batch
        t0 = clock()
        if pacer is not None:  # the steps' pace, evaluations and checkpoints aside
            pacer.resume(t0)
        for batch in self.data.train_loader:
            if progress.step >= progress.total:
                break
            optim.stepper(batch, progress.step)  # copies the batch to the device
            progress.step += 1
            batch_index += 1
            progress.train_graphs += batch.num_graphs * ctx.world_size
            bar.update(1)
            if self.plan.pending is not None:
                self.plan.time_first_steps()
            if pacer is not None and pacer.observe(progress.step, clock()):
                self.budget.replan(progress, optim)
            mid_epoch = batch_index < steps_per_epoch and progress.step < progress.total
            every = config.checkpoint_every
            due = bool(every) and progress.step % every == 0
            # one process acts on its own stop request or time limit at once (the clock is read
            # on the host); several processes agree at read points
            asked = not ctx.enabled and (
                bool(launch.stop["signal"]) or (launch.main and self.budget.out_of_time())
            )
            if not (progress.step % optim.read_every == 0 or (due and mid_epoch) or asked):
                continue  # nothing read back from the device: the GPU stays ahead
            signum, time_up = self.read_totals(progress.epoch, batch_index)
            loss = progress.loss_sum / max(progress.loss_count, 1)
            bar.set_postfix(epoch=progress.epoch, loss=f"{loss:.4f}")
            if signum and mid_epoch:
                progress.train_seconds += clock() - t0
                saved = self.checkpoints.save(progress.epoch, batch_index)
                raise TrainingInterrupted(signum, saved)
            if time_up and progress.step < progress.total:  # the same decision on every process
                progress.timed_out = True
                break
            if due and mid_epoch:
                progress.train_seconds += clock() - t0
                if pacer is not None:
                    pacer.pause(clock())
                self.checkpoints.save(progress.epoch, batch_index)
                t0 = clock()
                if pacer is not None:
                    pacer.resume(t0)
        # waits for the epoch's last step: inside the timing
        time_up = self.read_totals(progress.epoch, batch_index)[1]
        progress.timed_out = progress.timed_out or (time_up and progress.step < progress.total)
        progress.train_seconds += clock() - t0
        if pacer is not None:
            pacer.pause(clock())
        return batch_index

    def read_totals(self, epoch: int, batch: int) -> tuple[int, bool]:
        """Add the device totals to the host's, stop on a non-finite loss, and return the stop
        signal agreed by every process (0: none) and whether rank 0's clock says the time is
        up (``--time-limit``), the same on every process. A collective under DDP."""
        launch, progress, totals = self.launch, self.progress, self.optim.totals
        ctx, stop = launch.ctx, launch.stop
        part, count, first_bad = totals.read()
        totals.reset()
        time_up = launch.main and self.budget.out_of_time()
        flags = [part, float(first_bad >= 0), float(stop["signal"]), float(time_up)]
        shared = ctx.all_sum(torch.tensor(flags).double())
        progress.loss_sum += float(shared[0]) / ctx.world_size
        progress.loss_count += count
        if float(shared[1]) > 0:
            saved = self.checkpoints.save_nonfinite(epoch, batch)
            where = f"step {first_bad}" if first_bad >= 0 else "another process's step"
            raise RuntimeError(
                f"non-finite loss at {where} (epoch {epoch}); the weights before it are saved "
                f"to {saved}; lower --lr or check the data"
            )
        return int(shared[2]) and (stop["signal"] or signal.SIGTERM), bool(shared[3])

    def _end_epoch(self, batch_index: int) -> bool:
        """Validate when due, record the epoch, checkpoint; whether to go on training."""
        launch, progress, data = self.launch, self.progress, self.data
        epoch, config = progress.epoch, launch.config
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": progress.step,
            "lr": learning_rate(self.optim.optimizer),
            "train_loss": progress.epoch_loss,
        }
        last = epoch == progress.epochs - 1 or progress.step >= progress.total
        metrics: dict[str, float] | None = None  # the epoch's validation, when due
        if (epoch + 1) % config.eval_every == 0 or last or progress.timed_out:
            metrics = self._validate_epoch(epoch, row)
        else:
            log.info(
                "epoch %d step %d: train %s %.4f",
                epoch, progress.step, data.loss_kind, row["train_loss"],
            )  # fmt: skip
        row["seconds"] = round(progress.train_seconds, 2)
        self.history.add(row)
        if progress.timed_out:  # a checkpoint of the exact position: --resume continues from it
            saved = self.checkpoints.save(epoch, batch_index)
            log.info(
                "time limit of %g min reached after step %d of %d (epoch %d)%s",
                config.time_limit, progress.step, progress.total, epoch,
                f": checkpoint {saved}" if saved else "",
            )  # fmt: skip
            self._report_epoch(epoch, metrics)
            return False
        progress.epoch, progress.start_batch = epoch + 1, 0
        progress.loss_sum, progress.loss_count = 0.0, 0
        saved = self.checkpoints.save(progress.epoch, 0)
        self._report_epoch(epoch, metrics)
        stop = launch.stop["signal"]
        requested = int(launch.ctx.all_sum(torch.tensor([float(stop)]))[0])
        if requested and progress.epoch < progress.epochs and progress.step < progress.total:
            raise TrainingInterrupted(stop or signal.SIGTERM, saved)
        return True

    def _validate_epoch(self, epoch: int, row: dict[str, Any]) -> dict[str, float]:
        """Validate, record the value in ``row``, save ``best.pt`` when it is the best."""
        progress, metric, pacer = self.progress, self.data.metric, self.budget.pacer
        started = self.launch.clock()
        metrics = self.validate()
        if pacer is not None:  # the finish's validation and test at today's pace
            pacer.observe_evaluation(self.launch.clock() - started)
        value = row[f"valid_{metric}"] = metrics[metric]
        if progress.improves(value):
            progress.best, progress.best_epoch, progress.best_metrics = value, epoch, metrics
            self.checkpoints.save_best(epoch + 1)
        log.info(
            "epoch %d step %d: train %s %.4f, valid %s %.4f (best %.4f @ %d)",
            epoch, progress.step, self.data.loss_kind, row["train_loss"], metric, value,
            progress.best, progress.best_epoch,
        )  # fmt: skip
        return metrics

    def _report_epoch(self, epoch: int, metrics: dict[str, float] | None) -> None:
        """Hand a validated epoch's metrics, and ``progress`` (the share of the planned
        steps done, in ``(0, 1]``), to the ``on_epoch`` hook of ``train``."""
        if metrics is not None and self.on_epoch is not None:
            share = min(self.progress.step / max(self.progress.total, 1), 1.0)
            self.on_epoch(epoch, {**metrics, "progress": share})
