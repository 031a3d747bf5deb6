"""Seconds per molecule of ``explain`` for trained runs: one model, an ensemble, faster
settings.

Each ``--checkpoint`` (a ``best.pt`` or an ensemble's folder) explains the first ``--molecules``
SMILES of ``--input`` (a CSV with a ``smiles`` column) with each setting of ``--settings``
(``shapley:32``: Shapley values with 32 orderings, the default; ``shapley:8``;
``integrated-gradients``), on ``--threads`` torch threads, without drawing; the JSON gives the
wall seconds per molecule and the mean heavy atoms. Run::

    python scripts/bench_explain_time.py --checkpoint runs/ens/member-0/best.pt runs/ens \\
        --input test.csv --molecules 10 --out explain_time.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from graphormer_urpe.inference.explain.explainer import Explainer
from graphormer_urpe.inference.loading import load_models


def _options(setting: str) -> dict:
    method, _, permutations = setting.partition(":")
    options: dict = {"method": method}
    if permutations:
        options["permutations"] = int(permutations)
    return options


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", nargs="+", required=True)
    p.add_argument("--input", required=True, help="a CSV with a smiles column")
    p.add_argument("--molecules", type=int, default=10)
    p.add_argument("--settings", nargs="+", default=["shapley:32", "shapley:8"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="JSON file to write")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    smiles = pd.read_csv(args.input)["smiles"].astype(str).tolist()[: args.molecules]
    results = []
    for ckpt in args.checkpoint:
        models = load_models(ckpt, "cpu")
        for setting in args.settings:
            explainer = Explainer.from_loaded(models, **_options(setting))
            start = time.perf_counter()
            done = [e for e in explainer.explain_many(smiles) if e.error is None]
            seconds = time.perf_counter() - start
            results.append(
                {
                    "checkpoint": str(ckpt),
                    "members": len(models),
                    "setting": setting,
                    "molecules": len(done),
                    "mean_heavy_atoms": sum(len(e.elements) for e in done) / max(len(done), 1),
                    "seconds_per_molecule": round(seconds / max(len(done), 1), 3),
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr)
    report = {"benchmark": "explain_time", "threads": args.threads, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
