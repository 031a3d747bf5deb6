"""Calibrated intervals on MoleculeNet: test coverage and mean width of the split-conformal
intervals that ``train`` keeps, on seeded scaffold splits.

Each set (``--sets``, default the regression sets ESOL, FreeSolv, Lipophilicity) is split
80/10/10 by scaffold with seeds 0, 1, 2 into the same split files as
``scripts/bench_small_data.py`` (its :func:`write_splits`, under ``--work``). Each split gets
one ``graphormer-urpe train`` (``--threads 1``, ``--time-limit`` ``--minutes``, from
``--init-from`` when given), whose calibrator is fitted on the valid split; the test coverage
and mean width at 0.8, 0.9 and 0.95 come from its ``metrics.json`` (binary sets: the test ECE
before and after temperature scaling). With ``--ensemble K`` the runs are K-member ensembles,
whose intervals are normalised by the members' spread. Finished runs are kept and skipped,
so an interrupted benchmark resumes. Run::

    python scripts/bench_calibration.py --minutes 1 --parallel 2 \\
        --out docs/results/calibration.json --markdown docs/results/calibration.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_small_data import SETS, SHARED, WORK, _call, write_splits

LEVELS = ("80", "90", "95")
TARGET = (0.85, 0.95)
"""The range the 90% interval's test coverage should lie in on every set and seed."""


def run(a: argparse.Namespace, name: str, seed: int) -> dict:
    """One (set, seed) run; its calibration figures (kept in ``result.json``)."""
    split = write_splits(name, seed, a.data_dir, a.work, None)
    tag = "calibration" + (f"-ens{a.ensemble}" if a.ensemble > 1 else "")
    out = a.work / name / f"seed{seed}" / tag
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    task = SETS[name]
    files = ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{files}"]
    cmd += ["--target-columns", *task.targets, "--seed", str(seed), "--threads", "1"]
    cmd += ["--time-limit", f"{a.minutes:g}", "--out", str(out / "run"), "--no-progress"]
    cmd += ["--cache-dir", str(out / "cache")]
    if task.classification:
        cmd += ["--task", "classification"]
    if a.init_from:
        cmd += ["--init-from", a.init_from]
    if a.ensemble > 1:
        cmd += ["--ensemble", str(a.ensemble)]
    start = time.perf_counter()
    _call(cmd, out / "train.log")
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    keys = [k for k in metrics if k.startswith(("test_coverage_", "test_width_", "test_ece"))]
    result = {
        "set": name,
        "seed": seed,
        "seconds": round(time.perf_counter() - start, 1),
        "test_graphs": metrics.get("test_graphs"),
        "valid_graphs": json.loads((split / "split.json").read_text())["sizes"]["valid"],
        **{k.removeprefix("test_"): metrics[k] for k in keys},
        "test_rmse": metrics.get("test_rmse"),
    }
    done.write_text(json.dumps(result, indent=1))
    return result


def summary(results: list[dict]) -> dict:
    """Per set: the mean and the range over seeds of each figure."""
    out: dict = {}
    for name in dict.fromkeys(r["set"] for r in results):
        rows = [r for r in results if r["set"] == name]
        keys = [k for k in rows[0] if k.startswith(("coverage_", "width_", "ece", "test_rmse"))]
        out[name] = {"seeds": [r["seed"] for r in rows]}
        for k in keys:
            values = [r[k] for r in rows if r.get(k) is not None]
            if values:
                out[name][k] = {
                    "mean": statistics.fmean(values),
                    "min": min(values),
                    "max": max(values),
                }
        cov = out[name].get("coverage_90")
        if cov is not None:
            out[name]["coverage_90_in_target"] = all(
                TARGET[0] <= r["coverage_90"] <= TARGET[1] for r in rows
            )
    return out


def markdown(report: dict) -> str:
    """The report as a Markdown table."""
    lines = [
        "| set | seeds | test RMSE | coverage 80% | coverage 90% | coverage 95% | width 90% |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in report["summary"].items():
        if "coverage_90" not in s:
            continue

        def cell(k: str, s: dict = s) -> str:
            v = s[k]
            return f"{v['mean']:.3f} ({v['min']:.3f}–{v['max']:.3f})"

        row = [name, str(len(s["seeds"])), cell("test_rmse")]
        row += [cell(f"coverage_{lv}") for lv in LEVELS] + [cell("width_90")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=["esol", "freesolv", "lipophilicity"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=1.0, help="time limit of each run")
    p.add_argument("--init-from", default=None, help="train's --init-from (default: scratch)")
    p.add_argument("--ensemble", type=int, default=1, help="members per run (default 1)")
    p.add_argument("--parallel", type=int, default=1, help="runs at once (each one thread)")
    p.add_argument("--data-dir", type=Path, default=SHARED)
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--out", type=Path, default=None, help="JSON report")
    p.add_argument("--markdown", type=Path, default=None, help="Markdown table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    jobs = [(name, seed) for name in a.sets for seed in a.seeds]
    with ThreadPoolExecutor(a.parallel) as pool:
        results = list(pool.map(lambda job: run(a, *job), jobs))
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": "2 CPU cores, one thread per run",
        "runs": {"minutes": a.minutes, "init_from": a.init_from, "ensemble": a.ensemble},
        "split": "balanced scaffold 80/10/10; calibrator fitted on the valid split",
        "target_coverage_90": list(TARGET),
        "summary": summary(results),
        "results": results,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    if a.markdown:
        a.markdown.write_text(markdown(report))


if __name__ == "__main__":
    main()
