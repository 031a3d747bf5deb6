"""A pytest plugin for the ``correctness`` section: each failure's report, as it happens.

pytest prints tracebacks only in its summary at the end, which a section stopped at its budget
never reaches. Loaded with ``-p _device_check.failures`` (``scripts/`` on ``PYTHONPATH``), this
appends every failed test's report to the file named by ``DEVICE_CHECK_FAILURES`` as soon as
the test fails (in each pytest-xdist worker too).
"""

from __future__ import annotations

import os

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append a failed setup, call or teardown's report to the failures file."""
    path = os.environ.get("DEVICE_CHECK_FAILURES")
    if path and report.failed:
        with open(path, "a") as fh:
            fh.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
