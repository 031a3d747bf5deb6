r"""Ensembles of seeds: train K members (:mod:`~graphormer_urpe.inference.loading` loads them to
predict a mean and a spread).

``graphormer-urpe train --ensemble K --out OUT`` trains K runs that differ only in their
seed (``seed``, ``seed + 1``, ...) into ``OUT/member-<i>/`` (each a complete run folder), then
writes ``OUT/ensemble.json`` (the members and their seeds) and ``OUT/metrics.json``: the
ensemble's test metric, taken on the mean of the members' test outputs, beside each member's
own metrics and their mean and standard deviation.

``graphormer-urpe predict --checkpoint OUT`` (the ensemble's folder) runs every member on each
batch; each row gets the members' mean and, in ``<target>_std`` columns, their standard
deviation (population, ``ddof = 0``) as an uncertainty, both taken on what the CSV reports
(probabilities for binary tasks unless ``--logits``).

A ``time_limit`` is the budget of the whole ensemble: each member gets an equal share of
what is left when it starts, so time a member leaves unused goes to the ones after it. The
first member measures what steps, evaluations and checkpoints cost here; the others reuse
that measurement. The members share one trees head (``--trees on``), fitted by the first: its
inputs (the split, the descriptors, the fingerprints and the starting model's graph token) are
the same for every member, so each of the others copies it and only chooses its own weight in
the blend, and the time a fit would take goes to its network's steps.

When the steps are planned to fill the budget (typed ``--epochs`` or ``--max-steps`` are
kept, and a short run says so), the first member checks before its first step that each
member gets at least :data:`~graphormer_urpe.training.pacing.MIN_USEFUL_EPOCHS` epochs. Where
they would not, the ensemble trains as many members as the budget gives that many (at least
two; the trees head fitted once), with a warning, and records in ``metrics.json`` the number
asked for (``ensemble_asked``) and the ``--time-limit`` that would train them all
(``time_limit_for_asked``): the first member is set up again, its trees head kept and its
costs not measured twice (``members.json`` keeps their number for ``--resume``). Where not
even two fit, the ensemble is refused before any training, with the budget that would give
each of them that many and a margin (:data:`SUGGESTION_MARGIN`) so that it fits when given
back.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..inference.loading import ENSEMBLE_FILE
from ..inference.trees import TREES_DIR, TREES_FILE
from ..io.checkpoint import write_atomic
from ..runtime.train_config import TrainConfig
from .pacing import MIN_USEFUL_EPOCHS, RESERVE_FRACTION, RESERVE_SECONDS, RunCosts

__all__ = ["ENSEMBLE_FILE", "EnsembleBudgetError", "train_ensemble"]

log = logging.getLogger(__name__)

TAIL_SECONDS = 2.0
"""Seconds an ensemble keeps, beside 1% of its budget, for its own metrics after the members."""

SUGGESTION_MARGIN = 1.5
"""The refusal's suggested budget over its estimate: the measurement it rests on is taken on
a machine whose load changes, and the budget it names must be accepted when given back."""


PLAN_FILE = "members.json"
"""Written where fewer members than asked fitted: how many did, so that ``--resume`` continues
those, with what ``metrics.json`` records of the number asked for."""


class EnsembleBudgetError(ValueError):
    """``--time-limit`` is too short for two members of an ensemble to train a few epochs."""


class _FewerMembers(Exception):
    """The first member's check: only ``members`` members fit; set it up again for them,
    with the ``costs`` it measured (``need``: the minutes that would train all)."""

    def __init__(self, members: int, costs: RunCosts, need: float) -> None:
        super().__init__(members)
        self.members, self.costs, self.need = members, costs, need


def train_ensemble(
    config: TrainConfig,
    members: int,
    resume: bool = False,
    progress: bool = True,
    started: float | None = None,
) -> dict[str, Any]:
    """Train ``members`` seeds of ``config`` into ``config.out/member-<i>``; see module doc.

    Args:
        config: every member's run (``seed`` is the first member's).
        members: ``K`` >= 2.
        resume: continue each member from its newest checkpoint.
        progress: show progress bars.
        started: the ``time.perf_counter()`` from which ``config.time_limit`` counts (default:
            now).

    Returns:
        The ensemble's ``metrics.json`` contents.
    """
    from .run import load_splits, selection_metric, train
    from .run_setup import first_missing

    if members < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {members}")
    out = Path(config.out)
    start = time.perf_counter() if started is None else started
    made = None if out.exists() else first_missing(out)
    asked: dict[str, Any] = {"ensemble_asked": members}
    if resume and (out / PLAN_FILE).exists():  # fewer fitted when it started
        asked = json.loads((out / PLAN_FILE).read_text())
        members = asked.pop("members")
        log.info(
            "resuming the %d members that fitted, of %d asked for", members, asked["ensemble_asked"]
        )
    runs: list[dict[str, Any]] = []
    costs: RunCosts | None = None
    while len(runs) < members:
        i = len(runs)
        member = replace(config, seed=config.seed + i, out=str(out / f"member-{i}"))
        member_start, check = time.perf_counter(), None
        if config.time_limit is not None:
            member = replace(member, time_limit=_share(config, start, member_start, members - i))
            if i == 0 and not resume and config.fill_time_limit:  # typed --epochs: kept
                check = _check_members(config, members, start, made)
        log.info("ensemble member %d of %d: seed %d", i + 1, members, member.seed)
        _share_trees(out, i)
        try:
            runs.append(train(member, resume, progress, member_start, costs, check))
        except _FewerMembers as fewer:  # the first member again, for fewer members
            members, costs = fewer.members, fewer.costs
            asked["time_limit_for_asked"] = fewer.need
            write_atomic(out / PLAN_FILE, json.dumps({"members": members, **asked}).encode())
            continue
        if costs is None and runs[-1].get("measured_costs"):  # measured once, by the first
            costs = RunCosts(**runs[-1]["measured_costs"])
    seeds = [config.seed + i for i in range(members)]
    write_atomic(
        out / ENSEMBLE_FILE,
        json.dumps({"members": [f"member-{i}" for i in range(members)], "seeds": seeds}).encode(),
    )
    splits = load_splits(config)
    # what the members selected on (RMSE for a regression trained with MSE)
    metric = selection_metric(splits, str(runs[0].get("loss")))
    metrics = _ensemble_metrics(out, runs, splits, metric) | asked
    write_atomic(out / "metrics.json", json.dumps(metrics, indent=2).encode())
    log.info(
        "ensemble of %d: test %s %s (members %s)",
        members,
        metric,
        _fmt(metrics.get(f"test_{metric}")),
        ", ".join(_fmt(r.get(f"test_{metric}")) for r in runs),
    )
    return metrics


def _share_trees(out: Path, i: int) -> None:
    """Give member ``i`` (``i >= 1``) the trees head that the first member fitted, unless it
    already has its own (a resumed member's) or the first has none (``--trees off``)."""
    first, own = out / "member-0" / TREES_DIR, out / f"member-{i}" / TREES_DIR
    if i == 0 or own.exists() or not (first / TREES_FILE).exists():
        return
    shutil.copytree(first, own)
    log.info("ensemble member %d: the trees head of member 1 (same inputs), its own weight", i + 1)


def _share(config: TrainConfig, start: float, now: float, members: int) -> float:
    """Minutes for the next of ``members`` members still to train, starting at ``now``: an
    equal share of what is left of ``config.time_limit``, less the ensemble's own tail."""
    tail = (TAIL_SECONDS + 0.6 * config.time_limit) / 60  # minutes: 1% of the budget
    left = config.time_limit - tail - (now - start) / 60
    log.info("ensemble: %.2f of the %.2f minutes left per member", max(left, 0.0) / members, left)
    return max(left, 0.0) / members


def _check_members(config: TrainConfig, members: int, start: float, made: Path | None):
    """The first member's check, before its first step: where its plan gives fewer than
    :data:`MIN_USEFUL_EPOCHS` epochs, ask for as many members (two or more) as the budget
    left gives that many each, or refuse naming the budget that would give all ``members``
    that many; ``made``: the folder the ensemble created (removed on a refusal)."""

    def check(run: Any) -> None:  # run: the set-up Trainer
        per_epoch, total = run.data.steps_per_epoch, run.progress.total
        epochs = total / per_epoch
        if epochs >= MIN_USEFUL_EPOCHS or run.costs is None:
            return
        c = run.costs
        once = run.trees.seconds if run.trees is not None else 0.0  # fitted once, kept
        # each member: its set-up, its steps and finish, and its pacer's reserve
        steps = c.seconds_for(MIN_USEFUL_EPOCHS * per_epoch)
        member = (c.setup - once + steps + RESERVE_SECONDS) / (1 - RESERVE_FRACTION)
        left = 0.99 * 60 * config.time_limit - TAIL_SECONDS - (run.launch.clock() - start)
        fit = min(members - 1, int(left // member))
        need = (members * member + once + c.measure + TAIL_SECONDS) / 0.99 / 60  # minutes
        need = math.ceil(10 * need * SUGGESTION_MARGIN) / 10
        run.discard()  # (its trees head stays for the next set-up)
        if fit >= 2:
            log.warning(
                "--ensemble %d --time-limit %g: each member would train %.2g epochs; training "
                "%d members instead, so that each trains %d or more (--time-limit %g or more "
                "trains %d)",
                members, config.time_limit, epochs, fit, MIN_USEFUL_EPOCHS, need, members,
            )  # fmt: skip
            raise _FewerMembers(fit, c, need)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise EnsembleBudgetError(
            f"--ensemble {members} --time-limit {config.time_limit:g}: each member would "
            f"train {epochs:.2g} epochs ({total} steps of {per_epoch} per epoch; "
            f"{c.step:.3g} s per step measured here) and two that train "
            f"{MIN_USEFUL_EPOCHS} or more do not fit: give --time-limit {need:g} or more "
            f"for {members} members"
        )

    return check


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _ensemble_metrics(
    out: Path, runs: list[dict[str, Any]], splits: Any, metric: str
) -> dict[str, Any]:
    """The ensemble's test metrics from its members' ``test_predictions.csv`` (raw outputs:
    logits for binary tasks), with the members' own ``metric`` (the one they selected on)."""
    test: dict[str, float] = {}
    if all(r.get("test_has_labels") for r in runs):
        members = _member_outputs(out, len(runs), splits, "test")  # [K, n_test, T]
        y = _split_targets(splits, "test")
        test = splits.evaluate(members.mean(dim=0).float(), y)
        similarity = _split_similarities(out, splits)
        report, cal = _ensemble_calibration(out, len(runs), splits, members, y, similarity)
        test.update(report)
        _write_ensemble_predictions(out, splits, members, y, cal, similarity["test"])
    values = [r[f"test_{metric}"] for r in runs if f"test_{metric}" in r]
    # one split for every member: the mean predictor's metric is theirs
    baseline = {
        f"baseline_{split}_{metric}": runs[0].get(f"baseline_{split}_{metric}")
        for split in ("valid", "test")
    }
    return {
        "dataset": splits.name,
        "ensemble": len(runs),
        "seeds": [r["seed"] for r in runs],
        **{k if k.startswith("valid_") else f"test_{k}": v for k, v in test.items()},
        **baseline,
        f"member_test_{metric}_mean": float(np.mean(values)) if values else None,
        f"member_test_{metric}_std": float(np.std(values)) if values else None,
        "members": [
            {k: r.get(k) for k in ("seed", f"best_valid_{metric}", f"test_{metric}", "steps")}
            for r in runs
        ],
        "higher_is_better": splits.higher_is_better,
        "test_graphs": len(splits.test),
    }


def _member_outputs(out: Path, members: int, splits: Any, split: str) -> torch.Tensor:
    """``[K, n, T]`` (float64) the members' raw outputs (logits for binary tasks) on
    ``split``, read from their ``<split>_predictions.csv``."""
    import pandas as pd  # here: predict, which imports this module, reads no tables

    outputs = []
    for i in range(members):
        table = pd.read_csv(out / f"member-{i}" / f"{split}_predictions.csv")
        pred = table[[f"pred_{n}" for n in splits.target_names]].to_numpy(dtype=np.float64)
        if splits.task_type == "binary":  # the file holds probabilities
            pred = np.log(pred) - np.log1p(-pred)
        outputs.append(pred)
    return torch.from_numpy(np.stack(outputs))  # float64


def _split_targets(splits: Any, split: str) -> torch.Tensor:
    """``[n, T]`` the targets of ``split`` (``NaN``: missing)."""
    return torch.cat([d.y.reshape(1, -1) for d in getattr(splits, split)]).float()


def _split_similarities(out: Path, splits: Any) -> dict[str, np.ndarray | None]:
    """The nearest training similarity ``[n]`` of each validation and test molecule, by the
    first member's domain record (every member trained on the same split)."""
    from ..datasets.domain import split_similarity
    from ..io.checkpoint import load_checkpoint

    record = load_checkpoint(out / "member-0" / "best.pt").get("domain")
    return {s: split_similarity(record, getattr(splits, s)) for s in ("valid", "test")}


def _write_ensemble_predictions(
    out: Path,
    splits: Any,
    members: torch.Tensor,
    y: torch.Tensor,
    cal: Any,
    similarity: np.ndarray | None,
) -> None:
    """``out/test_predictions.csv``: per test molecule the true value, the members' mean,
    their std and (a regression with a calibrator) the interval at :data:`~graphormer_urpe.
    inference.intervals.calibration.REPORT_LEVEL`, as a single run writes it."""
    from ..inference.intervals.calibration import REPORT_LEVEL
    from .run_report import write_test_predictions

    shown = torch.sigmoid(members) if splits.task_type == "binary" else members
    spread = shown.std(dim=0, unbiased=False)  # [n_test, T], on the scale of pred_
    interval = None
    if cal is not None and splits.task_type == "regression":
        mean = members.mean(dim=0).numpy()
        interval = cal.interval(mean, spread.numpy(), REPORT_LEVEL, similarity)
    mean = members.mean(dim=0)
    write_test_predictions(out / "test_predictions.csv", splits, y, mean, "test", spread, interval)


def _ensemble_calibration(
    out: Path,
    members: int,
    splits: Any,
    test: torch.Tensor,
    y: torch.Tensor,
    similarity: dict[str, np.ndarray | None],
) -> tuple[dict[str, float], Any]:
    """Fit the ensemble's calibrator on its members' validation outputs (scores scaled by
    the difficulty :func:`~graphormer_urpe.inference.intervals.calibration.default_difficulty`
    picks),
    keep it in ``out/calibration.json``; its coverage and width (or ECE) on the test outputs
    ``test`` ``[K, n_test, T]``, with the Spearman of the error with each difficulty on the
    validation split, and the calibrator. Nothing (``({}, None)``) where a member kept no
    validation predictions (a run from before calibration). ``similarity``: the validation
    and test molecules' nearest training similarity."""
    from ..inference.intervals.calibration import (
        CALIBRATION_FILE,
        calibration_report,
        difficulty_spearman,
        fit_calibration,
    )

    if not all((out / f"member-{i}" / "valid_predictions.csv").exists() for i in range(members)):
        return {}, None
    valid = _member_outputs(out, members, splits, "valid")
    names = list(splits.target_names)
    y_valid = _split_targets(splits, "valid")
    cal = fit_calibration(
        valid, y_valid, splits.task_type, names, checkpoint=None, chose_checkpoint=True,
        similarity=similarity["valid"],
    )  # fmt: skip
    cal.save(out / CALIBRATION_FILE)
    report = calibration_report(cal, test, y, similarity=similarity["test"])
    if splits.task_type == "regression":  # which difficulty tracks the error on validation?
        spread = valid.std(dim=0, unbiased=False).numpy()
        error = np.abs(y_valid.double().numpy() - valid.mean(dim=0).numpy())
        rho = difficulty_spearman(error, spread, similarity["valid"])
        report |= {f"valid_{k}": v for k, v in rho.items()}
    return report, cal
