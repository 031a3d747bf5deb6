r"""Time budgets that hold: measured costs, a pacer that re-plans, a schedule that follows.

``graphormer-urpe train --time-limit M`` must end, data loading and the final test included,
within ``M`` minutes of the command's start, also when the machine slows down mid-run. Three
pieces do it:

* :class:`RunCosts`: what a run's parts cost on this machine, measured once before training
  (a few training steps, evaluation batches and a checkpoint write on a copy of the model):
  seconds per step, per validation, for the test, per checkpoint. An ensemble measures once
  and hands the costs to every member.
* :class:`Pacer`: the deadline, and an estimate of what finishing takes (the last validation,
  the best and last checkpoints, the test, the calibration's validation pass). It watches
  the training steps' real pace: when the steps run slower (or faster) than measured, every
  remaining cost is scaled by the same factor, so the run stops early enough to finish in
  time, and a run planned to fill its budget is re-planned to the number of steps that now
  fits (a damped pace; only a change of more than 10%, logged once a minute at most:
  :class:`Replans`).
* :class:`Schedule`: Graphormer's learning-rate schedule (linear warm-up, linear decay to
  ``end``) whose decay can be re-planned mid-run: from the current rate, linearly to ``end``
  at the new last step, without a jump.

A run shorter than :data:`MIN_USEFUL_EPOCHS` epochs says so (``metrics.json``
``short_run``); an ensemble whose members would get fewer trains as many members as get that
many, and is refused, with the budget that would give each of them that many, where not even
two do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MIN_USEFUL_EPOCHS", "NoTimeToTrain", "RunCosts", "Pacer", "Replans", "Schedule"]


class NoTimeToTrain(RuntimeError):
    """A run's ``--time-limit`` went to loading the data and measuring, leaving no time to
    train and test (a search's trial that fails this way is one trial lost, not the
    search)."""


MIN_USEFUL_EPOCHS = 5
"""Fewer epochs than this make a run too short to trust: a warm-up and a decay need room."""

RESERVE_FRACTION = 0.01
"""Part of the budget kept free, beside the finish estimate (process exit, noise)."""
RESERVE_SECONDS = 1.0
"""Seconds kept free beside :data:`RESERVE_FRACTION`."""
FINISH_MARGIN = 1.25
"""The finish estimate's safety factor: evaluations slow down more than steps under load."""
PACE_WEIGHT = 0.25
"""Weight of a new window's pace in the plan's smoothed pace (one slow window is not a trend)."""
REPLAN_CHANGE = 0.10
"""A re-plan changes the planned steps by more than this fraction, or is not made."""
REPLAN_LOG_EVERY = 60.0
"""Seconds between two logged re-plans (the others are logged at debug level)."""


@dataclass
class Replans:
    """Which re-plans are made and which are logged: only a change of the plan by more than
    :data:`REPLAN_CHANGE`, and one log line a :data:`REPLAN_LOG_EVERY` seconds at most (a
    re-plan may follow every pace window, every few seconds)."""

    change: float = REPLAN_CHANGE
    every: float = REPLAN_LOG_EVERY
    logged: float | None = None
    """When the last logged re-plan was (the run's clock), ``None``: none yet."""

    def worth(self, planned: int, new: int) -> bool:
        """Whether ``new`` steps differ enough from the ``planned`` ones to re-plan."""
        return abs(new - planned) > self.change * max(1, planned)

    def log_now(self, now: float) -> bool:
        """Whether a re-plan at ``now`` gets a log line (then counted as the last one)."""
        if self.logged is not None and now - self.logged < self.every:
            return False
        self.logged = now
        return True


