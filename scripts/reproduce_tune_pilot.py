"""A pilot of ``graphormer-urpe tune`` on one small set: search on scaffold seed 0, then
score the best configuration and the recommended defaults on seeds 1 and 2.

The splits are the small-data benchmark's (:mod:`bench_small_data`: balanced scaffold
splits 80/10/10, the same files for every model). The search runs ``--processes`` tune
commands at once on one journal-file study (one CPU thread each) for ``--search-minutes``.
On seeds 1 and 2, both models then train once for ``--minutes`` each (by default Chemprop's
mean wall time on the set in the small-data benchmark; one thread, two at a time), from the
shipped pretrained checkpoint or not as their recipe says:

* ``default``: the recommended ``train --init-from pretrained --mol-features rdkit2d``,
  every other setting at its default (the small-data benchmark's ``urpe-pretrained-rdkit2d``);
* ``tuned``: the search's best ``config.json`` on the other seed's files, its steps planned
  to fill the same ``--minutes`` (the warm-up as the same fraction of them);
* ``tuned-as-searched``: that ``config.json`` as it is (``train --config`` of it: the steps
  its trial planned, one search trial's share of the time, in its own wall time).

Both are scored on the test split by the benchmark's own metric code. Finished runs are
kept and skipped; the JSON report goes to ``--out``::

    python scripts/reproduce_tune_pilot.py --set bace --search-minutes 24 --minutes 3.3 \\
        --out docs/results/tune_pilot_bace.json

``--tune-args`` passes more flags to the search (``--tune-args "--init-from pretrained"``
searches the fine-tuning recipe of the pretrained start only).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from bench_small_data import REPO, SETS, SHARED, _call, run_ours, score, write_splits

WORK = Path.home() / ".cache" / "graphormer-urpe" / "bench" / "tune_pilot"

MODELS = ("default", "tuned", "tuned-as-searched")


def chemprop_minutes(name: str) -> float:
    """Chemprop's mean wall time on set ``name`` in the small-data benchmark, in minutes."""
    report = json.loads((REPO / "docs" / "results" / "small_data.json").read_text())
    return round(report["sets"][name]["models"]["chemprop"]["wall_s_mean"] / 60, 2)


def _files(split: Path) -> str:
    return "csv:" + ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))


def search(a: argparse.Namespace, split: Path) -> Path:
    """The search on ``split`` (seed 0): ``--processes`` tune commands on one study; the
    folder of the one that ended last (each writes the whole study's report as it ends, so
    the last has every trial finished and the best of them)."""
    first = Path(a.work) / f"{a.set}-search-0"
    if (first / "config.json").exists():
        return _last_report(a)
    task = SETS[a.set]
    procs = []
    for i in range(a.processes):
        cmd = [sys.executable, "-m", "graphormer_urpe.cli", "tune", "--dataset", _files(split)]
        cmd += ["--target-columns", *task.targets, "--time-limit", str(a.search_minutes)]
        cmd += ["--storage", str(Path(a.work) / f"{a.set}-study.log")]
        cmd += ["--study", f"{a.set}-scaffold-seed0", "--threads", "1", "--no-progress"]
        cmd += ["--out", str(Path(a.work) / f"{a.set}-search-{i}")]
        if task.classification:
            cmd += ["--task", "classification"]
        cmd += shlex.split(a.tune_args)
        log = open(Path(a.work) / f"{a.set}-search-{i}.log", "w")  # noqa: SIM115 - closed by the process end
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"a search process failed; see {a.work}/{a.set}-search-*.log")
    return _last_report(a)


def _last_report(a: argparse.Namespace) -> Path:
    """The search folder whose ``trials.csv`` was written last."""
    folders = Path(a.work).glob(f"{a.set}-search-*/trials.csv")
    return max(folders, key=lambda f: f.stat().st_mtime).parent


def run_tuned(a: argparse.Namespace, best: Path, split: Path, seed: int, model: str) -> dict:
    """The best configuration on ``split``: as the search trained it (``tuned-as-searched``:
    its planned steps, what ``train --config`` of the search's ``config.json`` does), or with
    its steps planned to fill ``--minutes`` (``tuned``)."""
    out = split / model
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((best / "config.json").read_text())
    cfg.update(dataset=_files(split), seed=seed, out=str(out / "run"), store_dir=str(out / "cache"))
    if model == "tuned":  # the warm-up as the same fraction of the re-planned steps
        fraction = cfg["warmup_fraction"]
        if fraction is None:  # a trial re-planned by its pacer records its warm-up in steps
            fraction = cfg["warmup_steps"] / cfg["max_steps"]
        cfg.update(time_limit=a.minutes, fill_time_limit=True, max_steps=None, epochs=None)
        cfg.update(warmup_fraction=fraction)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--config"]
    _call([*cmd, str(out / "config.json"), "--no-progress"], out / "train.log")
    return _result(a, split, out, seed, model, time.perf_counter() - start)


