"""Hyper-parameter search in the library: the budget shared by the trials, fixed choices and the
search space, the baseline trial, pruning and re-planned trials, the loading's share of the
limit (the ``tune`` command end to end: ``tests/cli/test_tune.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")
from graphormer_urpe.runtime.train_config import (  # noqa: E402
    TrainConfig,
    make_config,
    override_config,
    resolve_mol_features,
)
from graphormer_urpe.tuning.problem import Problem  # noqa: E402
from graphormer_urpe.tuning.search_budget import (  # noqa: E402
    RESERVE_SECONDS,
    SearchBudget,
)
from graphormer_urpe.tuning.space import SearchSpace, baseline, check_space, suggest  # noqa: E402

TINY = SearchSpace(num_layers=(1, 2), hidden_dim=(16, 32), batch_size=(16, 32))
"""The default space with small models, so that a trial takes a moment."""


def test_budget_shares_the_limit_and_keeps_within_it():
    b = SearchBudget(minutes=10, planned=4, ensemble=2, started=100.0)
    usable = 0.99 * 600 - RESERVE_SECONDS
    assert b.share == pytest.approx(usable / 6)
    clock, spent = 100.0, []
    while (s := b.trial_seconds(clock)) is not None:
        spent.append(s)
        clock += s
    assert len(spent) == 4 and all(s == pytest.approx(b.share) for s in spent)
    assert clock + b.ensemble_seconds() + RESERVE_SECONDS <= 100.0 + 1.02 * 600
    late = b.end - b.ensemble_seconds() - 0.3 * b.share  # less than half a share left
    assert b.trial_seconds(late) is None
    assert b.trial_seconds(b.end - b.ensemble_seconds() - 0.7 * b.share) == pytest.approx(
        0.7 * b.share
    )
    b.begin(100.0 + 0.25 * usable)  # the set-up took a quarter: the shares split the rest
    assert b.share == pytest.approx(0.75 * usable / 6)
    with pytest.raises(ValueError, match="--time-limit"):
        SearchBudget(minutes=0)


def _problem(**kw) -> Problem:
    fields = dict(
        dataset="csv:x.csv",
        tag="x",
        objective="rmse",
        maximize=False,
        task_type="regression",
        is_csv=True,
        pretrained_fits=True,
        sizes={"train": 8, "valid": 2, "test": 2},
        fingerprint={},
    )
    return Problem(**{**fields, **kw})


FIXED = dict(
    lr=1e-3,
    weight_decay=1e-3,
    warmup_fraction=0.1,
    batch_size=32,
    dropout=0.1,
    attention_dropout=0.1,
    mol_features="rdkit2d",
    loss="smooth_l1",
    init_from="none",
    hidden_dim=64,
    num_layers=3,
)
"""A value for every parameter of the default space."""


def _fixed(**params) -> optuna.trial.FixedTrial:
    return optuna.trial.FixedTrial({**FIXED, **params})


def _fixed_without(*names: str, **params) -> optuna.trial.FixedTrial:
    """A trial that cannot sample ``names`` (FixedTrial raises on a parameter it lacks)."""
    values = {**FIXED, **params}
    return optuna.trial.FixedTrial({k: v for k, v in values.items() if k not in names})


def test_fixed_choices_are_used_and_never_sampled():
    space = replace(SearchSpace(), init_from=("pretrained",), loss=("mse",))
    trial = _fixed_without("init_from", "loss", "hidden_dim", "num_layers")
    train, model = suggest(trial, space, _problem())
    assert train["init_from"] == "pretrained" and train["loss"] == "mse"
    assert "num_layers" not in model and "hidden_dim" not in model
    scratch = replace(SearchSpace(), init_from=("none",))
    train, model = suggest(_fixed_without("init_from"), scratch, _problem())
    assert "init_from" not in train and model["num_layers"] == 3
    with pytest.raises(ValueError, match="init_from"):  # the control: a space that samples it
        suggest(_fixed_without("init_from"), SearchSpace(), _problem())


def _trained_like(params: dict, space: SearchSpace, problem: Problem) -> TrainConfig:
    """The run a trial with ``params`` trains (from the csv base tune starts from)."""
    base = make_config("small", dataset="csv:x.csv", target_columns=["y"])
    train, model = suggest(optuna.trial.FixedTrial(params), space, problem)
    return override_config(base, model, **train)


@pytest.mark.parametrize("space_init", [("none", "pretrained"), ("none",)])
def test_the_baseline_trial_trains_what_train_does_by_default(space_init):
    space = replace(SearchSpace(), init_from=space_init)
    base = make_config("small", dataset="csv:x.csv", target_columns=["y"])
    params = baseline(space, _problem(), base)
    got = _trained_like(params, space, _problem())  # FixedTrial raises on a missing one
    # the reference: `train` with the recipe's flags, resolved as the loop resolves them
    init = "pretrained" if "pretrained" in space_init else None
    want = resolve_mol_features(make_config("small", dataset="csv:x.csv", init_from=init))
    for name in ("lr", "weight_decay", "batch_size", "mol_features"):
        assert getattr(got, name) == getattr(want, name), name
    for name in ("dropout", "attention_dropout", "num_layers", "hidden_dim"):
        assert getattr(got.model, name) == getattr(want.model, name), name
    assert got.warmup_fraction == 0.1 and got.loss == "mse"
    assert ("num_layers" in params) == (init is None)  # the pretrained start fixes the model


def test_a_baseline_value_the_space_does_not_hold_is_left_to_the_sampler():
    space = replace(SearchSpace(), lr=(1e-3, 3e-3), batch_size=(16, 32), mol_features=("none",))
    params = baseline(space, _problem(), make_config("small", dataset="csv:x.csv"))
    assert "lr" not in params and "batch_size" not in params and "mol_features" not in params
    assert params["weight_decay"] == 0.01 and params["init_from"] == "pretrained"
    classification = baseline(SearchSpace(), _problem(task_type="binary"), make_config("small"))
    assert "loss" not in classification  # binary tasks train on BCE: nothing to sample


def test_trials_report_their_best_at_tenths_and_are_not_pruned_before_half(tmp_path, monkeypatch):
    from graphormer_urpe.runtime import make_config
    from graphormer_urpe.training import run as training_run
    from graphormer_urpe.tuning import search
    from graphormer_urpe.tuning.trial import PROGRESS_STEPS, run_trial
    from graphormer_urpe.tuning.tune_config import TuneConfig

    study = optuna.create_study(direction="minimize", pruner=search._pruner())
    for value in (1.0, 1.1, 1.2):  # three finished trials, far better at every tenth
        study.add_trial(
            optuna.trial.create_trial(
                value=value,
                intermediate_values={k: value for k in range(1, PROGRESS_STEPS + 1)},
                params={},
                distributions={},
            )
        )
    values = [5.0, 3.0, 4.0, 6.0, 2.5, 2.8, 3.5, 2.6, 2.7, 2.9, 2.4, 2.2]
    seen: list[int] = []

    def epochs(cfg, *args, on_epoch=None, **kw):  # 20 epochs planned, each a twentieth
        for epoch in range(20):
            seen.append(epoch)
            on_epoch(epoch, {"rmse": values[epoch % len(values)], "progress": (epoch + 1) / 20})
        return {"best_valid_rmse": 2.2}

    monkeypatch.setattr(training_run, "train", epochs)
    base = make_config("small", dataset="csv:x.csv", target_columns=["y"])
    config = TuneConfig(base=base, time_limit=1, out=str(tmp_path), space=TINY)
    trial = study.ask()
    with pytest.raises(optuna.TrialPruned, match="after epoch 9"):
        run_trial(trial, config, _problem(), seconds=60)
    assert seen == list(range(10))  # the tenth 5 (epoch 9) is the first it may be pruned at
    best = np.minimum.accumulate(values[:10])  # epoch 2k - 1 is the first in tenth k
    got = study.trials[-1].intermediate_values
    assert got == {k: float(best[2 * k - 1]) for k in range(1, 6)}
    # a trial as bad that reaches its last tenth at once is done, not pruned
    monkeypatch.setattr(
        training_run,
        "train",
        lambda cfg, *a, on_epoch=None, **kw: (
            on_epoch(0, {"rmse": 9.0, "progress": 1.0}) or {"best_valid_rmse": 9.0}
        ),
    )
    assert run_trial(study.ask(), config, _problem(), seconds=60) == 9.0


def test_a_re_planned_trial_is_repeated_with_the_steps_and_warm_up_it_ended_with(
    tmp_path, monkeypatch
):
    """A trial whose pacer re-planned 541 steps to 757 keeps 757 and its 81 warm-up steps
    for ``train --config``; one that kept its plan keeps its config as written."""
    from graphormer_urpe.runtime import make_config
    from graphormer_urpe.runtime.train_config import plan_steps
    from graphormer_urpe.training import run as training_run
    from graphormer_urpe.tuning.trial import CONFIG_ATTR, run_trial
    from graphormer_urpe.tuning.tune_config import TuneConfig

    def run(planned):
        def train(cfg, *a, on_epoch=None, **kw):
            written = replace(cfg, max_steps=541, warmup_steps=81)  # what the loop records
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            (Path(cfg.out) / "config.json").write_text(written.to_json())
            return {"best_valid_rmse": 1.0, "steps_planned": planned}

        monkeypatch.setattr(training_run, "train", train)
        study = optuna.create_study()
        trial = study.ask()
        run_trial(trial, config, _problem(), seconds=60)
        return TrainConfig.from_dict(trial.user_attrs[CONFIG_ATTR])

    base = make_config("small", dataset="csv:x.csv", target_columns=["y"])
    config = TuneConfig(base=base, time_limit=1, out=str(tmp_path), space=TINY)
    config.space = replace(TINY, warmup_fraction=(0.15, 0.15))
    again = run(757)
    assert again.max_steps == 757 and plan_steps(again, 10)[::2] == (757, 81)
    kept = run(541)
    assert kept.warmup_fraction == 0.15 and plan_steps(kept, 10)[::2] == (541, 81)


def test_fixed_choices_a_set_cannot_take_are_refused():
    other_atoms = _problem(pretrained_fits=False)
    with pytest.raises(ValueError, match="--init-from pretrained needs"):
        check_space(replace(SearchSpace(), init_from=("pretrained",)), other_atoms)
    check_space(replace(SearchSpace(), init_from=("none",)), other_atoms)
    with pytest.raises(ValueError, match="--loss applies to regression"):
        check_space(replace(SearchSpace(), loss=("mse",)), _problem(task_type="binary"))
    check_space(SearchSpace(), _problem(task_type="binary"))


def test_no_trial_starts_shorter_than_the_loading_and_a_limit_for_fewer_than_2_is_refused():
    from graphormer_urpe.tuning.search_budget import LOAD_FACTOR, TuneBudgetError

    b = SearchBudget(minutes=2, planned=12, started=0.0, loading=20.0)
    b.begin(20.0)
    assert b.share == pytest.approx(LOAD_FACTOR * 20.0)  # not the 7.6 s of an equal share
    clock, spent = 20.0, []
    while (s := b.trial_seconds(clock)) is not None:
        spent.append(s)
        clock += s
    assert len(spent) == 2 and min(spent) >= LOAD_FACTOR * 20.0
    b.check_fits(20.0)  # 2 trials of 40 s fit in the 93.8 s left
    slow = SearchBudget(minutes=2, planned=12, started=0.0, loading=30.0)
    with pytest.raises(TuneBudgetError) as refused:
        slow.check_fits(30.0)
    text = str(refused.value)
    assert "\n" not in text and "loading the data took 30 s" in text
    fits = float(text.split("give --time-limit ")[1].split()[0])
    assert fits > 2
    SearchBudget(minutes=fits, started=0.0, loading=30.0).check_fits(30.0)  # it does fit
    fixed = SearchBudget(minutes=10, started=0.0, loading=30.0, trial_minutes=0.5)
    with pytest.raises(TuneBudgetError, match="--trial-minutes 0.5 is too short"):
        fixed.check_fits(30.0)
