"""A whole search: storage, data, study, trials within the time limit, report, and the
final ensemble.

Order matters for what a failure leaves behind: a ``--storage`` given is reached first
(one line, nothing written when it cannot be), then the data is loaded and checked, and
only then is the run folder made (with the default SQLite storage in it). Every process
that runs the same command on one storage works on one study: each asks the storage for
its next trial, so no trial runs twice, and with ``--trials N`` they stop once the study
holds N finished (or running) trials between them.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..training.pacing import NoTimeToTrain
from .problem import Problem, load_problem
from .report import SURPLUS_ATTR, best_config, ran, write_report
from .search_budget import SearchBudget, planned_trials
from .space import baseline, check_space
from .study import default_storage, open_storage, open_study
from .trial import PROGRESS_STEPS, run_trial

if TYPE_CHECKING:
    import optuna

    from .tune_config import TuneConfig

__all__ = ["tune", "BASELINE_ATTR", "MAX_FAILURES_IN_A_ROW"]

log = logging.getLogger(__name__)

BASELINE_ATTR = "baseline"
"""The user attribute (a ``baseline`` column of ``trials.csv``) of the trial that trains the
recommended recipe, the first of a new study."""

MAX_FAILURES_IN_A_ROW = 3
"""Failed trials in a row after which the search stops: with the last one's error, or, when
they failed for time (:class:`~graphormer_urpe.training.pacing.NoTimeToTrain`), with the
study's report."""


