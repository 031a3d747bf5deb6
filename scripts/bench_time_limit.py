"""Whether ``--time-limit`` holds: wall time of whole ``train`` commands against their budget.

Runs ``graphormer-urpe train --time-limit M`` and ``train --ensemble K --time-limit M`` as
fresh processes on a user's CSV (ESOL from the development data when present, else RDKit's
embedded NCI molecules), each once on an otherwise idle machine and once with a competing
CPU-bound process started halfway through the budget (a busy loop, one core), after a first
single run that builds the dataset's store inside its budget (``single_cold_store``), and reports
each command's wall time over its budget (the target: at most 1.02), with what its
``metrics.json`` says (steps, epochs, whether it stopped on time, whether it was short, the
pace it saw). A refused ensemble (budget too short for its members) is reported as such.
Prints JSON. Run::

    python scripts/bench_time_limit.py                      # 3 min single, 3 min ensemble of 3
    python scripts/bench_time_limit.py --minutes 2 --ensemble-minutes 4 --members 3
    python scripts/bench_time_limit.py --smoke
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import report

ROOT = Path(__file__).resolve().parents[1]
ESOL = ROOT.parent / "shared" / "data" / "moleculenet" / "esol.csv"
CLI = [sys.executable, "-m", "graphormer_urpe.cli", "train"]
BUSY = [sys.executable, "-c", "while True:\n    pass"]


def dataset_flags(work: Path) -> tuple[list[str], str]:
    """The data of every run: ESOL (a copy) when the development data is there, else the
    embedded default."""
    if ESOL.exists():
        copy = work / "esol.csv"
        copy.write_text(ESOL.read_text())
        return ["--dataset", f"csv:{copy}", "--target-columns", "log_solubility"], "esol"
    return [], "nci5k"


def run(cmd: list[str], minutes: float, load: bool, out: Path) -> dict:
    """One command's wall time against ``minutes``, with a busy loop from half-way if
    ``load``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    busy = None
    if load:
        try:
            proc.wait(timeout=30 * minutes)
        except subprocess.TimeoutExpired:
            busy = subprocess.Popen(BUSY)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    if busy is not None:
        busy.kill()
        busy.wait()
    entry: dict = {
        "wall_seconds": round(wall, 2),
        "budget_seconds": 60 * minutes,
        "wall_over_budget": round(wall / (60 * minutes), 4),
        "competing_process_from_s": 30 * minutes if load else None,
        "returncode": proc.returncode,
    }
    if proc.returncode != 0:
        entry["error"] = stderr.strip().splitlines()[-1][-600:] if stderr.strip() else ""
        return entry
    metrics = json.loads((out / "metrics.json").read_text())
    keys = ("steps", "steps_planned", "epochs_trained", "short_run", "stopped_on_time", "pace")
    if "members" in metrics:  # an ensemble
        entry["members"] = metrics["members"]
        return entry
    entry.update({k: metrics.get(k) for k in keys})
    return entry


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=3.0, help="single run's --time-limit")
    p.add_argument("--ensemble-minutes", type=float, default=3.0, help="the ensemble's")
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="--threads of the runs")
    p.add_argument("--smoke", action="store_true", help="short budgets, no competing process")
    a = p.parse_args()
    if a.smoke:
        a.minutes = a.ensemble_minutes = 0.25
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data, source = dataset_flags(work)
        threads = ["--threads", str(a.threads)] if a.threads else []
        extra = ["--no-progress", "--store-dir", str(work / "cache"), *threads]
        if not a.smoke:  # a first call: the store is built inside the budget
            cold = [*CLI, *data, "--no-progress", "--store-dir", str(work / "cold-cache")]
            cold += [*threads, "--out", str(work / "single-cold"), "--time-limit", str(a.minutes)]
            results["single_cold_store"] = run(cold, a.minutes, False, work / "single-cold")
        # the store is built once beforehand, as a user's second call finds it
        subprocess.run([*CLI, *data, *extra, "--out", str(work / "warm"), "--max-steps", "1"],
                       check=True, capture_output=True)  # fmt: skip
        loads = [False] if a.smoke else [False, True]
        for load in loads:
            tag = "loaded" if load else "idle"
            out = work / f"single-{tag}"
            cmd = [*CLI, *data, *extra, "--out", str(out), "--time-limit", str(a.minutes)]
            results[f"single_{tag}"] = run(cmd, a.minutes, load, out)
            out = work / f"ensemble-{tag}"
            cmd = [*CLI, *data, *extra, "--out", str(out), "--ensemble", str(a.members)]
            cmd += ["--time-limit", str(a.ensemble_minutes)]
            results[f"ensemble_{tag}"] = run(cmd, a.ensemble_minutes, load, out)
    config = {
        "source": source,
        "single_minutes": a.minutes,
        "ensemble_minutes": a.ensemble_minutes,
        "members": a.members,
        "threads": a.threads,
        "note": "wall time of the whole command (imports, data, training, test) over its "
        "--time-limit; 'loaded': a busy-loop process competes for a core from half-way",
    }
    report("time_limit", config, results)


if __name__ == "__main__":
    main()
