"""The commands on a CUDA GPU (``pytest -m cuda``): ``train`` on the GPU then ``evaluate`` on
the CPU, a one-process NCCL ``torchrun`` and ``train --compile``; skipped without a GPU, run
by ``tools/device/device_check.py`` (correctness section)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import train_args

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _cli(args: list[str], cwd: Path, torchrun: bool = False) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"] if torchrun else []
    cmd = (
        [*launcher, "--nproc_per_node=1", "-m", "graphormer_urpe.cli", *args]
        if torchrun
        else [sys.executable, "-m", "graphormer_urpe.cli", *args]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_checkpoint_trained_on_cuda_evaluates_on_the_cpu(table, tmp_path):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe", "--device", "cuda")
    _cli([*args, "--precision", "fp32", "--threads", "1"], tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["device"].startswith("cuda")
    proc = _cli(
        ["evaluate", "--checkpoint", str(out / "best.pt"), "--split", "test", "--device", "cpu"],
        tmp_path,
    )
    result = json.loads(proc.stdout[proc.stdout.index("{") :])
    cpu_mae = result.get("mae", result.get("test_mae"))
    assert cpu_mae == pytest.approx(metrics["test_mae"], rel=1e-4, abs=1e-5)


def test_one_process_nccl_torchrun(table, tmp_path):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe", "--device", "cuda")
    proc = _cli(args, tmp_path, torchrun=True)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["processes"] == 1 and metrics["device"] == "cuda:0"
    assert "distributed run: 1 processes (nccl)" in proc.stderr
    assert {"best.pt", "last.pt", "metrics.json"} <= {p.name for p in out.iterdir()}


def test_train_with_compile_on_cuda(table, tmp_path):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--device", "cuda", "--compile")
    _cli([*args, "--precision", "bf16"], tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "bf16" and metrics["steps"] > 0
    # a CSV regression is selected on RMSE (its baseline: the training mean)
    assert metrics["best_valid_rmse"] < metrics["baseline_valid_rmse"] * 10
