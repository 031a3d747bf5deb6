"""What a search writes into its run folder, from the study alone (every process's trials):

* ``trials.csv``: one row per trial (number, state, value, parameters, duration, the
  trial's steps, epochs and test value, the error of a failed one);
* ``config.json``: the best trial's run, which ``graphormer-urpe train --config`` repeats
  (its planned steps and warm-up; no time limit; output ``OUT/best``);
* ``history.png``: the objective of every finished trial and the best so far;
* ``importances.png``: the parameters' importances (Optuna's fANOVA evaluator over the
  completed trials), once :data:`MIN_IMPORTANCE_TRIALS` trials completed.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io.checkpoint import write_atomic
from ..runtime.train_config import TrainConfig
from ..training.plots import pyplot, save_figure
from .trial import CONFIG_ATTR

if TYPE_CHECKING:
    import optuna

    from .problem import Problem

__all__ = ["write_report", "best_config", "SURPLUS_ATTR"]

log = logging.getLogger(__name__)

MIN_IMPORTANCE_TRIALS = 5
"""Completed trials before the importances are drawn (fewer say nothing of them)."""

SURPLUS_ATTR = "surplus"
"""A trial asked for after the study already held its ``--trials``: told failed, never run."""


def ran(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's trials, less the surplus ones that never ran."""
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(SURPLUS_ATTR)]


def best_config(study: optuna.Study, out: Path, trees: str = "auto") -> TrainConfig | None:
    """The best completed trial's run, to be repeated into ``out / "best"`` with the trees
    head ``trees`` (:attr:`~graphormer_urpe.runtime.train_config.TrainConfig.trees`, which the
    trials leave off); ``None``: no trial completed."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done or CONFIG_ATTR not in study.best_trial.user_attrs:
        return None
    cfg = TrainConfig.from_dict(study.best_trial.user_attrs[CONFIG_ATTR])
    return replace(cfg, out=str(out / "best"), time_limit=None, fill_time_limit=False, trees=trees)


def write_report(
    study: optuna.Study, problem: Problem, out: Path, trees: str = "auto"
) -> dict[str, Any]:
    """Write the report files into ``out`` (the best configuration with the trees head
    ``trees``); a summary of the study for the command's output."""
    import optuna

    trials = ran(study)
    files = {"trials": str(out / "trials.csv")}
    _write_trials(trials, out / "trials.csv")
    cfg = best_config(study, out, trees)
    if cfg is not None:
        write_atomic(out / "config.json", cfg.to_json())
        files["config"] = str(out / "config.json")
    if _plot_history(trials, problem, out / "history.png"):
        files["history"] = str(out / "history.png")
    if _plot_importances(study, out / "importances.png"):
        files["importances"] = str(out / "importances.png")
    counts = {
        s.name.lower(): sum(t.state == s for t in trials)
        for s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    }
    counts["fail"] = sum(t.state == optuna.trial.TrialState.FAIL for t in trials)
    summary: dict[str, Any] = {
        "study": study.study_name,
        "objective": f"valid_{problem.objective}",
        "direction": "maximize" if problem.maximize else "minimize",
        "trials": counts,
        "files": files,
    }
    if cfg is not None:
        best = study.best_trial
        summary["best"] = {
            "trial": best.number,
            f"valid_{problem.objective}": best.value,
            f"test_{problem.objective}": best.user_attrs.get(f"test_{problem.objective}"),
            "params": best.params,
        }
    return summary


def _write_trials(trials: list[optuna.trial.FrozenTrial], path: Path) -> None:
    import pandas as pd

    rows = []
    for t in trials:
        row: dict[str, Any] = {"number": t.number, "state": t.state.name, "value": t.value}
        row.update({f"param_{k}": v for k, v in t.params.items()})
        row.update({k: v for k, v in t.user_attrs.items() if k != CONFIG_ATTR})
        row["last_epoch"] = t.last_step
        row["seconds"] = t.duration.total_seconds() if t.duration is not None else None
        rows.append(row)
    write_atomic(path, pd.DataFrame(rows).convert_dtypes().to_csv(index=False))


def _plot_history(trials: list[optuna.trial.FrozenTrial], problem: Problem, path: Path) -> bool:
    """The optimisation history; ``False`` when no trial has a value yet."""
    points = [(t.number, t.value) for t in trials if t.value is not None and math.isfinite(t.value)]
    if not points:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs, ys = zip(*sorted(points), strict=True)
    pick = max if problem.maximize else min
    best = [pick(ys[: i + 1]) for i in range(len(ys))]
    ax.plot(xs, ys, "o", alpha=0.6, label="trial")
    ax.step(xs, best, where="post", color="C3", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"valid {problem.objective}")
    ax.set_title("optimisation history")
    ax.legend()
    save_figure(fig, path)
    plt.close(fig)
    return True


def _plot_importances(study: optuna.Study, path: Path) -> bool:
    """The parameters' importances; ``False`` (logged) when they cannot be computed yet."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_IMPORTANCE_TRIALS:
        log.info("parameter importances after %d completed trials", MIN_IMPORTANCE_TRIALS)
        return False
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        with warnings.catch_warnings():  # few trials per choice: the plot is what it is
            warnings.simplefilter("ignore")
            importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError) as exc:  # too few completed trials, nothing varied
        log.info("no parameter importances yet: %s", exc)
        return False
    if not importances:
        return False
    plt = pyplot()
    names = list(importances)[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(names) + 1.2))
    ax.barh(names, [importances[n] for n in names])
    ax.set_xlabel("importance (fANOVA)")
    ax.set_title("parameter importances")
    save_figure(fig, path)
    plt.close(fig)
    return True
