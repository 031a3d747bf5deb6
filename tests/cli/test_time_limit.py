"""``train --time-limit`` on the command line: an ensemble too short for its members trains as
many as fit, or, where not even two fit, is refused before training with a budget that fits;
typed epochs win over the refusal,
and a budget spent on loading is refused; measured costs come from a steady clock where the
outcome depends on them (``steady_clock``)."""

from __future__ import annotations

import json
import logging

import pytest

from graphormer_urpe import cli
from graphormer_urpe.training import run as training_run
from graphormer_urpe.training.pacing import MIN_USEFUL_EPOCHS
from tests.helpers import train_args


def test_an_ensemble_too_short_for_its_members_is_refused_before_training(
    table, tmp_path, steady_clock
):
    out = tmp_path / "ens"
    args = train_args(table, tmp_path / "data", out, "--ensemble", "3")
    i = args.index("--epochs")
    del args[i : i + 2]
    assert cli.main([*args, "--time-limit", "0.02"]) == 2  # 1.2 s for three members
    assert not out.exists()  # nothing left behind


def _refused_budget(table, tmp_path, capsys) -> tuple[list[str], str, float]:
    """``train --ensemble 2 --time-limit 0.02`` planned to fill it: its arguments without the
    limit, the refusal and the budget it names."""
    args = train_args(table, tmp_path / "data", tmp_path / "ens", "--ensemble", "2")
    i = args.index("--epochs")
    del args[i : i + 2]
    assert cli.main([*args, "--time-limit", "0.02"]) == 2
    message = capsys.readouterr().err
    return args, message, float(message.split("give --time-limit ")[1].split()[0])


def _planned_epochs(monkeypatch) -> list[float]:
    """The epochs each trainer set up from now on plans (appended as they are set up)."""
    planned: list[float] = []
    steady = training_run.Trainer

    def record(*a, **kw):
        trainer = steady(*a, **kw)
        planned.append(trainer.progress.total / trainer.data.steps_per_epoch)
        return trainer

    monkeypatch.setattr(training_run, "Trainer", record)
    return planned


def test_the_refusal_names_a_budget_that_then_fits(
    table,
    tmp_path,
    capsys,
    monkeypatch,
    steady_clock,
):
    args, message, need = _refused_budget(table, tmp_path, capsys)
    assert "--ensemble 2 --time-limit 0.02" in message and "do not fit" in message
    assert need > 0.02
    # given back on a machine that got busier (every cost 30% higher), it is accepted and
    # gives each member at least MIN_USEFUL_EPOCHS epochs as planned
    steady_clock.append(1.3)
    planned = _planned_epochs(monkeypatch)
    assert cli.main([*args, "--time-limit", f"{need:g}", "--out", str(tmp_path / "b")]) == 0
    assert len(planned) == 2 and min(planned) >= MIN_USEFUL_EPOCHS


def test_an_ensemble_too_short_for_its_members_trains_as_many_as_fit(
    table, tmp_path, capsys, caplog, monkeypatch, steady_clock
):
    """A budget that fits two or three members of five: as many train as get five epochs
    each, the first member set up again for them with the costs it measured; metrics.json
    and ensemble.json say how many, and how many were asked for."""
    args, _, need = _refused_budget(table, tmp_path, capsys)
    probe, measured = training_run.Trainer.keywords["probe"], []
    measure = probe.measure
    monkeypatch.setattr(probe, "measure", lambda self: measured.append(1) or measure(self))
    planned = _planned_epochs(monkeypatch)
    out = tmp_path / "five"
    args[args.index("--ensemble") + 1] = "5"
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main([*args, "--time-limit", f"{need:g}", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    trained = metrics["ensemble"]
    assert 2 <= trained < 5 and metrics["ensemble_asked"] == 5
    assert json.loads((out / "ensemble.json").read_text())["members"] == [
        f"member-{k}" for k in range(trained)
    ]
    assert sorted(p.name for p in out.glob("member-*")) == [f"member-{k}" for k in range(trained)]
    # the first set-up planned too few epochs; then every member at least MIN_USEFUL_EPOCHS
    assert len(planned) == trained + 1 and planned[0] < MIN_USEFUL_EPOCHS
    assert min(planned[1:]) >= MIN_USEFUL_EPOCHS
    assert f"training {trained} members instead" in caplog.text
    # the closing lines say so, with the budget that trains all five (as the refusal names)
    asked = metrics["time_limit_for_asked"]
    assert asked > need and f"trained {trained} of the 5 members" in capsys.readouterr().err
    assert measured == [1]  # the costs measured once, by the first set-up


def test_typed_epochs_win_over_the_ensembles_refusal(table, tmp_path, caplog, steady_clock):
    """--epochs 2 with --time-limit: trained as typed, each member saying it is short (as
    without --time-limit), not refused."""
    out = tmp_path / "ens"
    args = train_args(table, tmp_path / "data", out, "--ensemble", "2")
    args[args.index("--epochs") + 1] = "2"
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main([*args, "--time-limit", "0.5"]) == 0
    for k in range(2):
        m = json.loads((out / f"member-{k}" / "metrics.json").read_text())
        assert m["epochs_trained"] == pytest.approx(2.0) and m["short_run"] is True
    assert "too short to trust" in caplog.text


def test_a_budget_spent_before_training_is_refused_and_leaves_nothing(
    table,
    tmp_path,
    capsys,
    caplog,
):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out)
    i = args.index("--epochs")
    del args[i : i + 2]
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main([*args, "--time-limit", "0.001"]) == 2  # 60 ms: gone on loading
    err = capsys.readouterr().err
    assert "leaving no time to train" in err and "store is kept" in err
    assert not out.exists()
    assert "min left" not in caplog.text  # no plan over a negative time
