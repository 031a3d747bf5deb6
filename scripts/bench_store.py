"""Benchmark the dataset store: build time and size, training memory, training throughput.

Prints JSON. Everything runs as the ``graphormer-urpe`` command in a subprocess: wall time,
and the peak proportional resident memory (PSS, so that pages forked workers share with the
main process count once) of its process tree sampled every 0.2 s, in all
(``peak_pss_mib``), private (``peak_anon_mib``: what the run allocates) and mapped file pages
(``peak_file_mib``:
the store's memory-mapped arrays, page cache that other processes share and the kernel can
reclaim; it grows with the part of the store a run has read, up to the store's size):

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
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _moses import cache_dir, moses_smiles_file

REPO = Path(__file__).resolve().parents[1]
ZINC_TRAIN = REPO.parent / "shared" / "data" / "zinc" / "train.csv"
CLI = [sys.executable, "-m", "graphormer_urpe.cli"]


EVAL_ROWS = 1_000
"""Rows of each of the valid and test splits: the training run measures training memory,
not the time to score a tenth of a million molecules."""


def moses_csv(n: int) -> Path:
    """``smiles,y,split`` CSV of the first ``n`` MOSES SMILES (``y`` = SMILES length; the last
    ``2 * EVAL_ROWS`` rows are valid and test), written once."""
    path = cache_dir() / f"moses_{n}_split.csv"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(moses_smiles_file(n)) as src, open(tmp, "w") as dst:
            dst.write("smiles,y,split\n")
            for i, line in enumerate(src):
                s = line.strip()
                part = (
                    "train" if i < n - 2 * EVAL_ROWS else "valid" if i < n - EVAL_ROWS else "test"
                )
                dst.write(f"{s},{len(s)},{part}\n")
        tmp.replace(path)
    return path


def _pss_kib(pid: int) -> tuple[int, int]:
    """``(Pss_Anon, Pss_File)`` of a process in KiB: its private memory and the file pages it
    maps (the store's memory-mapped arrays), each page shared by k processes counted 1/k in
    each, so that the sum over a process tree (forked workers included) counts it once."""
    anon = file = 0
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss_Anon:"):
                anon = int(line.split()[1])
            elif line.startswith("Pss_File:"):
                file = int(line.split()[1])
    return anon, file


def measure_memory(cmd: list[str]) -> dict:
    """Run ``cmd``: wall seconds and the peak proportional resident memory (PSS) of its process
    tree, private (anonymous) and mapped files apart, sampled every 0.2 s."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    main = psutil.Process(proc.pid)
    peak_anon = peak_file = peak_total = 0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            pids = [main.pid, *(c.pid for c in main.children(recursive=True))]
            sizes = [_pss_kib(p) for p in pids]
            anon, file = sum(a for a, _ in sizes), sum(f for _, f in sizes)
            peak_anon, peak_file = max(peak_anon, anon), max(peak_file, file)
            peak_total = max(peak_total, anon + file)
        time.sleep(0.2)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "peak_pss_mib": round(peak_total / 1024, 1),
        "peak_anon_mib": round(peak_anon / 1024, 1),
        "peak_file_mib": round(peak_file / 1024, 1),
        "summary": err.strip().splitlines()[-1] if err.strip() else "",
    }


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _train_cmd(csv: Path, cache: str, steps: int, out: str) -> list[str]:
    cmd = [*CLI, "train", "--dataset", f"csv:{csv}", "--target-columns", "y"]
    cmd += ["--split-column", "split", "--max-steps", str(steps), "--store-dir", cache]
    return cmd + ["--out", out, "--no-progress", "--threads", "2", "--device", "cpu"]


def bench_scale(sizes: list[int], workers: int, steps: int) -> list[dict]:
    """Per size: the store built by ``preprocess``, then a short ``train`` run reading it."""
    out = []
    for n in sizes:
        csv = moses_csv(n)
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            cmd = [*CLI, "preprocess", "--dataset", f"csv:{csv}", "--workers", str(workers)]
            cmd += ["--store-dir", cache, "--target-columns", "y", "--split-column", "split"]
            build = measure_memory([*cmd, "--no-progress"])
            size = _folder_bytes(Path(cache))
            train = measure_memory(_train_cmd(csv, cache, steps, os.path.join(tmp, "run")))
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
    # the baseline, an older commit, may read the variable's previous name
    stores = {"GRAPHORMER_URPE_STORE": cache, "GRAPHORMER_URPE_CACHE": cache}
    env = {**os.environ, "PYTHONPATH": str(root), **stores}
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
