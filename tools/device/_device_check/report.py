"""The device report: its schema, its validation, and the files packed beside it."""

from __future__ import annotations

import json
import platform
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runner import Check

REPORT_NAME = "device_report.json"
SCHEMA = "graphormer-urpe-device-report/1"
SECTIONS = ("environment", "correctness", "speed", "fidelity", "compiled")
DEFAULT_SECTIONS = SECTIONS[:4]  # "compiled" is opt in: its compilation alone takes minutes
STATUSES = ("ok", "failed", "timeout", "skipped")


def validate_report(report: Any) -> list[str]:
    """Problems with a ``device_report.json`` document (empty when it is valid).

    The document is an object with ``schema`` (:data:`SCHEMA`), ``smoke`` (bool), ``budget_s``
    and ``seconds`` (numbers), ``device`` (string), ``files`` (list of file names) and
    ``sections``: one object per name in :data:`SECTIONS`, each with ``status`` (one of
    :data:`STATUSES`), ``seconds`` and ``budget_s`` (numbers), ``error`` (string or null,
    a string whenever the status is ``failed`` or ``timeout``) and ``results`` (object).
    """
    problems: list[str] = []
    if not isinstance(report, dict):
        return [f"the report is a {type(report).__name__}, not an object"]

    def need(obj: dict, key: str, types: tuple, where: str) -> Any:
        if key not in obj:
            problems.append(f"{where}: missing {key!r}")
            return None
        value = obj[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            problems.append(f"{where}.{key}: {type(value).__name__} is not {types}")
        return value

    if report.get("schema") != SCHEMA:
        problems.append(f"schema is {report.get('schema')!r}, expected {SCHEMA!r}")
    need(report, "smoke", (bool,), "report")
    need(report, "budget_s", (int, float), "report")
    need(report, "seconds", (int, float), "report")
    need(report, "device", (str,), "report")
    files = need(report, "files", (list,), "report")
    if isinstance(files, list) and not all(isinstance(f, str) for f in files):
        problems.append("report.files: every entry must be a file name")
    sections = need(report, "sections", (dict,), "report")
    if not isinstance(sections, dict):
        return problems
    for name in SECTIONS:
        sec = sections.get(name)
        where = f"sections.{name}"
        if not isinstance(sec, dict):
            problems.append(f"{where}: missing or not an object")
            continue
        status = need(sec, "status", (str,), where)
        if isinstance(status, str) and status not in STATUSES:
            problems.append(f"{where}.status: {status!r} is not one of {STATUSES}")
        need(sec, "seconds", (int, float), where)
        need(sec, "budget_s", (int, float), where)
        need(sec, "results", (dict,), where)
        if "error" not in sec:
            problems.append(f"{where}: missing 'error'")
        elif sec["error"] is not None and not isinstance(sec["error"], str):
            problems.append(f"{where}.error: must be a string or null")
        elif status in ("failed", "timeout") and not sec["error"]:
            problems.append(f"{where}: status {status} needs an error text")
    extra = set(sections) - set(SECTIONS)
    if extra:
        problems.append(f"sections: unknown section(s) {sorted(extra)}")
    return problems


def skipped(reason: str) -> dict:
    """The entry of a section that did not run, with the reason."""
    return {"status": "skipped", "error": reason, "seconds": 0.0, "budget_s": 0.0, "results": {}}


def pack(check: Check) -> list[str]:
    """``logs.tar.gz``: logs, benchmark JSON and the runs' small files."""
    tar_path = check.out / "logs.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(check.logs, arcname="logs")
        runs = check.work / "runs"
        if runs.exists():
            for f in sorted(runs.rglob("*")):
                if f.is_file() and f.suffix in (".csv", ".json", ".png"):
                    tar.add(f, arcname=str(Path("runs") / f.relative_to(runs)))
    return [tar_path.name]


def write_report(check: Check, smoke: bool) -> Path:
    """Pack the files and write ``device_report.json`` (with ``schema_problems`` if the
    document breaks its own schema: a bug in the check); returns its path."""
    files = pack(check) + [f.name for f in check.keep_files]
    report = {
        "schema": SCHEMA,
        "smoke": bool(smoke),
        "budget_s": check.total,
        "seconds": round(time.monotonic() - check.start, 1),
        "device": check.env.get("gpu") or f"cpu ({platform.machine()})",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": [REPORT_NAME, *files],
        "sections": check.sections,
    }
    problems = validate_report(report)
    if problems:  # a bug in this script: say so in the report itself
        report["schema_problems"] = problems
    path = check.out / REPORT_NAME
    path.write_text(json.dumps(report, indent=2))
    return path
