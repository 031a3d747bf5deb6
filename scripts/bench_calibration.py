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
so an interrupted benchmark resumes.

With ``--chemprop EXE`` (Chemprop 2.x, e.g. ``ENV/bin/chemprop`` in a virtual environment made
for the benchmark), each split also gets Chemprop's own calibrated intervals, first: ``chemprop
train`` with its defaults, then ``chemprop predict --cal-path valid.csv --uncertainty-method
dropout --calibration-method conformal-regression --conformal-alpha A`` for each level (its
conformal calibrator on Monte Carlo dropout half-widths; with ``--uncertainty-method none``
Chemprop 2.3.1 stops with a ``TypeError``). Ours then gets Chemprop's wall time on that split
as its ``--time-limit``, as in ``scripts/bench_small_data.py``. Run::

    python scripts/bench_calibration.py --minutes 1 --parallel 2 \\
        --out docs/results/calibration.json --markdown docs/results/calibration.md
    python scripts/bench_calibration.py --chemprop ENV/bin/chemprop --init-from pretrained \\
        --mol-features rdkit2d --parallel 2 --out docs/results/calibration_chemprop.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from bench_small_data import SETS, SHARED, WORK, _call, write_splits

LEVELS = ("80", "90", "95")
TARGET = (0.85, 0.95)
"""The range the 90% interval's test coverage should lie in on every set and seed."""


def run_chemprop(a: argparse.Namespace, name: str, seed: int) -> dict:
    """Chemprop's defaults and its conformal intervals on one split (kept in ``result.json``)."""
    split = write_splits(name, seed, a.data_dir, a.work, None)
    out = split / "calibration-chemprop"
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    targets = list(SETS[name].targets)
    files = [str(split / f"{p}.csv") for p in ("train", "valid", "test")]
    common = ["--accelerator", "cpu", "--devices", "1", "--num-workers", "0"]
    start = time.perf_counter()
    _call(
        [a.chemprop, "train", "-i", *files, "-s", "smiles", "--target-columns", *targets]
        + ["-t", "regression", "-o", str(out / "model"), "--pytorch-seed", str(seed), *common],
        out / "train.log",
    )
    wall = time.perf_counter() - start
    (model,) = sorted((out / "model").rglob("best*.pt"))[-1:]
    truth = pd.read_csv(files[2])[targets].to_numpy(dtype=float)
    known = np.isfinite(truth)
    result: dict = {"method": "chemprop", "set": name, "seed": seed, "seconds": round(wall, 1)}
    for level in LEVELS:
        pred_file = out / f"test_{level}.csv"
        alpha = f"{1 - int(level) / 100:.2f}"
        _call(
            [a.chemprop, "predict", "-i", files[2], "-s", "smiles", "--model-paths", str(model)]
            + ["-o", str(pred_file), "--cal-path", files[1], "--uncertainty-method", "dropout"]
            + ["--calibration-method", "conformal-regression", "--conformal-alpha", alpha]
            + common,
            out / f"predict_{level}.log",
        )
        table = pd.read_csv(pred_file)
        pred = table[targets].to_numpy(dtype=float)
        half = table[[f"{t}_unc" for t in targets]].to_numpy(dtype=float)
        inside = np.abs(truth - pred) <= half
        result[f"coverage_{level}"] = float(inside[known].mean())
        result[f"width_{level}"] = float(2 * half[known].mean())
        if level == "90":
            result["test_rmse"] = float(np.sqrt(((truth - pred)[known] ** 2).mean()))
    result["test_graphs"] = int(known.any(axis=1).sum())
    done.write_text(json.dumps(result, indent=1))
    return result


def run(a: argparse.Namespace, name: str, seed: int) -> dict:
    """One (set, seed) run; its calibration figures (kept in ``result.json``)."""
    minutes = a.minutes
    if a.chemprop:
        minutes = run_chemprop(a, name, seed)["seconds"] / 60
    split = write_splits(name, seed, a.data_dir, a.work, None)
    tag = "calibration" + (f"-ens{a.ensemble}" if a.ensemble > 1 else "")
    tag += "".join(f"-{x}" for x in (a.init_from, a.mol_features) if x)
    tag += "-chemprop-time" if a.chemprop else ""
    out = a.work / name / f"seed{seed}" / tag
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    task = SETS[name]
    files = ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{files}"]
    cmd += ["--target-columns", *task.targets, "--seed", str(seed), "--threads", "1"]
    cmd += ["--time-limit", f"{minutes:.3f}", "--out", str(out / "run"), "--no-progress"]
    cmd += ["--store-dir", str(out / "cache")]
    if task.classification:
        cmd += ["--task", "classification"]
    if a.init_from:
        cmd += ["--init-from", a.init_from]
    if a.mol_features:
        cmd += ["--mol-features", a.mol_features]
    if a.ensemble > 1:
        cmd += ["--ensemble", str(a.ensemble)]
    start = time.perf_counter()
    _call(cmd, out / "train.log")
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    keys = [k for k in metrics if k.startswith(("test_coverage_", "test_width_", "test_ece"))]
    result = {
        "method": "ours",
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
    """Per method and set (``ours/esol``; ``esol`` for ours alone): the mean and the range
    over seeds of each figure."""
    out: dict = {}
    methods = dict.fromkeys(r.get("method", "ours") for r in results)
    for key in dict.fromkeys((r.get("method", "ours"), r["set"]) for r in results):
        name = key[1] if len(methods) == 1 else "/".join(key)
        rows = [r for r in results if (r.get("method", "ours"), r["set"]) == key]
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
    p.add_argument("--mol-features", default=None, help="train's --mol-features")
    p.add_argument("--chemprop", default=None, help="Chemprop 2.x executable, to compare")
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
    if a.chemprop:
        results += [run_chemprop(a, *job) for job in jobs]  # kept from the runs above
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": "2 CPU cores, one thread per run",
        "runs": {
            "minutes": "Chemprop's wall time per split" if a.chemprop else a.minutes,
            "init_from": a.init_from,
            "mol_features": a.mol_features,
            "ensemble": a.ensemble,
            "chemprop": "defaults; predict --uncertainty-method dropout --calibration-method "
            "conformal-regression"
            if a.chemprop
            else None,
        },
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
