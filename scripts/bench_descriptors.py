"""Benchmark RDKit 2D descriptors (the pretraining targets) against featurisation, one core.

Prints JSON: milliseconds per molecule (median of ``--repeats``) on real MOSES SMILES for

* ``descriptors``: :func:`graphormer_urpe.datasets.compute_descriptors` (parse + the 202
  descriptors of ``rdkit2d-v1``), what the store adds per molecule;
* ``rdkit_all_217``: every function of RDKit's ``Descriptors._descList`` called alone, the
  cost of the unfiltered list;
* ``featurize``: OGB's graph features of the same SMILES (what a store always computes);

and the ten most expensive kept descriptors. Run::

    python scripts/bench_descriptors.py --molecules 2000
    python scripts/bench_descriptors.py --smoke
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import rdkit
import torch
from rdkit import Chem, rdBase
from rdkit.Chem import Descriptors

from graphormer_urpe.datasets.featurizers.descriptors import (
    DESCRIPTOR_NAMES,
    compute_descriptors,
    descriptor_functions,
)
from graphormer_urpe.datasets.featurizers.ogb_features import ogb_smiles_graph


def _ms_per_molecule(fn: Callable[[], None], count: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(times) / count, 4)


def _all_rdkit(smiles: list[str]) -> None:
    with rdBase.BlockLogs():
        for s in smiles:
            mol = Chem.MolFromSmiles(s)
            for _, fn in Descriptors._descList:
                try:
                    fn(mol)
                except Exception:
                    pass


def _per_descriptor(smiles: list[str]) -> dict[str, float]:
    """Milliseconds per molecule of each kept descriptor called alone, the ten largest."""
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    cost = {}
    for name, fn in zip(DESCRIPTOR_NAMES, descriptor_functions(), strict=True):
        t0 = time.perf_counter()
        for m in mols:
            fn(m)
        cost[name] = round(1e3 * (time.perf_counter() - t0) / len(mols), 4)
    return dict(sorted(cost.items(), key=lambda kv: -kv[1])[:10])


def _smiles(count: int, smoke: bool) -> list[str]:
    if smoke:
        from graphormer_urpe.datasets.sources.nci import read_nci_smiles

        return list(read_nci_smiles(limit=count))
    from _moses import moses_smiles_file

    return moses_smiles_file(count).read_text().split()[:count]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--molecules", type=int, default=2_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (RDKit uses one)")
    p.add_argument("--smoke", action="store_true", help="20 NCI molecules, one repeat")
    a = p.parse_args()
    count, repeats = (20, 1) if a.smoke else (a.molecules, a.repeats)
    torch.set_num_threads(a.threads)
    smiles = _smiles(count, a.smoke)
    results = {
        "descriptors": _ms_per_molecule(lambda: compute_descriptors(smiles), count, repeats),
        "rdkit_all_217": _ms_per_molecule(lambda: _all_rdkit(smiles), count, repeats),
        "featurize": _ms_per_molecule(
            lambda: [ogb_smiles_graph(s) for s in smiles], count, repeats
        ),
    }
    report = {
        "benchmark": "descriptors",
        "unit": "ms per molecule, one core",
        "molecules": count,
        "source": "RDKit NCI" if a.smoke else "MOSES train (first rows)",
        "descriptors_kept": len(DESCRIPTOR_NAMES),
        "rdkit": rdkit.__version__,
        "python": platform.python_version(),
        "results": results,
        "top10_kept_ms": _per_descriptor(smiles[: min(count, 500)]),
        "hours_per_million_one_core": round(results["descriptors"] * 1e6 / 3.6e6, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
