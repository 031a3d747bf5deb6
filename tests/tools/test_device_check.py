"""tools/device/device_check.py: the whole check end to end on the CPU (--smoke), its report's
schema, and the correctness section's plugin that writes failures as they happen.

``tools/device/`` is on pytest's ``pythonpath`` (pyproject.toml): the check and its parts are
imported by name, as the check imports them when run as a file."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "device"


def _load(name: str):
    """``tools/device/<name>.py``, imported by name."""
    return importlib.import_module(name)


def _valid_report(dc) -> dict:
    section = {"status": "ok", "error": None, "seconds": 1.0, "budget_s": 2.0, "results": {}}
    return {
        "schema": dc.SCHEMA,
        "smoke": True,
        "budget_s": 115,
        "seconds": 3.5,
        "device": "cpu",
        "files": ["device_report.json"],
        "sections": {name: dict(section) for name in dc.SECTIONS},
    }


def test_report_validation_rejects_what_is_wrong():
    dc = _load("device_check")
    assert dc.validate_report(_valid_report(dc)) == []
    bad = _valid_report(dc)
    del bad["sections"]["speed"]
    assert any("speed" in p for p in dc.validate_report(bad))
    bad = _valid_report(dc)
    bad["sections"]["fidelity"]["status"] = "failed"  # a failure needs its error text
    assert any("error text" in p for p in dc.validate_report(bad))
    bad = _valid_report(dc)
    bad["sections"]["correctness"]["status"] = "fine"
    assert any("status" in p for p in dc.validate_report(bad))
    bad = _valid_report(dc)
    bad["sections"]["environment"]["seconds"] = "1"
    assert any("seconds" in p for p in dc.validate_report(bad))
    bad = _valid_report(dc)
    bad["schema"] = "other/1"
    assert any("schema" in p for p in dc.validate_report(bad))
    assert dc.validate_report([]) != []


def test_smoke_runs_every_section_and_writes_a_valid_report(tmp_path, monkeypatch, capsys):
    """The check's own process is this one (its sections' commands are processes of their
    own, as on a GPU): a process of its own would import torch and Transformers once more."""
    dc = _load("device_check")
    data = ROOT.parent / "shared" / "data"
    if not (data / "zinc" / "train.csv").exists():
        pytest.skip(f"the molecules the check reads are not available at {data}")
    out, work = tmp_path / "out", tmp_path / "work"
    # (the check points GRAPHORMER_URPE_STORE at its work folder: store_dir puts it back)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code = dc.main(["--smoke", "--out", str(out), "--work", str(work), "--data", str(data)])
    err = capsys.readouterr().err
    report = json.loads((out / "device_report.json").read_text())
    assert dc.validate_report(report) == [], report
    statuses = {k: v["status"] for k, v in report["sections"].items()}
    expected = {**dict.fromkeys(dc.DEFAULT_SECTIONS, "ok"), "compiled": "skipped"}
    assert statuses == expected, (statuses, err[-3000:])
    assert code == 0
    # at most 8 files come back, all named in the report
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and sorted(report["files"]) == files
    assert {"logs.tar.gz", "fidelity_curves.png"} <= set(files)
    fid = report["sections"]["fidelity"]["results"]
    assert len(fid["runs"]) == 4
    assert {r["steps"] for r in fid["runs"].values()} == {fid["schedule"]["steps"]}
    diff = fid["comparison"]["urpe_minus_graphormer"]
    assert diff == pytest.approx(
        fid["comparison"]["urpe_mean"] - fid["comparison"]["graphormer_mean"]
    )
    speed = report["sections"]["speed"]["results"]
    bench = speed["zinc-slim_train_steps"]["config"]
    assert bench["source"] == "pcqm_smiles.csv" and bench["molecules"] == 16  # PCQM4Mv2's
    assert bench["modes"] == ["eager", "captured"]  # (fused: Triton's interpreter is too slow)
    row = speed["summary"]["zinc-slim_train_steps"]
    assert row["graphormer_captured_over_eager"] > 0 and row["urpe_best_over_graphormer_best"] > 0
    e2e = report["sections"]["speed"]["results"]["pcqm4mv2_end_to_end"]
    assert e2e["graphs_per_second"] > 0 and e2e["train_graphs_in_cache"] == 2 * 1500
    assert report["sections"]["correctness"]["results"]["tests"] > 0


def test_the_smoke_check_is_bounded_by_sizes_not_seconds(tmp_path, monkeypatch):
    """On a busy machine the smoke check runs slower, never out of time: its sections have
    no deadlines of their own and its fidelity runs no --time-limit (only --budget sets
    deadlines); the total is a guard against a hung subprocess."""
    import argparse

    dc = _load("device_check")
    fidelity = _load_fidelity()
    args = argparse.Namespace(smoke=True, budget=None, out=str(tmp_path / "o"), work=None)
    check = dc.Check(args)
    assert check.budgets == {} and check.total >= 10 * 60
    seen: list = []

    class Stop(Exception):
        pass

    def run_four(check, tag, steps, dev, prec, limit, time_limit_s=None):
        seen.append((steps, time_limit_s))
        raise Stop

    monkeypatch.setattr(fidelity, "_run_four", run_four)
    monkeypatch.setattr(fidelity, "_train_rows", lambda check: 160)
    monkeypatch.setattr(check, "wait_background", lambda name: None)
    with pytest.raises(Stop):
        fidelity.section_fidelity(check, {})
    assert seen == [(3, None)]  # 3 steps, no --time-limit
    timed = argparse.Namespace(smoke=True, budget=50.0, out=str(tmp_path / "o"), work=None)
    assert dc.Check(timed).total == 50.0


def _load_fidelity():
    return _check_module("fidelity")


def test_failures_are_written_as_they_happen(tmp_path):
    """The correctness section's plugin: a failed test's traceback, then what it printed and
    logged, is in the file before pytest's run ends (a run stopped at the section's budget
    prints no summary); the tests named in DEVICE_CHECK_FIRST run first."""
    (tmp_path / "test_two.py").write_text(
        "import logging, os\n"
        "def test_early():\n    pass\n"
        "def test_fails():\n"
        "    print('printed before')\n"
        "    logging.getLogger('x').warning('logged before')\n"
        "    assert 1 + 1 == 3, 'arithmetic'\n"
        "def test_later():\n"
        "    path = os.environ['DEVICE_CHECK_FAILURES']\n"
        "    assert 'arithmetic' in open(path).read()\n"
    )
    report = tmp_path / "failures.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TOOLS), os.environ.get("PYTHONPATH", "")]),
        "DEVICE_CHECK_FAILURES": str(report),
        "DEVICE_CHECK_FIRST": "test_fails",
    }
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "_device_check.failures"]
    cmd += ["-p", "no:cacheprovider", "-v", "test_two.py"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "1 failed, 2 passed" in proc.stdout, proc.stdout[-2000:]  # test_later saw it
    out = proc.stdout
    assert out.index("test_two.py::test_fails") < out.index("test_two.py::test_early")
    failures = _check_module("failures").read_failures(report)
    assert list(failures) == ["test_two.py::test_fails (call)"]
    text = failures["test_two.py::test_fails (call)"]
    traceback, printed = (
        text.index("AssertionError: arithmetic"),
        text.index("stdout call\nprinted"),
    )
    assert traceback < printed < text.index("log call\nWARNING  x:test_two.py:6 logged before")


def _check_module(name: str):
    """``tools/device/_device_check/<name>.py``, imported."""
    return importlib.import_module(f"_device_check.{name}")
