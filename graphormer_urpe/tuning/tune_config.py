"""A search's settings: one dataclass, what ``graphormer-urpe tune`` parses its flags into."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.train_config import TrainConfig
from .space import SearchSpace

__all__ = ["TuneConfig"]


@dataclass
class TuneConfig:
    """Everything a search needs.

    Attributes:
        base: the fields every trial shares (dataset, targets, split, device, threads, ...);
            a trial overrides what it samples, its output folder and its time limit.
        time_limit: minutes for the whole command (trials, final ensemble and report).
        trials: finished trials the study should hold (counted over every process that
            works on it); ``None``: as many as the time limit allows.
        storage: an RDB URL or an Optuna journal file; ``None``: a SQLite file in ``out``.
        study: the study's name; ``None``: the data file's name and its fingerprint's hash.
        final_ensemble: members of an ensemble trained with the best configuration after
            the search (0: none).
        out: the run folder (trials, report, the default storage).
        epochs: epochs per trial; ``None``: each trial plans its steps to fill its budget.
        trial_minutes: each trial's budget; ``None``: an equal share of ``time_limit``.
        space: the ranges trials sample from.
        seed: the sampler's seed (``None``: a fresh one, which several processes need).
    """

    base: TrainConfig
    time_limit: float
    trials: int | None = None
    storage: str | None = None
    study: str | None = None
    final_ensemble: int = 0
    out: str = "runs/tune"
    epochs: int | None = None
    trial_minutes: float | None = None
    space: SearchSpace = field(default_factory=SearchSpace)
    seed: int | None = None
