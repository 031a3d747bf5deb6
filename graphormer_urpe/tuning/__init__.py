"""Hyper-parameter search over training runs, on Optuna (the ``tune`` extra).

:func:`~graphormer_urpe.tuning.search.tune` runs a TPE search whose trials are training
runs (:func:`~graphormer_urpe.training.run.train`), pruned on their per-epoch validation
metric, inside one time limit; the study lives in an Optuna storage (a SQLite file in the
run folder, or a shared database or journal file that several machines work on at once).
Every module here but :mod:`.space`'s ranges and :mod:`.search_budget` needs ``optuna``; importing
the package does not.
"""

from ..utils.lazy import lazy_exports, moved_modules

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".search_budget": ["SearchBudget"],
        ".tune_config": ["TuneConfig"],
        ".problem": ["Problem", "load_problem"],
        ".search": ["tune"],
        ".space": ["SearchSpace"],
    },
)

# the old paths of renamed modules, deprecated
moved_modules(__name__, {"budget": "search_budget", "config": "tune_config"})
