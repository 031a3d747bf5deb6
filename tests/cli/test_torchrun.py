"""Distributed data parallel under ``torchrun``: 2 Gloo processes equal 1 process (the one
process is this one: the command runs in the test's process, which saves a start-up)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphormer_urpe import cli
from tests.helpers import SMILES, train_args

EXTRA = ["CCCCO", "CCCCN", "OCC(O)CO", "c1ccc2ccccc2c1"]  # 44 molecules in all


def _table(path: Path) -> Path:
    """32 training graphs (4 global batches of 8), 5 valid and 7 test: odd eval shards."""
    smiles = SMILES + EXTRA
    splits = ["train"] * 32 + ["valid"] * 5 + ["test"] * 7
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms", "split"])
        for s, sp in zip(smiles, splits, strict=True):
            w.writerow([s, sum(ch.isalpha() and ch not in "lr" for ch in s), sp])
    return path


def _args(table: Path, root: Path, out: Path, batch: int) -> list[str]:
    # later flags override train_args' own (argparse keeps the last value)
    return train_args(
        table,
        root,
        out,
        "--split-column",
        "split",
        "--attention",
        "urpe",
        "--batch-size",
        str(batch),
        "--bucket-size",
        "2",
        # no dropout: the processes draw different masks than one process would
        *("--dropout", "0", "--attention-dropout", "0"),
        *("--input-dropout", "0", "--activation-dropout", "0"),
    )


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_two_gloo_processes_match_one_process(tmp_path, one_thread):
    table = _table(tmp_path / "mols.csv")
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli.main(_args(table, tmp_path / "data", one, 8)) == 0
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    proc = _run(
        [
            *torchrun,
            "--nproc_per_node=2",
            "-m",
            "graphormer_urpe.cli",
            *_args(table, tmp_path / "data", two, 4),
        ],
        tmp_path,
    )
    a = json.loads((one / "metrics.json").read_text())
    b = json.loads((two / "metrics.json").read_text())
    assert (a["processes"], b["processes"]) == (1, 2)
    assert a["global_batch"] == b["global_batch"] == 8
    assert a["steps"] == b["steps"] == 12
    assert (b["valid_graphs"], b["test_graphs"]) == (5, 7)  # every graph scored once
    for key in ("best_valid_rmse", "best_valid_mae", "test_mae", "test_rmse", "baseline_test_rmse"):
        assert b[key] == pytest.approx(a[key], abs=1e-5), key
    assert a["best_epoch"] == b["best_epoch"]
    # the effective batch and learning rate are logged once, by rank 0 only
    assert proc.stderr.count("graphs per step, peak lr") == 1
    assert "batch 4 x 2 process(es) = 8 graphs per step" in proc.stderr
    # rank 0 wrote the run folder; the one-process run wrote the same set of files
    files = {p.name for p in two.iterdir()}
    assert {"metrics.json", "config.json", "history.csv", "last.pt", "best.pt"} <= files
    assert files == {p.name for p in one.iterdir()}


def test_time_limit_stops_every_process_at_the_same_step(tmp_path):
    """Rank 0's clock decides and every process stops after the same step (a disagreement
    would leave one process waiting in a collective until the timeout)."""
    table = _table(tmp_path / "mols.csv")
    out = tmp_path / "two"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    args = [*_args(table, tmp_path / "data", out, 4), "--time-limit", "1e-9"]
    proc = _run([*torchrun, "--nproc_per_node=2", "-m", "graphormer_urpe.cli", *args], tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["stopped_on_time"] is True
    assert metrics["steps"] == 1 and metrics["steps_planned"] == 12
    assert "test_mae" in metrics and (out / "best.pt").exists()
    assert proc.stderr.count("time limit of 1e-09 min reached after step 1") == 1
