"""One trial: a sample of the search space trained as an ordinary run, pruned on its
per-epoch validation metric.

The run is :func:`~graphormer_urpe.training.run.train` with the trial's fields, in
``OUT/trials/trial-<number>``, under the trial's own time limit; its ``on_epoch`` hook
reports the best validation value so far to Optuna at each tenth of the planned steps
(:data:`PROGRESS_STEPS`) and raises :class:`optuna.TrialPruned` when the pruner says so.
The trial keeps the run's resolved config (the steps and warm-up it planned) as a user
attribute, so that the study alone, on whichever machine ran the trial, says how to train
it again; a run whose pacer re-planned its steps keeps the plan it ended with.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..runtime.train_config import TrainConfig, override_config, read_config
from .space import suggest

if TYPE_CHECKING:
    import optuna

    from .problem import Problem
    from .tune_config import TuneConfig

__all__ = ["run_trial", "trial_config", "CONFIG_ATTR", "PROGRESS_STEPS"]

log = logging.getLogger(__name__)

PROGRESS_STEPS = 10
"""A trial reports its best validation value so far at each tenth of its planned steps (the
step Optuna sees is the tenth): trials are compared at equal shares of their time, so a
small batch, which takes more steps per epoch, is not ahead of a large one by its epochs."""

CONFIG_ATTR = "config"
"""The trial's user attribute holding its run's resolved ``config.json``."""


def trial_config(
    trial: optuna.Trial, config: TuneConfig, problem: Problem, seconds: float
) -> TrainConfig:
    """The training run of ``trial``: ``config.base`` with the sampled fields, its own
    folder, and a time limit of ``seconds`` (filled by planned steps unless
    ``config.epochs`` fixes the epochs). Trials compare networks: none fits a trees head
    (the best configuration's repeat and final ensemble get the one asked for)."""
    train_fields, model_fields = suggest(trial, config.space, problem)
    out = Path(config.out) / "trials" / f"trial-{trial.number:04d}"
    cfg = override_config(
        config.base, model_fields, **train_fields, out=str(out), time_limit=seconds / 60
    )
    cfg = replace(cfg, trees="off")
    if config.epochs is not None:
        return replace(cfg, epochs=config.epochs, max_steps=None, fill_time_limit=False)
    return replace(cfg, epochs=None, max_steps=None, fill_time_limit=True)


def run_trial(
    trial: optuna.Trial,
    config: TuneConfig,
    problem: Problem,
    seconds: float,
    progress: bool = False,
) -> float:
    """Train ``trial``'s run; its best validation value of ``problem.objective``.

    Raises:
        optuna.TrialPruned: the pruner stopped it after an epoch.
    """
    import optuna

    from ..training.run import train

    cfg = trial_config(trial, config, problem, seconds)
    objective = problem.objective
    better = max if problem.maximize else min
    best: list[float] = []  # the best value so far
    reported: set[int] = set()

    def report(epoch: int, metrics: dict[str, float]) -> None:
        best[:1] = [better(best[0], metrics[objective]) if best else metrics[objective]]
        tenth = int(PROGRESS_STEPS * metrics["progress"])
        if not 1 <= tenth < PROGRESS_STEPS or tenth in reported:  # done: the trial's value
            return
        reported.add(tenth)
        trial.report(best[0], tenth)
        if trial.should_prune():
            trial.set_user_attr(CONFIG_ATTR, _resolved(cfg))
            raise optuna.TrialPruned(f"pruned after epoch {epoch} ({tenth}/{PROGRESS_STEPS} done)")

    log.info("trial %d: %s (%.0f s)", trial.number, trial.params, seconds)
    metrics = train(cfg, progress=progress, on_epoch=report)
    trial.set_user_attr(CONFIG_ATTR, _resolved(cfg, metrics.get("steps_planned")))
    for key in ("steps", "epochs_trained", "wall_seconds", f"test_{objective}"):
        if metrics.get(key) is not None:
            trial.set_user_attr(key, metrics[key])
    return float(metrics[f"best_valid_{objective}"])


def _resolved(cfg: TrainConfig, planned: int | None = None) -> dict:
    """The run's ``config.json`` as written (steps and warm-up planned), else ``cfg``.

    ``planned``: the steps the run's schedule ended planned at. A run that fills its time
    limit is re-planned when its steps run at another pace than measured (an example:
    docs/results/tuning.md); repeating it then takes those steps and the warm-up it trained with
    (in steps, no longer a fraction of them)."""
    path = Path(cfg.out) / "config.json"
    resolved = read_config(path) if path.exists() else cfg
    if planned is not None and resolved.fill_time_limit and planned != resolved.max_steps:
        resolved = replace(resolved, max_steps=planned, warmup_fraction=None, fit_warmup=False)
    return resolved.to_dict()
