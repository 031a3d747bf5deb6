"""The runner of the check: sections against one wall-clock budget, subprocesses with logs."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[3]  # the repository: tools/device/_device_check/ is below
SCRIPTS = ROOT / "scripts"  # the benchmarks the speed section runs

# Seconds per section on a GPU; fidelity and compiled get whatever is left of --budget.
# On an H200, correctness needed 118-130 s with 4 test processes and the eager speed runs
# 136 s; compiling one zinc-slim model took 103-112 s, hence a section of its own. The
# captured and fused modes and their tests (Triton compilations) add to both: on an H200 on
# 2026-11-29 the speed section took 208 s, and 46 of the 51 CUDA tests ran in 200 s. A device
# command runs at most 10 minutes: the fidelity section's real run is a call of its own
# (--sections fidelity --budget 540); in the default run it gets what is left.
GPU_BUDGETS = {"environment": 15, "correctness": 260, "speed": 250}
# The smoke check is bounded by its sizes (a few molecules, a 1-layer model, 2-3 steps per
# run), not by seconds: a busy machine makes it slower, not a failure. Its total is a guard
# against a hung subprocess only; --budget gives it real deadlines.
SMOKE_BUDGETS: dict[str, float] = {}
GPU_TOTAL, SMOKE_TOTAL = 560, 1800
PACK_RESERVE = 8  # seconds kept for writing the report and packing the files

CLI = [sys.executable, "-m", "graphormer_urpe.cli"]  # the command line, in this interpreter
SMOKE_MODEL = ["--num-layers", "1", "--hidden-dim", "16", "--ffn-dim", "16", "--num-heads", "2"]


def run_flags(dev: str, prec: str, workers: int | str, out: Path) -> list[str]:
    """The ``graphormer-urpe train`` flags every run of the check ends with: device,
    precision, loader workers, one checkpoint kept, its output folder, no progress bars."""
    return [
        "--device",
        dev,
        "--precision",
        prec,
        "--num-workers",
        str(workers),
        "--keep-checkpoints",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]


class SectionTimeout(Exception):
    """A section ran out of its budget."""


class Check:
    """Runs the sections against a shared wall-clock budget and records their results."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.smoke = args.smoke
        self.start = time.monotonic()
        self.total = args.budget or (SMOKE_TOTAL if self.smoke else GPU_TOTAL)
        self.budgets = dict(SMOKE_BUDGETS if self.smoke else GPU_BUDGETS)
        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp())
        # every dataset store of the check, in its own work folder (subprocesses inherit it)
        os.environ["GRAPHORMER_URPE_STORE"] = str(self.work / "stores")
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        self.sections: dict[str, dict[str, Any]] = {}
        self.deadline = self.start + self.total - PACK_RESERVE
        self.section_deadline = self.deadline
        self.env: dict[str, Any] = {}
        self.background: dict[str, subprocess.Popen] = {}
        self.keep_files: list[Path] = []

    # -- time ----------------------------------------------------------------------------

    def remaining(self) -> float:
        """Seconds left in the current section."""
        return self.section_deadline - time.monotonic()

    def run_section(self, name: str, fn: Callable[[dict], None]) -> None:
        now = time.monotonic()
        budget = self.budgets.get(name, self.deadline - now)
        self.section_deadline = min(now + budget, self.deadline)
        results: dict[str, Any] = {}
        entry: dict[str, Any] = {
            "status": "ok",
            "error": None,
            "budget_s": round(self.section_deadline - now, 1),
            "results": results,
        }
        print(f"[device_check] {name}: budget {entry['budget_s']:.0f} s", file=sys.stderr)
        try:
            if self.section_deadline - now < 1:
                raise SectionTimeout("no time left for this section")
            fn(results)
        except SectionTimeout as exc:
            entry["status"], entry["error"] = "timeout", str(exc)
        except SkipSection as exc:
            entry["status"], entry["error"] = "skipped", str(exc)
        except Exception as exc:  # record and go on with the next section
            entry["status"] = "failed"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            (self.logs / f"{name}_traceback.txt").write_text(traceback.format_exc())
        entry["seconds"] = round(time.monotonic() - now, 1)
        self.sections[name] = entry
        print(
            f"[device_check] {name}: {entry['status']} in {entry['seconds']} s"
            + (f" ({entry['error']})" if entry["error"] else ""),
            file=sys.stderr,
        )

    # -- subprocesses --------------------------------------------------------------------

    def env_vars(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env.setdefault("OMP_NUM_THREADS", "1" if self.smoke else "4")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(
        self,
        name: str,
        cmd: list[str],
        timeout: float | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` with its output in ``logs/<name>.log``; at most the section's time;
        ``env``: variables set on top of :meth:`env_vars`."""
        limit = self.remaining() if timeout is None else min(timeout, self.remaining())
        if limit < 1:
            raise SectionTimeout(f"{name}: no time left")
        log = self.logs / f"{name}.log"
        with open(log, "w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=fh,
                text=True,
                cwd=cwd or ROOT,
                env={**self.env_vars(), **(env or {})},
                start_new_session=True,
            )
            try:
                out, _ = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                kill(proc)
                out, _ = proc.communicate()
                fh.write(out or "")
                raise SectionTimeout(f"{name}: stopped after {limit:.0f} s") from None
            fh.write(out or "")
        result = subprocess.CompletedProcess(cmd, proc.returncode, out, "")
        if proc.returncode != 0:
            last = tail(log)
            raise RuntimeError(f"{name} exited with {proc.returncode}: {last}")
        return result

    def launch(self, name: str, cmd: list[str]) -> tuple[subprocess.Popen, IO[str]]:
        """Start ``cmd`` in its own process group, its output in ``logs/NAME.log`` (returned
        open; the caller closes it when the process has ended)."""
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - the caller closes it
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=self.env_vars(),
            start_new_session=True,
        )
        return proc, log

    def start_background(self, name: str, cmd: list[str]) -> None:
        self.background[name] = self.launch(name, cmd)[0]

    def wait_background(self, name: str) -> None:
        proc = self.background[name]
        try:
            rc = proc.wait(timeout=max(1.0, self.remaining()))
        except subprocess.TimeoutExpired:
            kill(proc)
            raise SectionTimeout(f"preparing {name} did not finish in time") from None
        if rc != 0:
            raise RuntimeError(
                f"preparing {name} failed ({rc}): {tail(self.logs / (name + '.log'))}"
            )

    def stop_background(self) -> None:
        for proc in self.background.values():
            if proc.poll() is None:
                kill(proc)


class SkipSection(Exception):
    """The section cannot run here (e.g. no data); recorded as ``skipped``."""


def kill(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def tail(path: Path, lines: int = 6) -> str:
    """The last ``lines`` lines of a log, on one line (empty when it cannot be read)."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-1500:]
