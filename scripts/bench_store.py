"""Benchmark the dataset store: build time and size, training memory, training throughput.

Prints JSON. Everything runs as the ``graphormer-urpe`` command in a subprocess, measured as
in ``bench_predict.py`` (wall time, peak resident memory of the process tree, sampled):

* ``scale``: for each N, ``preprocess --dataset csv:FILE --workers W`` on the first N real
  MOSES SMILES (``scripts/_moses.py``), each row with a target column ``y`` = the SMILES'
  length (the benchmark measures time and memory, not accuracy): seconds, molecules/s,
  store size, peak memory; then ``train --dataset csv:FILE --max-steps S`` reading that
  store: peak memory against N;
* ``throughput``: training graphs/s on the ZINC stand-in (``../shared/data/zinc/train.csv``,
  23,445 molecules, ``zinc`` featuriser, ``zinc-slim`` preset), this tree against an earlier
  commit (``--baseline REV``, checked out with ``git worktree``), alternated ``--repeats``
  times in the same run; the medians and their ratio.

Run::

    python scripts/bench_store.py scale --sizes 25000 250000 1000000 --workers 2
    python scripts/bench_store.py throughput --baseline 0251eef --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _moses import cache_dir, moses_smiles_file
from bench_predict import measure

REPO = Path(__file__).resolve().parents[1]
ZINC_TRAIN = REPO.parent / "shared" / "data" / "zinc" / "train.csv"
CLI = [sys.executable, "-m", "graphormer_urpe.cli"]


def moses_csv(n: int) -> Path:
    """``smiles,y`` CSV of the first ``n`` MOSES SMILES (``y`` = SMILES length), written once."""
    path = cache_dir() / f"moses_{n}.csv"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(moses_smiles_file(n)) as src, open(tmp, "w") as dst:
            dst.write("smiles,y\n")
            for line in src:
                s = line.strip()
                dst.write(f"{s},{len(s)}\n")
        tmp.replace(path)
    return path


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _train_cmd(csv: Path, cache: str, steps: int, out: str) -> list[str]:
    cmd = [*CLI, "train", "--dataset", f"csv:{csv}", "--target-columns", "y"]
    cmd += ["--max-steps", str(steps), "--cache-dir", cache, "--out", out, "--no-progress"]
    return cmd + ["--threads", "2", "--device", "cpu"]


def bench_scale(sizes: list[int], workers: int, steps: int) -> list[dict]:
    """Per size: the store built by ``preprocess``, then a short ``train`` run reading it."""
    out = []
    for n in sizes:
        csv = moses_csv(n)
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            cmd = [*CLI, "preprocess", "--dataset", f"csv:{csv}", "--workers", str(workers)]
            cmd += ["--cache-dir", cache, "--target-columns", "y", "--no-progress"]
            build = measure(cmd)
            size = _folder_bytes(Path(cache))
            train = measure(_train_cmd(csv, cache, steps, os.path.join(tmp, "run")))
        row = {
            "rows": n,
            "build": {
                "workers": workers,
                **build,
                "molecules_per_s": round(n / build["seconds"], 1),
                "store_bytes": size,
                "bytes_per_molecule": round(size / n, 1),
            },
            "train": {"steps": steps, **train},
        }
        out.append(row)
        print(json.dumps(row), file=sys.stderr)
    return out


def _throughput_once(root: Path, cache: str, steps: int, out: str) -> float:
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{ZINC_TRAIN}"]
    cmd += ["--target-columns", "y", "--featurizer", "zinc", "--preset", "zinc-slim"]
    cmd += ["--max-steps", str(steps), "--out", out, "--no-progress", "--threads", "2"]
    cmd += ["--device", "cpu", "--batch-size", "128"]
    env = {**os.environ, "PYTHONPATH": str(root), "GRAPHORMER_URPE_CACHE": cache}
    subprocess.run(cmd, check=True, env=env, cwd=out.rsplit("/", 1)[0], capture_output=True)
    with open(os.path.join(out, "metrics.json")) as fh:
        return float(json.load(fh)["graphs_per_second"])


def bench_throughput(baseline: str, repeats: int, steps: int) -> dict:
    if not ZINC_TRAIN.exists():
        raise SystemExit(f"the ZINC stand-in {ZINC_TRAIN} is not available")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), baseline],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        try:
            runs: dict[str, list[float]] = {"this": [], "baseline": []}
            for r in range(repeats + 1):  # the first round builds the caches, not counted
                for name, root in (("this", REPO), ("baseline", base)):
                    gps = _throughput_once(root, f"{tmp}/cache-{name}", steps, f"{tmp}/{name}{r}")
                    if r:
                        runs[name].append(gps)
                        print(json.dumps({name: gps}), file=sys.stderr)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)],
                cwd=REPO,
                check=False,
                capture_output=True,
            )
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "baseline": baseline,
        "steps": steps,
        "graphs_per_s": runs,
        "median": med,
        "ratio": round(med["this"] / med["baseline"], 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    b = sub.add_parser("scale")
    b.add_argument("--sizes", type=int, nargs="+", default=[25_000, 250_000, 1_000_000])
    b.add_argument("--workers", type=int, default=2)
    b.add_argument("--steps", type=int, default=5)
    h = sub.add_parser("throughput")
    h.add_argument("--baseline", default="0251eef")
    h.add_argument("--repeats", type=int, default=3)
    h.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    result: dict = {
        "what": a.what,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }
    if a.what == "scale":
        result["runs"] = bench_scale(a.sizes, a.workers, a.steps)
    else:
        result.update(bench_throughput(a.baseline, a.repeats, a.steps))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
