"""The ``correctness`` section: ``pytest -m cuda`` (the tests skip on the CPU, check on CUDA)."""

from __future__ import annotations

import importlib.util
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .failures import read_failures
from .runner import Check, SectionTimeout

FIRST_TESTS = (  # failed on 2026-11-29 with no traceback: `graphormer-urpe train` on a CSV table
    "test_cuda_train_command_captures_its_steps",
    "test_checkpoint_trained_on_cuda_evaluates_on_the_cpu",
    "test_cuda_a_failing_kernel_leaves_the_run_of_eager_steps",
)
"""Tests run before the others (so that the budget cannot stop the section before them)."""
TRACEBACK_CHARS = 6000
"""Characters of each failure's report kept in ``device_report.json`` (all of it in the logs)."""

CUDA_TEST_PROCESSES = 4  # pytest-xdist workers sharing the GPU, where xdist is installed
CUDA_TEST_FILES = (  # the files holding tests marked cuda
    "tests/runtime/test_cuda.py",
    "tests/cli/test_cuda_commands.py",
    "tests/runtime/test_capture.py",
    "tests/attention/test_fused_attention.py",
    "tests/attention/test_attention_kernel.py",
    "tests/runtime/test_fast_path_fallback.py",
    "tests/runtime/test_token_budget.py",
)


def section_correctness(check: Check, res: dict) -> None:
    """``pytest -m cuda`` over the files holding CUDA tests: counts, each case's outcome and
    each failure's report (``failure_reports``, also printed as soon as the tests end)."""
    try:
        _pytest(check, res)
    finally:
        failures = read_failures(check.logs / "correctness_failures.txt")
        if failures:
            res["failure_reports"] = {k: v[-TRACEBACK_CHARS:] for k, v in failures.items()}
            print_failures(res["failure_reports"])


def print_failures(failures: dict[str, str], chars: int = TRACEBACK_CHARS) -> None:
    """Each failure's report (its last ``chars`` characters) on stderr."""
    for name, text in failures.items():
        print(f"[device_check] FAILED {name}\n{text[-chars:]}\n", file=sys.stderr)


def _pytest(check: Check, res: dict) -> None:
    junit = check.logs / "correctness_junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        # the project's addopts name pytest-markdown-docs, which a GPU machine may lack
        "-o",
        "addopts=",
        "-m",
        "cuda",
        "-p",
        "no:cacheprovider",
        "-p",
        "_device_check.failures",  # tracebacks as they happen: a stopped run keeps them
        "-rs",
        "-v",
        "--durations=0",
        f"--junitxml={junit}",
        *CUDA_TEST_FILES,
    ]
    if importlib.util.find_spec("xdist") is not None:  # compiling dominates: use the CPU cores
        cmd[-1:-1] = ["-n", str(CUDA_TEST_PROCESSES)]
    try:
        check.run("correctness_pytest", cmd, env=_failures_env(check))
    except RuntimeError as exc:
        res.update(_junit_summary(junit))
        raise RuntimeError(f"{res.get('failed', '?')} cuda test(s) failed: {exc}") from None
    except SectionTimeout:
        res.update(_verbose_summary(check.logs / "correctness_pytest.log"))  # no JUnit file
        raise
    res.update(_junit_summary(junit))
    if res.get("tests", 0) == 0:
        raise RuntimeError("pytest -m cuda collected no tests")


def _failures_env(check: Check) -> dict[str, str]:
    """``tools/device/`` on ``PYTHONPATH`` for the plugin, and the file it appends failures to."""
    tools = str(Path(__file__).resolve().parents[1])
    path = check.env_vars().get("PYTHONPATH", "")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (path, tools) if p),
        "DEVICE_CHECK_FAILURES": str(check.logs / "correctness_failures.txt"),
        "DEVICE_CHECK_FIRST": ",".join(FIRST_TESTS),
    }


def _verbose_summary(log: Path) -> dict[str, Any]:
    """The outcomes ``pytest -v`` printed before it was stopped."""
    cases: dict[str, str] = {}
    for line in log.read_text(errors="replace").splitlines():
        for outcome in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
            if "::" in line and f" {outcome}" in line:  # "[gw0] [ 3%] PASSED a.py::t" too
                test = next(t for t in line.split() if "::" in t)
                cases[test.split("::", 1)[1]] = outcome.lower()
    counts = {o: sum(v == o for v in cases.values()) for o in ("passed", "failed", "skipped")}
    return {"tests_before_stop": len(cases), **counts, "cases": cases}


def _junit_summary(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    out: dict[str, Any] = {
        k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")
    }
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    out["failed"] = out["failures"] + out["errors"]
    cases: dict[str, str] = {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = tag if tag != "skipped" else "skipped"
                if tag != "skipped":
                    status += ": " + (el.get("message") or "")[:300]
        cases[name] = status
    out["cases"] = cases
    return out