def tune(
    config: TuneConfig, tag: str, progress: bool = False, started: float | None = None
) -> dict[str, Any]:
    """Run the search of ``config``; the report's summary (best trial, counts, files).

    Args:
        config: the search.
        tag: the data's short name (a default study is ``TAG-<fingerprint hash>``).
        progress: progress bars for the trials' runs.
        started: the ``time.perf_counter()`` the time limit counts from (default: now).

    Raises:
        ValueError: a storage that cannot be reached, a set that cannot rank trials, a
            fixed choice the set cannot take, a study name already used for other data or
            another search space, a limit too short for 2 trials
            (:class:`~.search_budget.TuneBudgetError`).
        KeyboardInterrupt: interrupted; the finished trials stay in the study, and the
            message says how to continue.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the search logs its own lines
    start = time.perf_counter() if started is None else started
    planned = planned_trials(config.time_limit, config.trials, config.trial_minutes)
    budget = SearchBudget(
        config.time_limit, planned, config.final_ensemble, start, config.trial_minutes
    )
    storage = open_storage(config.storage) if config.storage else None  # before any write
    loading = time.perf_counter()
    problem = load_problem(config.base, tag)
    budget.loading = time.perf_counter() - loading  # every trial loads the data again
    budget.check_fits()  # too short for 2 trials: one line, nothing written
    check_space(config.space, problem)
    name = config.study or f"{problem.tag}-{problem.digest}"
    out = Path(config.out)
    url = config.storage or default_storage(out)
    if storage is None:  # the embedded default lives in the run folder
        out.mkdir(parents=True, exist_ok=True)
        storage = open_storage(url)
    study = open_study(storage, name, problem, _sampler(config, planned), _pruner(), config.space)
    out.mkdir(parents=True, exist_ok=True)  # a study refused for other data: none made
    if not study.get_trials(deepcopy=False):  # a new study starts from the recipe
        params = baseline(config.space, problem, config.base)
        study.enqueue_trial(params, user_attrs={BASELINE_ATTR: True}, skip_if_exists=True)
    log.info(
        "study %s in %s: %d trials so far; objective valid %s (%s)",
        name, url, len(ran(study)), problem.objective,
        "higher is better" if problem.maximize else "lower is better",
    )  # fmt: skip
    budget.begin()
    try:
        _trials(study, config, problem, budget, progress)
    except KeyboardInterrupt:
        write_report(study, problem, out, config.base.trees)
        done = _finished(study)
        raise KeyboardInterrupt(
            f"interrupted: the study {name!r} keeps its {done} finished trials ({url}); run "
            "the same command again to continue it"
        ) from None
    summary = write_report(study, problem, out, config.base.trees)
    summary["storage"] = url
    if config.final_ensemble:
        summary["ensemble"] = _final_ensemble(study, config, out, budget)
    return summary


def _sampler(config: TuneConfig, planned: int) -> optuna.samplers.BaseSampler:
    """TPE after random start-up trials (a third of those planned, 5 to 10).

    The TPE is multivariate and grouped, so that it models parameters jointly within each
    branch of the conditional space (a pretrained start has no layers or width to sample),
    and runs with a constant liar, so that processes sharing a study do not all sample next
    to the same best trial while others are still running. Too few random trials let TPE
    settle on one branch early: a BACE pilot with 3 sampled all but one of its completed
    trials from scratch (docs/results/tuning.md).
    """
    import optuna

    startup = min(10, max(5, planned // 3))
    with warnings.catch_warnings():  # multivariate, group and constant_liar are "experimental"
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            n_startup_trials=startup,
            seed=config.seed,
            multivariate=True,
            group=True,
            constant_liar=True,
        )


def _pruner() -> optuna.pruners.BasePruner:
    """The median rule: a trial whose best validation value after a tenth of its planned
    steps (:data:`~.trial.PROGRESS_STEPS`) is worse than the median of earlier trials' after
    the same tenth stops, once 3 trials finished, never before half its steps and never at
    its last tenth (a trial that has done its steps is finished, not pruned).

    Pruning after 2 epochs, as before, compared trials on how fast they start: in a BACE
    pilot 40 of 47 prunings came at epoch 2 and the search kept only batches of 16, which
    take four times the steps per epoch of 64 (docs/results/tuning.md).
    """
    import optuna

    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=PROGRESS_STEPS // 2)


def _finished(study: optuna.Study) -> int:
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def _taken(study: optuna.Study, before: int | None = None) -> int:
    """Trials finished or running (of a number below ``before``, when given)."""
    import optuna

    states = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.RUNNING,
    )
    return sum(1 for t in ran(study) if t.state in states and (before is None or t.number < before))


def _trials(
    study: optuna.Study,
    config: TuneConfig,
    problem: Problem,
    budget: SearchBudget,
    progress: bool,
) -> None:
    """Ask, train and tell trials until ``config.trials`` are taken or the time is out."""
    import optuna

    failures = 0
    while config.trials is None or _taken(study) < config.trials:
        seconds = budget.trial_seconds()
        if seconds is None:
            log.info("no time left for another trial")
            return
        trial = study.ask()
        if config.trials is not None and _taken(study, trial.number) >= config.trials:
            trial.set_user_attr(SURPLUS_ATTR, True)  # another process took the last one
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        try:
            value = run_trial(trial, config, problem, seconds, progress)
        except optuna.TrialPruned as exc:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log.info("trial %d: %s", trial.number, exc)
            continue
        except KeyboardInterrupt:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        except NoTimeToTrain as exc:  # one trial lost to time; the search goes on
            trial.set_user_attr("error", str(exc).splitlines()[0])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log.warning("trial %d failed for time: %s", trial.number, exc)
            failures += 1
            if failures >= MAX_FAILURES_IN_A_ROW:  # the rest would fare no better: report
                log.warning(
                    "%d trials in a row found no time to train: the search stops here and "
                    "reports its study; give a longer --time-limit (or fewer --trials)",
                    failures,
                )
                return
            continue
        except Exception as exc:  # one trial's failure (a non-finite loss)
            failures += 1
            trial.set_user_attr("error", str(exc).splitlines()[0] if str(exc) else repr(exc))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log.warning("trial %d failed: %s", trial.number, exc)
            if failures >= MAX_FAILURES_IN_A_ROW:
                raise
            continue
        failures = 0
        study.tell(trial, value)
        log.info(
            "trial %d: valid %s %.4f (best %.4f, trial %d)",
            trial.number, problem.objective, value, study.best_value, study.best_trial.number,
        )  # fmt: skip


def _final_ensemble(
    study: optuna.Study, config: TuneConfig, out: Path, budget: SearchBudget
) -> dict[str, Any] | None:
    """Train ``config.final_ensemble`` members of the best configuration into
    ``OUT/ensemble`` within what is left of the time limit; its metrics."""
    from ..training.ensemble import train_ensemble
    from ..training.run import train

    cfg = best_config(study, out, config.base.trees)
    if cfg is None:
        log.warning("no completed trial: no final ensemble")
        return None
    now = time.perf_counter()
    cfg = replace(cfg, out=str(out / "ensemble"), time_limit=budget.left(now) / 60)
    if config.final_ensemble == 1:
        return train(cfg, started=now)
    return train_ensemble(cfg, config.final_ensemble, started=now)