def run_default(a: argparse.Namespace, split: Path, seed: int) -> dict:
    """The recommended command on ``split`` for ``--minutes``."""
    out = split / "default"
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run_ours(SETS[a.set], split, out, seed, a.minutes, "pretrained", ["--mol-features", "rdkit2d"])
    return _result(a, split, out, seed, "default", time.perf_counter() - start)


def _result(a: argparse.Namespace, split: Path, out: Path, seed: int, model: str, wall: float):
    task = SETS[a.set]
    truth = pd.read_csv(split / "test.csv")
    table = pd.read_csv(out / "run" / "test_predictions.csv")
    pred = table[[f"pred_{t}" for t in task.targets]].to_numpy(dtype=float)
    result = {"seed": seed, "model": model, "metric": task.metric, "wall_s": round(wall, 1)}
    result["value"] = score(task, truth, pred)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def report(a: argparse.Namespace, best: Path, runs: list[dict]) -> dict:
    trials = pd.read_csv(best / "trials.csv")
    cfg = json.loads((best / "config.json").read_text())
    models = {}
    for model in MODELS:
        rs = sorted((r for r in runs if r["model"] == model), key=lambda r: r["seed"])
        values = [round(r["value"], 4) for r in rs]
        models[model] = {
            "seeds": [r["seed"] for r in rs],
            "values": values,
            "mean": round(statistics.mean(values), 4),
            "wall_s": [r["wall_s"] for r in rs],
        }
    complete = trials[trials["state"] == "COMPLETE"]
    pick = complete["value"].idxmax() if SETS[a.set].classification else complete["value"].idxmin()
    best_row = complete.loc[pick]
    return {
        "pilot": "graphormer-urpe tune, search on scaffold seed 0, scored on seeds 1 and 2",
        "date": time.strftime("%Y-%m-%d"),
        "set": a.set,
        "search": {
            "minutes": a.search_minutes,
            "processes": a.processes,
            "tune_args": a.tune_args,
            "threads_per_process": 1,
            "trials": trials["state"].value_counts().to_dict(),
            "best_trial": int(best_row["number"]),
            "best_valid": round(float(best_row["value"]), 4),
            "best_config": {
                k: cfg[k]
                for k in (
                    "lr",
                    "weight_decay",
                    "batch_size",
                    "warmup_fraction",
                    "init_from",
                    "mol_features",
                    *(() if SETS[a.set].classification else ("loss",)),  # binary: BCE
                )
            }
            | {
                k: cfg["model"][k]
                for k in ("num_layers", "hidden_dim", "dropout", "attention_dropout")
            },
        },
        "minutes_per_run": a.minutes,
        "models": models,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="bace", choices=sorted(SETS))
    p.add_argument("--data-dir", default=str(SHARED))
    p.add_argument("--work", default=None, help="splits, searches and runs (kept, resumable)")
    p.add_argument("--search-minutes", type=float, default=24.0)
    p.add_argument("--processes", type=int, default=2, help="tune commands on the one study")
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="each scoring run's budget (default: Chemprop's mean wall time on the set in "
        "docs/results/small_data.json)",
    )
    p.add_argument("--tune-args", default="", help="more tune flags: '--init-from pretrained'")
    p.add_argument("--out", required=True, help="the JSON report")
    a = p.parse_args(argv)
    a.work = a.work or str(WORK)
    a.minutes = a.minutes or chemprop_minutes(a.set)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    splits = {s: write_splits(a.set, s, Path(a.data_dir), Path(a.work), None) for s in (0, 1, 2)}
    best = search(a, splits[0])
    jobs = [(m, s) for s in (1, 2) for m in MODELS]
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda job: (
                    run_default(a, splits[job[1]], job[1])
                    if job[0] == "default"
                    else run_tuned(a, best, splits[job[1]], job[1], job[0])
                ),
                jobs,
            )
        )
    result = report(a, best, runs)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
