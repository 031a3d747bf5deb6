"""Benchmark ``graphormer-urpe predict --embeddings`` against plain ``predict`` in the same run.

Prints JSON (and writes it to ``--json``). On the first ``--size`` MOSES training SMILES
(``scripts/_moses.py``) with an untrained checkpoint of ``--preset`` that records a training
domain (as :mod:`bench_predict` makes them), ``--pairs`` times: plain ``predict`` writing its
CSV, then ``predict --embeddings`` writing the same CSV and the ``.npy`` (the order swaps
every other pair, so both see the same load of a shared machine). Each run is measured as
``bench_predict.py`` measures ``predict`` (wall time, peak resident and proportional memory
of the command with its worker processes, CPU time); the report gives the medians, the
throughput ratio (embeddings / plain; target >= 0.9) and the peak memory of the embeddings
runs (target <= 2 GB), the ratio of CPU time per molecule (plain / embeddings: what the
load of a shared machine changes least), and checks the array: its shape, input-order rows
for the first and last molecules' ids, no NaN row for a readable molecule. Run::

    python scripts/bench_embeddings.py --size 100000
    python scripts/bench_embeddings.py --size 1000000 --pairs 1 --json docs/results/embeddings.json
    python scripts/bench_embeddings.py --smoke
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
from bench_predict import PairInputs, median, pair_arguments, pair_report, run_in_pairs, run_stream

GIB = 2**30


def check_array(path: Path, smi: Path, n: int) -> dict:
    """The written array against its input: shape, ids in input order, NaN rows."""
    x = np.load(path, mmap_mode="r")
    meta = json.loads(path.with_suffix(".json").read_text())
    with open(path.with_suffix(".ids.csv"), newline="") as fh:
        ids = csv.DictReader(fh)
        first = next(ids)
        *_, last = ids
    with open(smi) as fh:
        smiles = [line.split()[0] for line in fh]
    nan_rows = int(
        sum(np.isnan(x[i : i + 100_000]).any(axis=1).sum() for i in range(0, n, 100_000))
    )
    return {
        "shape": list(x.shape),
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "rows_in_input_order": first["smiles"] == smiles[0] and last["smiles"] == smiles[-1],
        "nan_rows": nan_rows,
        "unreadable": meta["unreadable"],
        "ok": list(x.shape) == [n, meta["dim"]] and nan_rows == meta["unreadable"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    a = pair_arguments(p, size=1_000_000)

    def run(kind: str, pair: int, inputs: PairInputs) -> dict:
        npy = inputs.work / "emb.npy"
        extra = ["--embeddings", str(npy)] if kind == "embeddings" else []
        row = run_stream(
            a, inputs.checkpoint, inputs.smiles, a.size, inputs.work / "out.csv", extra
        )
        if kind == "embeddings":
            row["array"] = check_array(npy, inputs.smiles, a.size)
            npy.unlink()
        return row

    runs, load, model = run_in_pairs(a, ("predict", "embeddings"), run)
    plain, emb = runs["predict"], runs["embeddings"]
    ratio = median(emb, "molecules_per_s") / median(plain, "molecules_per_s")
    peak_pss = max(r["peak_pss_mib"] for r in emb) / 1024
    summary = {
        "molecules": a.size,
        "predict_molecules_per_s": median(plain, "molecules_per_s"),
        "embeddings_molecules_per_s": median(emb, "molecules_per_s"),
        "throughput_ratio": round(ratio, 3),
        # CPU time per molecule (command and workers): what the load of a shared machine
        # changes least; plain / embeddings, the throughput ratio on idle cores
        "predict_cpu_ms_per_molecule": median(plain, "cpu_ms_per_molecule"),
        "embeddings_cpu_ms_per_molecule": median(emb, "cpu_ms_per_molecule"),
        "cpu_ratio": round(
            median(plain, "cpu_ms_per_molecule") / median(emb, "cpu_ms_per_molecule"), 3
        ),
        "embeddings_peak_pss_gib": round(peak_pss, 2),
        "embeddings_peak_rss_gib": round(max(r["peak_rss_mib"] for r in emb) / 1024, 2),
        "predict_peak_pss_gib": round(max(r["peak_pss_mib"] for r in plain) / 1024, 2),
        "target_throughput_ratio_0_9_met": ratio >= 0.9,
        "target_peak_2_gib_met": peak_pss <= 2.0,
        "arrays_ok": all(r["array"]["ok"] for r in emb),
    }
    report = pair_report("predict --embeddings", a, model, load, summary, runs)
    text = json.dumps(report, indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
