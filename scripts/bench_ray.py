"""Benchmark ``predict --engine ray`` (a Ray cluster started on this machine) against streaming
``predict`` in the same run, on the same input.

Prints JSON (and writes it to ``--json``). On the first ``--size`` MOSES training SMILES
(``scripts/_moses.py``; one ``.smi`` file, so one shard) with an untrained checkpoint of
``--preset`` that records a training domain (as :mod:`bench_predict` makes them),
``--pairs`` times: streaming ``predict`` writing its CSV, and ``predict --engine ray`` writing
its part file and manifest (the order swaps every other pair, so both see the same load of a
shared machine). Each run is one command in a subprocess, measured as ``bench_predict.py``
measures ``predict``: wall time (start-up, the cluster's start and stop included), the peak
of the summed proportional set size (PSS) of the command's whole process tree (for Ray: the
cluster's processes, its workers and its object store too) and the CPU time of that tree
(sampled every 0.5 s: ``tree_cpu_s``). The report gives
the medians, the throughput ratio (ray / streaming; target >= 0.8) and checks the output:
the same rows in the same order as streaming ``predict``'s CSV, and the largest difference
of a predicted value (batches are cut from different windows, so the padding differs). Run::

    python scripts/bench_ray.py --size 100000 --pairs 3 --json docs/results/predict_ray.json
    python scripts/bench_ray.py --size 1000000 --pairs 1 --json docs/results/predict_ray_1m.json
    python scripts/bench_ray.py --smoke
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import sys
from pathlib import Path

from bench_predict import (
    REPO,
    PairInputs,
    _rates,
    measure,
    median,
    pair_arguments,
    pair_report,
    run_in_pairs,
    run_stream,
)

from graphormer_urpe.inference.engines.defaults import (
    DEFAULT_OBJECT_STORE_MIB,
    DEFAULT_ROWS_PER_BLOCK,
)


def run_ray(a: argparse.Namespace, ckpt: Path, smi: Path, n: int, out: Path) -> dict:
    """This code's ``predict --engine ray`` on ``smi`` (``n`` molecules) into ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "predict", "--engine", "ray"]
    cmd += ["--checkpoint", str(ckpt), "--input", str(smi), "--output", str(out)]
    cmd += ["--no-progress", "--batch-size", str(a.batch_size)]
    cmd += ["--rows-per-block", str(a.rows_per_block)]
    cmd += ["--object-store-mib", str(a.object_store_mib)]
    if a.actors:
        cmd += ["--actors", str(a.actors)]
    result = {"molecules": n, **measure(cmd, REPO)}
    return _rates(result, n)


def compare(stream_csv: Path, ray_folder: Path) -> dict:
    """Streaming ``predict``'s CSV against the Ray engine's part file: rows, order, values."""
    manifest = json.loads((ray_folder / "manifest.json").read_text())
    (shard,) = manifest["shards"]
    with open(stream_csv, newline="") as a, open(ray_folder / shard["output"], newline="") as b:
        ra, rb = csv.reader(a), csv.reader(b)
        header = next(ra)
        same_header = header == next(rb)
        k = header.index("y")
        rows = order = 0
        worst = 0.0
        for x, y in zip(ra, rb, strict=True):
            rows += 1
            order += x[0] == y[0] and x[1] == y[1] and x[-3:] == y[-3:]
            if x[k] and y[k]:
                worst = max(worst, abs(float(x[k]) - float(y[k])))
    return {
        "same_header": same_header,
        "rows": rows,
        "manifest_rows": shard["rows"],
        "rows_in_same_order_with_same_domain_and_errors": order == rows,
        "max_abs_difference_y": worst,
        "ok": same_header and order == rows == shard["rows"] and worst < 1e-4,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows-per-block", type=int, default=DEFAULT_ROWS_PER_BLOCK)
    p.add_argument("--object-store-mib", type=int, default=DEFAULT_OBJECT_STORE_MIB)
    p.add_argument("--actors", type=int, default=None, help="default: one per core")
    a = pair_arguments(p, size=100_000)
    a.device = "cpu"  # what run_stream reads

    def run(kind: str, pair: int, inputs: PairInputs) -> dict:
        if kind == "stream":
            row = run_stream(
                a, inputs.checkpoint, inputs.smiles, a.size, inputs.work / "stream.csv"
            )
        else:
            row = run_ray(a, inputs.checkpoint, inputs.smiles, a.size, inputs.work / "ray")
        row["tree_cpu_ms_per_molecule"] = round(1000 * row["tree_cpu_s"] / a.size, 3)
        return {"pair": pair, **row}

    def after_pair(runs: dict[str, list[dict]], inputs: PairInputs) -> None:
        runs["ray"][-1]["output"] = compare(inputs.work / "stream.csv", inputs.work / "ray")

    runs, load, model = run_in_pairs(a, ("stream", "ray"), run, after_pair)
    stream, ray = runs["stream"], runs["ray"]
    ratio = median(ray, "molecules_per_s") / median(stream, "molecules_per_s")
    per_pair = [
        round(r["molecules_per_s"] / s["molecules_per_s"], 3)
        for s, r in zip(stream, ray, strict=True)
    ]
    summary = {
        "molecules": a.size,
        "stream_molecules_per_s": median(stream, "molecules_per_s"),
        "ray_molecules_per_s": median(ray, "molecules_per_s"),
        "throughput_ratio": round(ratio, 3),
        "throughput_ratio_per_pair": per_pair,
        # the CPU time of each command's whole process tree (Ray: the cluster's too)
        "stream_cpu_ms_per_molecule": median(stream, "tree_cpu_ms_per_molecule"),
        "ray_cpu_ms_per_molecule": median(ray, "tree_cpu_ms_per_molecule"),
        "stream_peak_pss_gib": round(max(r["peak_pss_mib"] for r in stream) / 1024, 2),
        "ray_peak_pss_gib": round(max(r["peak_pss_mib"] for r in ray) / 1024, 2),
        "ray_peak_rss_gib": round(max(r["peak_rss_mib"] for r in ray) / 1024, 2),
        "target_throughput_ratio_0_8_met": ratio >= 0.8,
        "outputs_ok": all(r["output"]["ok"] for r in ray),
        "max_abs_difference_y": max(r["output"]["max_abs_difference_y"] for r in ray),
    }
    report = pair_report(
        "predict --engine ray against streaming predict",
        a,
        model,
        load,
        summary,
        runs,
        rows_per_block=a.rows_per_block,
        object_store_mib=a.object_store_mib,
        actors=a.actors or os.cpu_count(),
        cluster="started by the command on this machine (ray.init), all its cores",
        ray=_ray_version(),
        gpu=None,
    )
    text = json.dumps(report, indent=2, default=lambda x: None if math.isnan(x) else x)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(text)


def _ray_version() -> str | None:
    try:
        import ray
    except ImportError:
        return None
    return ray.__version__


if __name__ == "__main__":
    main()
