"""A search's time: the whole of ``--time-limit`` shared out between the trials, the final
ensemble and the search's own writing, so that the command ends within it.

Each trial is a training run with a time limit of its own (the run stops cleanly at it and
tests its best checkpoint, :func:`~graphormer_urpe.training.loop.train`). The budget keeps
a reserve for what follows the last trial (the report, its plots) and shares the rest out:
``planned`` trials and the ensemble's ``K`` members get equal shares of what is left once
the search is set up (:meth:`SearchBudget.begin`); a trial starts only
while half a share is left, and gets at most what is left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["SearchBudget", "DEFAULT_TRIALS", "RESERVE_SECONDS"]

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
    """

    minutes: float
    planned: int = DEFAULT_TRIALS
    ensemble: int = 0
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.search_started = self.started  # until begin()
        if self.minutes <= 0:
            raise ValueError(f"--time-limit must be positive, got {self.minutes:g} minutes")
        if self.planned < 1:
            raise ValueError(f"--trials must be at least 1, got {self.planned}")

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
        return max(self.end - self.search_started, 0.0) / (self.planned + self.ensemble)

    def ensemble_seconds(self) -> float:
        """Seconds kept for the final ensemble."""
        return self.ensemble * self.share

    def trial_seconds(self, now: float | None = None) -> float | None:
        """The next trial's time limit in seconds; ``None``: no time for another trial."""
        now = time.perf_counter() if now is None else now
        left = self.end - self.ensemble_seconds() - now
        if left < MIN_SHARE * self.share or left <= 0:
            return None
        return min(self.share, left)

    def left(self, now: float | None = None) -> float:
        """Seconds left until :attr:`end`."""
        now = time.perf_counter() if now is None else now
        return max(self.end - now, 0.0)
