"""``graphormer-urpe tune``: a search on a tiny CSV set, its report and best config, a study
continued by a second run and shared by two processes, its budget and space, and its
refusals of bad input (a set too small to rank trials, a storage that cannot be reached, a
study made for other data, Ctrl-C)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import SMILES, FakeClock

optuna = pytest.importorskip("optuna")

from graphormer_urpe import cli  # noqa: E402
from graphormer_urpe.runtime.train_config import (  # noqa: E402
    make_config,
)
from graphormer_urpe.tuning.search_budget import (  # noqa: E402
    DEFAULT_TRIALS,
    RESERVE_SECONDS,
    SearchBudget,
    planned_trials,
)
from graphormer_urpe.tuning.space import SearchSpace  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

TINY = SearchSpace(num_layers=(1, 2), hidden_dim=(16, 32), batch_size=(16, 32))
"""The default space with small models, so that a trial takes a moment."""

SMALLEST = SearchSpace(
    num_layers=(1, 1),
    hidden_dim=(16,),
    batch_size=(16,),
    mol_features=("none",),
    init_from=("none",),
)
"""The smallest space (its ``repr`` is the code :data:`DRIVER` builds it with)."""

DRIVER = (
    "import sys; from dataclasses import replace; from graphormer_urpe.cli import tune, main; "
    "from graphormer_urpe.tuning.space import SearchSpace; real = tune.tune_config; "
    f"space = {SMALLEST!r}; "
    "tune.tune_config = lambda a: (lambda c, t: (replace(c, space=space), t))(*real(a)); "
    "sys.exit(main(sys.argv[1:]))"
)
"""``graphormer-urpe ARGS`` in another process, with the smallest space."""


@pytest.fixture(autouse=True)
def tiny_space(monkeypatch):
    """Searches of this module's in-process commands sample small models."""
    from graphormer_urpe.cli import tune

    real = tune.tune_config

    def small(args):
        config, tag = real(args)
        given = {k: getattr(config.space, k) for k in ("mol_features", "init_from", "loss")}
        return replace(config, space=replace(TINY, **given)), tag

    monkeypatch.setattr(tune, "tune_config", small)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """40 molecules, two targets: their SMILES length and their count of ring digits."""
    path = tmp_path_factory.mktemp("tune") / "mols.csv"
    rows = "".join(f"{s},{len(s)},{sum(c.isdigit() for c in s)}\n" for s in SMILES)
    path.write_text("smiles,y,z\n" + rows)
    return path


