"""A search's time: the whole of ``--time-limit`` shared out between the trials, the final
ensemble and the search's own writing, so that the command ends within it.

Each trial is a training run with a time limit of its own (the run stops cleanly at it and
tests its best checkpoint, :func:`~graphormer_urpe.training.loop.train`). The budget keeps
a reserve for what follows the last trial (the report, its plots) and shares the rest out:
``planned`` trials and the ensemble's ``K`` members get equal shares of what is left once
the search is set up (:meth:`SearchBudget.begin`), or ``--trial-minutes`` each when given
(a recipe is tuned for the budget it is searched in: give the time its training will have);
a trial starts only while half a share is left (a whole one with ``--trial-minutes``), and
gets at most what is left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["SearchBudget", "DEFAULT_TRIALS", "RESERVE_SECONDS", "planned_trials"]

DEFAULT_TRIALS = 12
"""Trials planned per process when ``--trials`` is not given (the time limit decides)."""

RESERVE_SECONDS = 5.0
"""Seconds kept, beside 1% of the limit, for the report after the last trial."""

MIN_SHARE = 0.5
"""A trial starts only while this fraction of a share is left."""


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
    """

    minutes: float
    planned: int = DEFAULT_TRIALS
    ensemble: int = 0
    started: float = field(default_factory=time.perf_counter)
    trial_minutes: float | None = None

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
    def share(self) -> float:
        """Seconds of one trial (and of one ensemble member)."""
        if self.trial_minutes is not None:
            return 60 * self.trial_minutes
        return max(self.end - self.search_started, 0.0) / (self.planned + self.ensemble)

    def ensemble_seconds(self) -> float:
        """Seconds kept for the final ensemble."""
        return self.ensemble * self.share

    def trial_seconds(self, now: float | None = None) -> float | None:
        """The next trial's time limit in seconds; ``None``: no time for another trial."""
        now = time.perf_counter() if now is None else now
        left = self.end - self.ensemble_seconds() - now
        least = self.share if self.trial_minutes is not None else MIN_SHARE * self.share
        if left < least or left <= 0:  # a fixed length: only whole trials, comparable ones
            return None
        return min(self.share, left)

    def left(self, now: float | None = None) -> float:
        """Seconds left until :attr:`end`."""
        now = time.perf_counter() if now is None else now
        return max(self.end - now, 0.0)


def planned_trials(minutes: float, trials: int | None, trial_minutes: float | None) -> int:
    """Trials one process plans: ``trials`` when given, else as many ``trial_minutes`` as fit
    ``minutes``, else :data:`DEFAULT_TRIALS`."""
    if trials is not None:
        return trials
    if trial_minutes is not None and trial_minutes > 0:
        return max(1, int(minutes // trial_minutes))
    return DEFAULT_TRIALS
