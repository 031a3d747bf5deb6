"""The command line end to end on a tiny CSV fixture: train, evaluate, predict, resume, plot."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphormer_urpe import cli
from tests.helpers import SMILES, train_args


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("csv") / "mols.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms", "note"])
        for i, s in enumerate(SMILES):
            w.writerow([s, sum(ch.isalpha() and ch not in "lr" for ch in s), f"row{i}"])
        w.writerow(["not_a_smiles((", 3, "bad"])
    return path


"""Model flags for fast command-line runs."""


def test_train_evaluate_predict_plot(table, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(train_args(table, tmp_path / "data", out, "--attention", "urpe")) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in (
        "best_valid_rmse",  # a CSV regression: MSE on standardised targets, selected on RMSE
        "best_valid_mae",
        "test_mae",
        "test_rmse",
        "baseline_valid_rmse",
        "parameters",
        "steps",
        "graphs_per_second",
        "wall_seconds",
    ):
        assert key in metrics
    assert metrics["attention"] == "urpe" and metrics["steps"] == 3 * 4
    assert metrics["loss"] == "mse" and metrics["normalized_targets"] is True
    assert (out / "config.json").exists() and (out / "best.pt").exists()
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 and "valid_rmse" in rows[0]
    capsys.readouterr()

    assert cli.main(["evaluate", "--checkpoint", str(out / "best.pt"), "--no-progress"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "test"
    assert result["mae"] == pytest.approx(metrics["test_mae"], rel=1e-5)
    assert json.loads((out / "eval_test.json").read_text())["mae"] == result["mae"]

    pred_csv = tmp_path / "pred.csv"
    args = [
        "predict",
        "--checkpoint",
        str(out / "best.pt"),
        "--smiles",
        "CCO",
        "c1ccccc1",
        "xx((",
        "--output",
        str(pred_csv),
        "--no-progress",
    ]
    assert cli.main(args) == 0
    with open(pred_csv) as fh:
        rows = list(csv.DictReader(fh))
    assert [r["smiles"] for r in rows] == ["CCO", "c1ccccc1", "xx(("]
    assert rows[0]["heavy_atoms"] != "" and rows[2]["heavy_atoms"] == "" and rows[2]["error"]
    assert "could not be read" in capsys.readouterr().err

    assert cli.main(["plot", str(out), "--compare", str(tmp_path / "cmp.png")]) == 0
    assert (tmp_path / "cmp.png").stat().st_size > 1000
    assert (out / "curves.png").stat().st_size > 1000
    assert (out / "attn_scale.png").stat().st_size > 1000


def test_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output folder is ./runs/...
    code = cli.main(["train", "--dataset", f"csv:{tmp_path / 'missing.csv'}", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("graphormer-urpe: error:") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()  # a run that could not start leaves no folder
    code = cli.main(["evaluate", "--checkpoint", str(tmp_path / "nope.pt")])
    err = capsys.readouterr().err
    assert code == 2 and "does not exist" in err and err.count("\n") == 1


def test_console_script_help_lists_every_flag():
    out = subprocess.run(
        [sys.executable, "-m", "graphormer_urpe.cli", "train", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in (
        "--dataset",
        "--preset",
        "--attention",
        "--epochs",
        "--max-steps",
        "--batch-size",
        "--lr",
        "--out",
        "--data-root",
        "--device",
        "--seed",
        "--resume",
        "--num-layers",
        "--urpe-share-layers",
    ):
        assert flag in out
    for cmd in ("evaluate", "predict", "plot"):
        sub = subprocess.run(
            [sys.executable, "-m", "graphormer_urpe.cli", cmd, "--help"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "usage: graphormer-urpe " + cmd in sub


def test_demo_runs_forward_and_backward(capsys):
    assert cli.main(["demo", "--molecules", "4", "--layers", "1", "--preset", "small"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["molecules"] == 4 and report["prediction_shape"] == [4, 1]


def test_max_nodes_leaves_only_training_graphs_out(table, tmp_path):
    full, capped = tmp_path / "full", tmp_path / "capped"
    common = ("--epochs", "1")
    assert cli.main(train_args(table, tmp_path / "data", full, *common)) == 0
    assert cli.main(train_args(table, tmp_path / "data", capped, *common, "--max-nodes", "6")) == 0
    a = json.loads((full / "metrics.json").read_text())
    b = json.loads((capped / "metrics.json").read_text())
    assert a["dropped_train_oversize"] == 0 and b["max_nodes"] == 6
    assert b["dropped_train_oversize"] > 0
    assert b["train_graphs"] == a["train_graphs"] - b["dropped_train_oversize"]
    assert (b["valid_graphs"], b["test_graphs"]) == (a["valid_graphs"], a["test_graphs"])


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--ensemble", "0"),
        ("--ensemble", "-2"),
        ("--epochs", "0"),
        ("--max-steps", "-1"),
        ("--time-limit", "0"),
        ("--time-limit", "-3"),
        ("--time-limit", "nan"),
    ],
)
def test_counts_and_durations_below_one_are_refused_before_any_work(
    table, tmp_path, monkeypatch, capsys, flag, value
):
    """Refused by the parser, in one line, before any data is read: no runs/ folder."""
    monkeypatch.chdir(tmp_path)
    args = train_args(table, tmp_path / "data", tmp_path / "x")
    args.remove("--out")
    args.remove(str(tmp_path / "x"))
    with pytest.raises(SystemExit) as exc:
        cli.main([*args, flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and ("at least 1" in err or "above 0" in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_refused_ensemble_leaves_no_runs_folder(table, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = train_args(table, tmp_path / "data", tmp_path / "x", "--ensemble", "3")
    for flag in ("--out", "--epochs"):
        i = args.index(flag)
        del args[i : i + 2]
    assert cli.main([*args, "--time-limit", "0.02"]) == 2
    assert not (tmp_path / "runs").exists()


def test_train_ends_with_its_checkpoint_and_the_predict_command_that_uses_it(
    table, tmp_path, monkeypatch, capsys
):
    import shlex

    monkeypatch.chdir(tmp_path)
    args = train_args(table, tmp_path / "data", tmp_path / "x")
    for flag in ("--out", "--epochs"):
        i = args.index(flag)
        del args[i : i + 2]
    assert cli.main([*args, "--epochs", "1"]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    # the default run folder: runs/<file stem>-<preset>-<attention>
    assert "runs/mols-small-urpe/best.pt" in last and (tmp_path / "runs/mols-small-urpe").is_dir()
    command = shlex.split(last.split("predict with: ")[1])
    assert command[:2] == ["graphormer-urpe", "predict"] and str(table) in command
    out = tmp_path / "pred.csv"
    assert cli.main([*command[1:], "--no-progress", "--workers", "0"]) == 0
    with open(out) as fh:
        assert len(list(csv.DictReader(fh))) == len(SMILES) + 1  # every row, the bad one too


def test_the_command_hides_pyg_jit_script_warning_and_the_library_does_not(tmp_path):
    """PyTorch Geometric's import warns that torch.jit.script is deprecated (newer torch):
    the command line hides it, a program importing the library still sees it."""
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}

    def stderr(code: str) -> str:
        cmd = [sys.executable, "-W", "default", "-c", code]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path).stderr

    library = stderr("import graphormer_urpe, graphormer_urpe.cli, torch_geometric")
    if "torch.jit.script" not in library:
        pytest.skip("this torch version does not deprecate torch.jit.script")
    demo = ["demo", "--molecules", "2", "--layers", "1", "--preset", "small"]
    command = stderr(f"from graphormer_urpe import cli; cli.main({demo!r})")
    assert "torch.jit.script" not in command and "Traceback" not in command, command
