"""A training run's epochs: the step loop, the reads of the device totals, validation and
the best checkpoint, the epoch's history row and checkpoint, stop requests and the time
limit."""

from __future__ import annotations

import math
import signal
from typing import Any

import torch
from tqdm.auto import tqdm

from ..inference.prediction import predict_split as _evaluate
from ..io.checkpoint import TrainingInterrupted
from ..runtime.capture import learning_rate
from .run_state import RunState, log

__all__ = ["RunEpochs"]


class RunEpochs(RunState):
    """Training epoch by epoch (:meth:`fit`), validating when due."""

    def validate(self) -> dict[str, float]:
        """Every validation metric of the current weights (the selection metric among them)."""
        loader, index = self.eval_loaders["valid"]
        n, t = len(self.splits.valid), self.splits.num_targets
        p = _evaluate(self.model, loader, index, n, t, self.ctx, self.precision, self.forward)
        return self.splits.evaluate(p, self.targets["valid"])

    def evaluate_starting_point(self) -> None:
        """With ``--init-from``: the starting point's validation metric, before any step."""
        if self.init_report is None:
            return
        metrics = self.validate()
        value = metrics[self.metric]
        self.best, self.best_epoch, self.best_metrics = value, -1, metrics
        self.history.add(
            {
                "epoch": -1,
                "step": 0,
                "lr": learning_rate(self.optimizer),
                "train_loss": math.nan,
                f"valid_{self.metric}": value,
                "seconds": 0.0,
            }
        )
        self.save_best(0)
        log.info("initial model (--init-from): valid %s %.4f", self.metric, value)

    def fit(self, progress: bool) -> None:
        """Train epoch by epoch until the planned steps, the time limit or a stop request."""
        self.wall_start = self.now()
        self._first_steps: tuple[float, int] | None = None
        bar = tqdm(
            total=self.total,
            initial=self.step,
            desc="train",
            # None: drawn on a terminal only, so a log file gets the epoch lines, not the bar
            disable=None if progress and self.main else True,
            dynamic_ncols=True,
        )
        try:
            while self.epoch < self.epochs and self.step < self.total:
                batch_index = self._train_epoch(bar)
                if not self._end_epoch(batch_index):
                    break
            if self._plan_pending is not None:  # no step timed (a resumed run that was done)
                self._log_plan(self._plan_pending, 0.0)
        finally:  # also when a stop request or the on_epoch hook ends the run
            bar.close()
            self.history.close()

    def _train_epoch(self, bar: tqdm) -> int:
        """The steps of one epoch from ``start_batch``; returns the batch it stopped at."""
        config, ctx, steps_per_epoch = self.config, self.ctx, len(self.sampler)
        self.net.train()
        self.sampler.set_epoch(self.epoch, self.start_batch)
        batch_index = self.start_batch
        t0 = self.now()
        if self.pacer is not None:  # the steps' pace, evaluations and checkpoints aside
            self.pacer.resume(t0)
        for batch in self.train_loader:
            if self.step >= self.total:
                break
            self.stepper(batch, self.step)  # copies the batch to the device
            self.step += 1
            batch_index += 1
            self.train_graphs += batch.num_graphs * ctx.world_size
            bar.update(1)
            if self._plan_pending is not None:
                self._time_first_steps()
            if self.pacer is not None and self.pacer.observe(self.step, self.now()):
                self._replan()
            mid_epoch = batch_index < steps_per_epoch and self.step < self.total
            due = bool(config.checkpoint_every) and self.step % config.checkpoint_every == 0
            # one process acts on its own stop request or time limit at once (the clock is read
            # on the host); several processes agree at read points
            asked = not ctx.enabled and (
                bool(self.stop["signal"]) or (self.main and self._out_of_time())
            )
            if not (self.step % self.read_every == 0 or (due and mid_epoch) or asked):
                continue  # nothing read back from the device: the GPU stays ahead
            signum, time_up = self.read_totals(self.epoch, batch_index)
            loss = self.loss_sum / max(self.loss_count, 1)
            bar.set_postfix(epoch=self.epoch, loss=f"{loss:.4f}")
            if signum and mid_epoch:
                self.train_seconds += self.now() - t0
                raise TrainingInterrupted(signum, self.checkpoint(self.epoch, batch_index))
            if time_up and self.step < self.total:  # the same decision on every process
                self.timed_out = True
                break
            if due and mid_epoch:
                self.train_seconds += self.now() - t0
                if self.pacer is not None:
                    self.pacer.pause(self.now())
                self.checkpoint(self.epoch, batch_index)
                t0 = self.now()
                if self.pacer is not None:
                    self.pacer.resume(t0)
        # waits for the epoch's last step: inside the timing
        time_up = self.read_totals(self.epoch, batch_index)[1]
        self.timed_out = self.timed_out or (time_up and self.step < self.total)
        self.train_seconds += self.now() - t0
        if self.pacer is not None:
            self.pacer.pause(self.now())
        return batch_index

    def _end_epoch(self, batch_index: int) -> bool:
        """Validate when due, record the epoch, checkpoint; whether to go on training."""
        epoch, config = self.epoch, self.config
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": self.step,
            "lr": learning_rate(self.optimizer),
            "train_loss": self.loss_sum / self.loss_count if self.loss_count else math.nan,
        }
        last_epoch = epoch == self.epochs - 1 or self.step >= self.total or self.timed_out
        metrics: dict[str, float] | None = None  # the epoch's validation, when due
        if (epoch + 1) % config.eval_every == 0 or last_epoch:
            started = self.now()
            metrics = self.validate()
            if self.pacer is not None:  # the finish's validation and test at today's pace
                self.pacer.observe_evaluation(self.now() - started)
            value = row[f"valid_{self.metric}"] = metrics[self.metric]
            if (value > self.best) if self.higher else (value < self.best):
                self.best, self.best_epoch, self.best_metrics = value, epoch, metrics
                self.save_best(epoch + 1)
            log.info(
                "epoch %d step %d: train %s %.4f, valid %s %.4f (best %.4f @ %d)",
                epoch, self.step, self.loss_kind, row["train_loss"], self.metric, value,
                self.best, self.best_epoch,
            )  # fmt: skip
        else:
            log.info(
                "epoch %d step %d: train %s %.4f",
                epoch, self.step, self.loss_kind, row["train_loss"],
            )  # fmt: skip
        row["seconds"] = round(self.train_seconds, 2)
        self.history.add(row)
        if self.timed_out:  # a checkpoint of the exact position: --resume continues from it
            saved = self.checkpoint(epoch, batch_index)
            log.info(
                "time limit of %g min reached after step %d of %d (epoch %d)%s",
                config.time_limit, self.step, self.total, epoch,
                f": checkpoint {saved}" if saved else "",
            )  # fmt: skip
            self._report_epoch(epoch, metrics)
            return False
        self.epoch, self.start_batch, self.loss_sum, self.loss_count = epoch + 1, 0, 0.0, 0
        saved = self.checkpoint(self.epoch, 0)
        self._report_epoch(epoch, metrics)
        requested = int(self.ctx.all_sum(torch.tensor([float(self.stop["signal"])]))[0])
        if requested and self.epoch < self.epochs and self.step < self.total:
            raise TrainingInterrupted(self.stop["signal"] or signal.SIGTERM, saved)
        return True

    def _report_epoch(self, epoch: int, metrics: dict[str, float] | None) -> None:
        """Hand a validated epoch's metrics, and ``progress`` (the share of the planned
        steps done, in ``(0, 1]``), to the ``on_epoch`` hook of :func:`train`."""
        if metrics is not None and getattr(self, "on_epoch", None) is not None:
            self.on_epoch(epoch, {**metrics, "progress": min(self.step / max(self.total, 1), 1.0)})
