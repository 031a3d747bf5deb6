"""A search's time: the whole of ``--time-limit`` shared out between the trials, the final
ensemble and the search's own writing, so that the command ends within it.

Each trial is a training run with a time limit of its own (the run stops cleanly at it and
tests its best checkpoint, :func:`~graphormer_urpe.training.run.train`). The budget keeps
a reserve for what follows the last trial (the report, its plots) and shares the rest out:
``planned`` trials and the ensemble's ``K`` members get equal shares of what is left once
the search is set up (:meth:`SearchBudget.begin`), or ``--trial-minutes`` each when given
(a recipe is tuned for the budget it is searched in: give the time its training will have);
a trial starts only while half a share is left (a whole one with ``--trial-minutes``), and
gets at most what is left.

Every trial loads the data again before it trains, so the search measures how long its own
loading took (:attr:`SearchBudget.loading`) and never starts a trial shorter than
:data:`LOAD_FACTOR` times that (:attr:`SearchBudget.shortest`): shares too short for it are
lengthened (fewer trials run), and a limit that cannot hold 2 such trials, with the
ensemble's members, is refused at once (:meth:`SearchBudget.check_fits`), naming the limit
that would.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_TRIALS",
    "LOAD_FACTOR",
    "RESERVE_SECONDS",
    "SearchBudget",
    "TuneBudgetError",
    "planned_trials",
]

DEFAULT_TRIALS = 12
"""Trials planned per process when ``--trials`` is not given (the time limit decides)."""

RESERVE_SECONDS = 5.0
"""Seconds kept, beside 1% of the limit, for the report after the last trial."""

MIN_SHARE = 0.5
"""A trial starts only while this fraction of a share is left."""

LOAD_FACTOR = 2.0
"""The shortest trial over the data loading measured: the trial loads the data again, then
needs at least as long to train and test."""

MIN_TRIALS = 2
"""Trials a limit must hold (the recipe's and one sampled), or the search is refused."""

SUGGESTION_MARGIN = 1.5
"""The refusal's suggested limit over its estimate (a busy machine loads more slowly)."""


class TuneBudgetError(ValueError):
    """``--time-limit`` cannot hold :data:`MIN_TRIALS` trials as long as the data loading
    measured requires."""


@dataclass
class SearchBudget:
    """The time of one search process.

    Args:
        minutes: the whole command's limit.
        planned: trials this process plans to run (``--trials``, else :data:`DEFAULT_TRIALS`).
        ensemble: members of the final ensemble (0: none).
        started: the ``time.perf_counter()`` the limit counts from.
        trial_minutes: each trial's (and ensemble member's) time; ``None``: an equal share
            of the limit.
        loading: seconds the search's own loading of the data took (0: not measured).
    """

    minutes: float
    planned: int = DEFAULT_TRIALS
    ensemble: int = 0
    started: float = field(default_factory=time.perf_counter)
    trial_minutes: float | None = None
    loading: float = 0.0

    def __post_init__(self) -> None:
        self.search_started = self.started  # until begin()
        if self.minutes <= 0:
            raise ValueError(f"--time-limit must be positive, got {self.minutes:g} minutes")
        if self.planned < 1:
            raise ValueError(f"--trials must be at least 1, got {self.planned}")
        if self.trial_minutes is not None:
            usable = (self.end - self.started) / 60
            if self.trial_minutes <= 0 or (1 + self.ensemble) * self.trial_minutes > usable:
                raise ValueError(
                    f"--trial-minutes {self.trial_minutes:g} does not fit --time-limit "
                    f"{self.minutes:g}: it must hold one trial and the {self.ensemble} "
                    f"ensemble members of that length ({usable:.2f} minutes are usable)"
                )

    @property
    def end(self) -> float:
        """The clock reading by which everything but the report is done."""
        return self.started + 0.99 * 60 * self.minutes - RESERVE_SECONDS

    def begin(self, now: float | None = None) -> None:
        """The search starts now: the shares split what is left after its set-up (imports,
        data, storage) instead of the whole limit."""
        self.search_started = time.perf_counter() if now is None else now

    @property
    def shortest(self) -> float:
        """Seconds of the shortest trial that may start: :data:`LOAD_FACTOR` times the
        data loading measured."""
        return LOAD_FACTOR * self.loading

    @property
    def share(self) -> float:
        """Seconds of one trial (and of one ensemble member), never below
        :attr:`shortest`."""
        if self.trial_minutes is not None:
            return 60 * self.trial_minutes
        equal = max(self.end - self.search_started, 0.0) / (self.planned + self.ensemble)
        return max(equal, self.shortest)

    def check_fits(self, now: float | None = None) -> None:
        """Refuse, before any trial, a limit that cannot hold :data:`MIN_TRIALS` trials
        (and the ensemble's members) of at least :attr:`shortest` seconds each, or a
        ``--trial-minutes`` shorter than that.

        Raises:
            TuneBudgetError: one line naming the loading measured and what fits.
        """
        now = time.perf_counter() if now is None else now
        loads = f"loading the data took {self.loading:.3g} s here and each trial loads it again"
        if self.trial_minutes is not None:  # the length asked for (its fit: __post_init__)
            if 60 * self.trial_minutes < self.shortest:
                raise TuneBudgetError(
                    f"--trial-minutes {self.trial_minutes:g} is too short: {loads}; give "
                    f"--trial-minutes {_tenths(self.shortest / 60 * SUGGESTION_MARGIN)} or more"
                )
            return
        need = (MIN_TRIALS + self.ensemble) * self.shortest
        if need <= self.end - now:
            return
        spent = now - self.started
        fits = (spent + need + RESERVE_SECONDS) / 0.99 / 60 * SUGGESTION_MARGIN
        raise TuneBudgetError(
            f"--time-limit {self.minutes:g} cannot hold {MIN_TRIALS} trials: {loads}, so a "
            f"trial needs at least {self.shortest:.3g} s ({spent:.3g} s spent already); give "
            f"--time-limit {_tenths(fits)} or more"
        )

    def ensemble_seconds(self) -> float:
        """Seconds kept for the final ensemble."""
        return self.ensemble * self.share

    def trial_seconds(self, now: float | None = None) -> float | None:
        """The next trial's time limit in seconds; ``None``: no time for another trial."""
        now = time.perf_counter() if now is None else now
        left = self.end - self.ensemble_seconds() - now
        least = self.share if self.trial_minutes is not None else MIN_SHARE * self.share
        least = max(least, self.shortest)  # shorter than its own loading: it cannot train
        if left < least or left <= 0:  # a fixed length: only whole trials, comparable ones
            return None
        return min(self.share, left)

    def left(self, now: float | None = None) -> float:
        """Seconds left until :attr:`end`."""
        now = time.perf_counter() if now is None else now
        return max(self.end - now, 0.0)


def _tenths(minutes: float) -> str:
    """``minutes`` rounded up to a tenth, as typed."""
    return f"{math.ceil(10 * minutes) / 10:g}"


def planned_trials(minutes: float, trials: int | None, trial_minutes: float | None) -> int:
    """Trials one process plans: ``trials`` when given, else as many ``trial_minutes`` as fit
    ``minutes``, else :data:`DEFAULT_TRIALS`."""
    if trials is not None:
        return trials
    if trial_minutes is not None and trial_minutes > 0:
        return max(1, int(minutes // trial_minutes))
    return DEFAULT_TRIALS