@dataclass
class RunCosts:
    """Seconds that a run's parts take on this machine, measured before training.

    Attributes:
        step: an average training step of this run (reading and collating its batch,
            forward, backward, the update).
        valid: one validation pass.
        test: the final test pass.
        save: writing one checkpoint.
        steps_per_epoch: optimizer steps per epoch.
        eval_every: epochs between validations.
        setup: seconds from the command's start to the measurement (data, store, model).
        measure: seconds the measurement itself took.
    """

    step: float
    valid: float
    test: float
    save: float
    steps_per_epoch: int
    eval_every: int = 1
    setup: float = 0.0
    measure: float = 0.0

    @property
    def per_epoch(self) -> float:
        """Seconds an epoch adds beside its steps: its checkpoint and its share of a
        validation (with the best checkpoint)."""
        return self.save + (self.valid + self.save) / self.eval_every

    @property
    def per_step(self) -> float:
        """Seconds per step, the epochs' own costs spread over their steps."""
        return self.step + self.per_epoch / max(1, self.steps_per_epoch)

    @property
    def finish(self) -> float:
        """Seconds from a stop to the end: the last validation, the best and last
        checkpoints, the test, and the validation pass of the calibration."""
        return 2 * self.valid + self.test + 2 * self.save

    def steps_for(self, seconds: float) -> int:
        """Steps that fit in ``seconds`` of training with the finish after them (>= 0)."""
        return max(0, int((seconds - self.finish) / self.per_step))

    def seconds_for(self, steps: int) -> float:
        """Seconds of ``steps`` steps and the finish."""
        return steps * self.per_step + self.finish

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Pacer:
    """The deadline of a run and the pace of its steps (see the module docstring).

    Args:
        deadline: ``time.perf_counter()`` by which the command must have ended.
        costs: the measured costs (scaled by the observed pace).
        budget: the whole budget in seconds (for the reserve).
        window: seconds of steps over which a pace is measured.
    """

    deadline: float
    costs: RunCosts
    budget: float
    window: float = 5.0
    slowdown: float = field(default=1.0, init=False)
    """Observed seconds per step over the measured ones, smoothed (1: as measured)."""
    recent: float = field(default=1.0, init=False)
    """The same ratio over the last window alone."""
    replans: Replans = field(default_factory=Replans)
    """Which re-plans of the steps are made and logged."""
    _mark: tuple[float, int] | None = field(default=None, repr=False)
    _paused: float | None = field(default=None, repr=False)

    @property
    def reserve(self) -> float:
        """Seconds kept free at the end."""
        return RESERVE_FRACTION * self.budget + RESERVE_SECONDS

    def finish_estimate(self) -> float:
        """Seconds the finish will take at the slower of the smoothed and the last pace
        (never less than measured), with a margin."""
        return FINISH_MARGIN * self.costs.finish * max(1.0, self.slowdown, self.recent)

    def time_up(self, now: float) -> bool:
        """Whether the run must stop at ``now`` (``time.perf_counter()``, as every time here)
        to finish by the deadline."""
        return now + self.finish_estimate() + self.reserve >= self.deadline

    def steps_left(self, now: float) -> int:
        """Steps that still fit before the finish, at the current pace."""
        seconds = self.deadline - now - self.reserve - self.finish_estimate()
        per_step = self.costs.per_step * self.slowdown
        return max(0, int(seconds / per_step))

    def pause(self, now: float) -> None:
        """Steps stop at ``now`` (for an evaluation or a checkpoint, which do not count
        towards the pace of the steps)."""
        self._paused = now

    def resume(self, now: float) -> None:
        """Steps go on at ``now``: the time since :meth:`pause` is left out of the window."""
        if self._paused is not None and self._mark is not None:
            since, first = self._mark
            self._mark = (since + now - self._paused, first)
        self._paused = None

    def observe(self, step: int, now: float) -> bool:
        """Record that step ``step`` is done at ``now``; returns whether a new pace was
        measured (a window of at least ``window`` seconds of steps ended)."""
        if self._mark is None:
            self._mark = (now, step)
            return False
        since, first = self._mark
        if now - since < self.window or step <= first:
            return False
        pace = (now - since) / (step - first) / max(self.costs.step, 1e-9)
        # for the plan, a window moves the estimate a quarter of the way (one slow window is
        # not a trend); the finish estimate takes the last window as it is (finish_estimate)
        self.slowdown = (1 - PACE_WEIGHT) * self.slowdown + PACE_WEIGHT * pace
        self.recent = pace
        self._mark = (now, step)
        return True

    def observe_evaluation(self, seconds: float) -> None:
        """A validation took ``seconds``: the finish's validation and test follow it (kept at
        the measured pace, which :meth:`finish_estimate` scales)."""
        if self.costs.valid > 0:
            ratio = self.costs.test / self.costs.valid
            self.costs.valid = seconds / max(1.0, self.slowdown, self.recent)
            self.costs.test = ratio * self.costs.valid


@dataclass
class Schedule:
    r"""Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then linear decay to ``end``
    at step ``total``; :meth:`replan` moves the end of the decay.

    After a re-plan at step :math:`s_0` with rate :math:`r_0`, the rate falls linearly from
    :math:`r_0` to ``end`` between :math:`s_0` and the new ``total`` (the warm-up, when not
    yet over, is kept and the decay starts after it).
    """

    warmup: int
    total: int
    peak: float
    end: float
    anchor: int = 0
    """First step of the current decay (0: the warm-up's end)."""
    anchor_rate: float | None = None
    """Rate at ``anchor`` (``None``: ``peak``)."""

    def __call__(self, step: int) -> float:
        """The learning rate at ``step`` (0-based count of optimizer steps taken)."""
        if self.warmup > 0 and step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        if step >= self.total:
            return self.end
        start = max(self.anchor, self.warmup)
        rate = self.peak if self.anchor_rate is None else self.anchor_rate
        frac = (step - start) / max(1, self.total - start)
        return self.end + (rate - self.end) * (1.0 - frac)

    def replan(self, step: int, total: int) -> None:
        """End the decay at ``total`` instead, continuing from the rate at ``step``."""
        if step > self.warmup:
            self.anchor_rate, self.anchor = self(step), step
        self.total = max(total, step + 1)

    def state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Schedule:
        return cls(**state)


def epochs_of(steps: int, steps_per_epoch: int) -> int:
    """Epochs that ``steps`` steps start (the last may be partial)."""
    return max(1, math.ceil(steps / max(1, steps_per_epoch)))
