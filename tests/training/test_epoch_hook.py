"""The training loop's ``on_epoch`` hook: called once per validated epoch with that epoch's
validation metrics (those history.csv records), and an exception it raises ends the run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from graphormer_urpe.runtime import make_config
from graphormer_urpe.training.run import train
from tests.helpers import SMILES

TINY = dict(num_layers=1, hidden_dim=16, ffn_dim=16, num_heads=2)


class Stop(Exception):
    """What the hook raises to end a run."""


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hook") / "mols.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{len(s)}\n" for s in SMILES))
    return path


def _config(table: Path, out: Path, **over):
    fields = dict(
        dataset=f"csv:{table}",
        target_columns=["y"],
        out=str(out),
        epochs=4,
        batch_size=8,
        warmup_steps=2,
        threads=1,
    )
    return make_config("small", model_overrides=TINY, **{**fields, **over})


def _history(out: Path) -> list[dict[str, str]]:
    with open(out / "history.csv") as fh:
        return list(csv.DictReader(fh))


def test_hook_sees_each_validated_epoch_as_history_records_it(table, tmp_path, one_thread):
    calls: list[tuple[int, dict[str, float]]] = []
    out = tmp_path / "run"
    metrics = train(
        _config(table, out, eval_every=2),
        progress=False,
        on_epoch=lambda e, m: calls.append((e, m)),
    )
    rows = [r for r in _history(out) if r["valid_rmse"]]
    assert [e for e, _ in calls] == [int(r["epoch"]) for r in rows] == [1, 3]
    for (_, m), row in zip(calls, rows, strict=True):
        assert {"rmse", "mae"} <= set(m)
        assert m["rmse"] == pytest.approx(float(row["valid_rmse"]), rel=1e-6)
    progress = [m["progress"] for _, m in calls]  # the share of the planned steps done
    assert progress == pytest.approx([0.5, 1.0])
    assert metrics["best_valid_rmse"] == pytest.approx(min(m["rmse"] for _, m in calls))


def test_an_exception_from_the_hook_ends_the_run_there(table, tmp_path, one_thread):
    seen: list[int] = []

    def hook(epoch: int, metrics: dict[str, float]) -> None:
        seen.append(epoch)
        if epoch == 1:
            raise Stop

    out = tmp_path / "run"
    with pytest.raises(Stop):
        train(_config(table, out), progress=False, on_epoch=hook)
    assert seen == [0, 1]
    assert [int(r["epoch"]) for r in _history(out)] == [0, 1]  # epoch 1 recorded, no more
    assert (out / "best.pt").exists() and not (out / "metrics.json").exists()