def _tune(table: Path, out: Path, *extra: str, target: str = "y") -> list[str]:
    return [
        "tune",
        "--dataset",
        f"csv:{table}",
        "--target-columns",
        target,
        "--time-limit",
        "10",
        "--epochs",
        "2",
        "--threads",
        "1",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


def _trials(out: Path) -> list[dict[str, str]]:
    with open(out / "trials.csv") as fh:
        return list(csv.DictReader(fh))


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("graphormer-urpe: ") and err.count("\n") == 1, err
    return err


def test_search_report_best_config_and_a_second_run_that_continues(table, tmp_path, capsys):
    out = tmp_path / "search"
    assert cli.main(_tune(table, out, "--trials", "3", "--sampler-seed", "0")) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = _trials(out)
    assert [int(r["number"]) for r in rows] == [0, 1, 2]
    # the first trial is the recommended recipe: `train --init-from pretrained`'s fields
    recipe = make_config("small", init_from="pretrained")
    assert rows[0]["baseline"] == "True" and rows[0]["param_init_from"] == "pretrained"
    assert float(rows[0]["param_lr"]) == recipe.lr and rows[0]["param_mol_features"] == "rdkit2d"
    assert all(r["state"] in ("COMPLETE", "PRUNED") for r in rows)
    assert (out / "study.db").exists() and (out / "history.png").stat().st_size > 1000
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    best = min(complete, key=lambda r: float(r["value"]))
    assert summary["best"]["trial"] == int(best["number"])
    assert summary["best"]["valid_rmse"] == pytest.approx(float(best["value"]))
    for name, value in summary["best"]["params"].items():
        assert str(value) == best[f"param_{name}"] or float(value) == pytest.approx(
            float(best[f"param_{name}"])
        )

    # the best config repeats the best trial: the same validation value
    assert cli.main(["train", "--config", str(out / "config.json"), "--no-progress"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["best_valid_rmse"] == pytest.approx(float(best["value"]), rel=1e-4)
    assert (out / "best" / "best.pt").exists()

    # the same command with more trials continues the study
    assert cli.main(_tune(table, out, "--trials", "5")) == 0
    capsys.readouterr()
    rows2 = _trials(out)
    assert [int(r["number"]) for r in rows2] == [0, 1, 2, 3, 4]
    assert [r["baseline"] for r in rows2].count("True") == 1  # only a new study starts with it
    assert [r["value"] for r in rows2[:3]] == [r["value"] for r in rows]
    if all(r["state"] == "COMPLETE" for r in rows2):  # importances from 5 completed trials
        assert (out / "importances.png").stat().st_size > 1000


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_two_processes_on_one_storage_share_the_trials(
    table, tmp_path, kind, monkeypatch, one_thread
):
    """Machine 1 is another process, machine 0 this one (the search runs here while the other
    process searches too), both with the smallest space."""
    storage = (
        str(tmp_path / "study.log") if kind == "journal" else f"sqlite:///{tmp_path / 'study.db'}"
    )
    n = 3
    from graphormer_urpe.cli import tune
    from graphormer_urpe.datasets import load_dataset

    load_dataset(f"csv:{table}", target_columns=["y"])  # the store, built before they start

    def args(i: int) -> list[str]:
        machine = tmp_path / f"machine-{i}"
        return _tune(table, machine, "--trials", str(n), "--storage", storage) + [
            "--study",
            "shared",
            "--epochs",
            "1",
        ]

    log = tmp_path / "machine-1.log"
    with open(log, "w") as fh:
        other = subprocess.Popen(
            [sys.executable, "-c", DRIVER, *args(1)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
        real = tune.tune_config

        def smallest(a):
            config, tag = real(a)
            return replace(config, space=SMALLEST), tag

        monkeypatch.setattr(tune, "tune_config", smallest)
        try:
            assert cli.main(args(0)) == 0
        finally:
            other.wait(timeout=600)
    assert other.returncode == 0, log.read_text()[-2000:]
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend

        store = optuna.storages.JournalStorage(JournalFileBackend(storage))
    else:
        store = storage
    trials = optuna.load_study(study_name="shared", storage=store).get_trials()
    finished = [t.number for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == n
    # each trial ran in one process: its run folder exists on one machine only
    ran = [
        {int(d.name.split("-")[1]) for d in (tmp_path / f"machine-{i}" / "trials").iterdir()}
        for i in range(2)
        if (tmp_path / f"machine-{i}" / "trials").exists()
    ]
    assert sum(len(r) for r in ran) == len(set().union(*ran)) == n
    assert set().union(*ran) == set(finished)


def test_trial_minutes_give_each_trial_that_time_and_must_fit(table, tmp_path):
    """``--trial-minutes``: every trial and ensemble member gets it, as many trials start as
    fit the rest of the limit, and a length the limit cannot hold is refused."""
    assert planned_trials(10, None, 3) == 3 and planned_trials(10, 7, 3) == 7
    assert planned_trials(10, None, None) == DEFAULT_TRIALS
    b = SearchBudget(minutes=10, planned=3, ensemble=1, started=0.0, trial_minutes=3)
    b.begin(60.0)  # a slow set-up does not shorten a fixed share
    assert b.share == 180 and b.ensemble_seconds() == 180
    clock, spent = 60.0, []
    while (s := b.trial_seconds(clock)) is not None:
        spent.append(s)
        clock += s
    # 594 s usable less the 5 s reserve, the set-up and the member: 349 s, one 180 s trial;
    # the 169 s left would hold half a share, but a trial of fixed length runs whole or not
    assert spent == [180] and 0.99 * 600 - RESERVE_SECONDS - 60 - 2 * 180 < 180
    assert clock + b.ensemble_seconds() <= b.end
    with pytest.raises(ValueError, match="--trial-minutes 3 does not fit --time-limit 5"):
        SearchBudget(minutes=5, ensemble=1, trial_minutes=3)
    with pytest.raises(ValueError, match="--trial-minutes"):
        SearchBudget(minutes=5, trial_minutes=0)
    from graphormer_urpe.cli import build_parser, tune

    args = build_parser().parse_args(_tune(table, tmp_path, "--trial-minutes", "0.5"))
    config = tune.tune_config(args)[0]
    assert config.trial_minutes == 0.5


def test_cli_fixes_what_is_given_and_a_study_keeps_its_space(table, tmp_path, capsys):
    from graphormer_urpe.cli import build_parser, tune

    args = build_parser().parse_args(_tune(table, tmp_path / "x", "--init-from", "none"))
    space = tune.tune_config(args)[0].space
    assert space.init_from == ("none",) and len(space.loss) == 2
    assert space.mol_features == ("none", "rdkit2d", "rdkit2d+morgan")
    storage = str(tmp_path / "study.log")
    first = _tune(table, tmp_path / "a", "--trials", "1", "--storage", storage, "--study", "s")
    assert cli.main([*first, "--init-from", "none", "--loss", "mse"]) == 0
    rows = _trials(tmp_path / "a")
    assert len(rows) == 1 and "param_init_from" not in rows[0] and "param_loss" not in rows[0]
    capsys.readouterr()
    assert cli.main([*first[:-1], "s2"]) == 0  # the control: another study name is welcome
    capsys.readouterr()
    assert cli.main([*first, "--init-from", "none"]) == 2  # the loss is no longer fixed
    err = _one_line_error(capsys)
    assert "study 's' was made with another search space" in err and "loss" in err


def test_a_set_too_small_for_a_validation_split_is_refused(tmp_path, capsys):
    small = tmp_path / "five.csv"
    small.write_text("smiles,y\nCCO,1\nCCC,2\nCCN,3\nCCCC,4\nc1ccccc1,5\n")
    out = tmp_path / "search"
    assert cli.main(_tune(small, out, "--trials", "2")) == 2
    err = _one_line_error(capsys)
    assert "validation split" in err and "valid split is empty" in err
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--epochs", "--threads"])
def test_zero_epochs_or_threads_are_refused_by_the_parser_as_train_refuses_them(
    tmp_path, capsys, flag
):
    args = _tune(tmp_path / "never-read.csv", tmp_path / "search")
    args[args.index(flag) + 1] = "0"
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err
    assert not (tmp_path / "search").exists()


@pytest.mark.parametrize(
    "storage", ["postgresql://nobody@127.0.0.1:1/x", "{tmp}/no-such-folder/study.log"]
)
def test_a_storage_that_cannot_be_reached_is_one_line_and_writes_nothing(
    table, tmp_path, capsys, store_dir, storage
):
    storage = storage.format(tmp=tmp_path)
    out = tmp_path / "search"
    assert cli.main(_tune(table, out, "--storage", storage)) == 2
    err = _one_line_error(capsys)
    assert f"--storage {storage} cannot be reached" in err
    assert not out.exists() and not any(store_dir.iterdir())  # not even a dataset store


def test_a_study_name_used_for_other_data_is_refused(table, tmp_path, capsys):
    storage = str(tmp_path / "study.log")
    first = _tune(table, tmp_path / "a", "--trials", "1", "--storage", storage, "--study", "s")
    assert cli.main(first) == 0
    capsys.readouterr()
    other = _tune(
        table, tmp_path / "b", "--trials", "1", "--storage", storage, "--study", "s", target="z"
    )
    assert cli.main(other) == 2
    err = _one_line_error(capsys)
    assert "study 's' was made for other data" in err and "target_columns" in err
    assert not (tmp_path / "b").exists()
    study = optuna.load_study(
        study_name="s",
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage)),
    )
    assert len(study.trials) == 1


def test_ctrl_c_keeps_the_finished_trials_and_says_how_to_continue(
    table, tmp_path, capsys, monkeypatch
):
    from graphormer_urpe.training import run as training_run

    real_train = training_run.train

    def interrupted_second_trial(cfg, *args, on_epoch=None, **kw):
        def hook(epoch, metrics):
            if cfg.out.endswith("trial-0001"):
                raise KeyboardInterrupt
            on_epoch(epoch, metrics)

        return real_train(cfg, *args, on_epoch=hook, **kw)

    monkeypatch.setattr(training_run, "train", interrupted_second_trial)
    out = tmp_path / "search"
    assert cli.main(_tune(table, out, "--trials", "3")) == 130
    err = _one_line_error(capsys)
    assert "keeps its 1 finished trials" in err and "run the same command again" in err
    assert [r["state"] for r in _trials(out)] == ["COMPLETE", "FAIL"]
    monkeypatch.setattr(training_run, "train", real_train)
    assert cli.main(_tune(table, out, "--trials", "3")) == 0
    capsys.readouterr()
    states = [r["state"] for r in _trials(out)]
    assert states[:2] == ["COMPLETE", "FAIL"] and len(states) == 4  # 3 finished
    assert all(s in ("COMPLETE", "PRUNED") for s in states[2:])


def test_without_optuna_tune_says_how_to_install_it_and_other_commands_never_import_it(
    table, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now fails
    assert cli.main(_tune(table, tmp_path / "search")) == 2
    assert "pip install 'graphormer-urpe[tune]'" in _one_line_error(capsys)
    code = (
        "import sys; from graphormer_urpe import cli; cli.build_parser(); "
        "import graphormer_urpe.training.run; print('optuna' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "False"


def test_a_limit_too_short_for_the_loading_is_refused_at_once(table, tmp_path, capsys, monkeypatch):
    """On a clock that moves only when the test says: the loading takes a second of it."""
    import time

    from graphormer_urpe.tuning import search

    real = search.load_problem
    clock = FakeClock()

    def slow_load(*a, **kw):  # a busy machine: the loading takes a second
        clock.advance(1.0)
        return real(*a, **kw)

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(search, "load_problem", slow_load)
    out = tmp_path / "search"
    args = _tune(table, out)
    args[args.index("--time-limit") + 1] = "0.12"
    assert cli.main(args) == 2
    err = _one_line_error(capsys)
    assert "cannot hold 2 trials: loading the data took" in err and "give --time-limit" in err
    assert not out.exists()


def test_trials_that_fail_for_time_do_not_end_the_search(table, tmp_path, capsys, monkeypatch):
    from graphormer_urpe.training import run as training_run
    from graphormer_urpe.training.pacing import NoTimeToTrain

    real_train = training_run.train

    def first_has_no_time(cfg, *args, **kw):
        if cfg.out.endswith("trial-0000"):
            raise NoTimeToTrain("--time-limit 0.1: 0.10 min went to loading the data")
        return real_train(cfg, *args, **kw)

    monkeypatch.setattr(training_run, "train", first_has_no_time)
    out = tmp_path / "search"
    assert cli.main(_tune(table, out, "--trials", "2")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trials"]["fail"] == 1 and summary["trials"]["complete"] >= 1
    rows = _trials(out)
    assert rows[0]["state"] == "FAIL" and "went to loading" in rows[0]["error"]
    assert (out / "config.json").exists()

    def never_time(cfg, *args, **kw):
        raise NoTimeToTrain("no time")

    monkeypatch.setattr(training_run, "train", never_time)
    out = tmp_path / "none"
    assert cli.main(_tune(table, out)) == 0  # reported, not an error
    summary = json.loads(capsys.readouterr().out)
    assert summary["trials"] == {"complete": 0, "pruned": 0, "fail": 3}
    assert "best" not in summary and len(_trials(out)) == 3
