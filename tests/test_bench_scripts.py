"""The benchmark scripts run in smoke mode and print valid JSON (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.parametrize("name", ["bench_preprocess", "bench_collate", "bench_train"])
def test_benchmark_smoke_mode_emits_json(name):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / f"{name}.py"), "--smoke", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["benchmark"] == name.removeprefix("bench_")
    rates = [v["graphs_per_s"] for v in report["results"].values() if isinstance(v, dict)]
    assert rates and all(r > 0 for r in rates)
