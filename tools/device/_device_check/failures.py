"""A pytest plugin for the ``correctness`` section: each failure's report, as it happens.

pytest prints tracebacks only in its summary at the end, which a section stopped at its budget
never reaches. Loaded with ``-p _device_check.failures`` (``tools/device/`` on ``PYTHONPATH``),
this appends every failed test's report (its traceback, then the output and log records it
captured) to the file named by ``DEVICE_CHECK_FAILURES`` as soon as the test fails (in each
pytest-xdist worker too), and runs first the tests named in ``DEVICE_CHECK_FIRST``
(comma-separated test function names): those that failed last time, so that the budget cannot
stop the run before them. :func:`read_failures` reads the file back.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

SECTION_CHARS = 3000
"""Characters kept from the end of each output a failed test captured (stdout, log, ...)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests named in ``DEVICE_CHECK_FIRST`` first, in their collection order."""
    first = {n for n in os.environ.get("DEVICE_CHECK_FIRST", "").split(",") if n}
    if first:
        items.sort(key=lambda item: getattr(item, "originalname", item.name) not in first)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append a failed setup, call or teardown's report to the failures file."""
    path = os.environ.get("DEVICE_CHECK_FAILURES")
    if path and report.failed:
        captured = "".join(
            f"--- {title}\n{text[-SECTION_CHARS:]}\n" for title, text in report.sections
        )
        with open(path, "a") as fh:
            fh.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n{captured}\n")


def read_failures(path: Path) -> dict[str, str]:
    """The failures file as ``{"nodeid (when)": report}``, in the order they happened."""
    if not path.exists():
        return {}
    parts = re.split(r"^=== (.+)$", path.read_text(errors="replace"), flags=re.MULTILINE)
    return {head: body.strip() for head, body in zip(parts[1::2], parts[2::2], strict=True)}
