"""Shared helpers of the benchmark scripts: real molecules, timing, the JSON report."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "zinc"


def molecules(count: int, csv_path: str | None = None) -> tuple[list[str], str]:
    """``count`` real SMILES: from ``csv_path`` (first column, a header row) when given, else
    the ZINC validation + training molecules beside the project, else RDKit's NCI set."""
    smiles: list[str] = []
    source = "nci5k"
    paths = [Path(csv_path)] if csv_path else [SHARED / "val.csv", SHARED / "train.csv"]
    for path in paths:
        if csv_path and not path.exists():
            raise FileNotFoundError(f"molecule table {path} does not exist")
        if path.exists():
            with open(path) as fh:
                next(fh)
                smiles.extend(line.split(",")[0] for line in fh)
            source = "zinc" if not csv_path else path.name
    if not smiles:
        from graphormer_urpe.datasets.nci import read_nci_smiles

        smiles = read_nci_smiles()
    return smiles[:count], source


def ogb_items(smiles: list[str]) -> list[dict]:
    """OGB featurisation (9 atom / 3 bond columns) as dicts of numpy arrays.

    The bond features are also stored under ``edge_attr``, the key Hugging Face's
    ``preprocess_item`` reads (without it, it silently uses one constant bond type).
    """
    from ogb.utils import smiles2graph

    items = []
    for s in smiles:
        try:
            g = smiles2graph(s)
            items.append({**g, "edge_attr": g["edge_feat"], "y": [0.0]})
        except Exception:  # a handful of NCI entries do not parse
            continue
    return items


def pyg_graphs(items: list[dict], multi_hop_max_dist: int) -> list:
    """PyG graphs with Graphormer features (and a random target) from :func:`ogb_items`."""
    from torch_geometric.data import Data

    from graphormer_urpe import GraphormerFeatures

    transform = GraphormerFeatures(multi_hop_max_dist)
    return [
        transform(
            Data(
                x=torch.from_numpy(it["node_feat"]),
                edge_index=torch.from_numpy(it["edge_index"]),
                edge_attr=torch.from_numpy(it["edge_feat"]),
                y=torch.randn(1, 1),
                num_nodes=it["num_nodes"],
            )
        )
        for it in items
    ]


def setup(
    doc: str, smoke_molecules: int, **extra: dict
) -> tuple[argparse.Namespace, list[dict], str]:
    """Parse the flags shared by the throughput benchmarks and load the molecules.

    ``extra`` adds benchmark-specific flags (name -> ``add_argument`` keywords).

    Returns:
        ``(args, items, source)``: the flags, OGB-featurised molecules and their source name.
    """
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--molecules", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--multi-hop-max-dist", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--peer", choices=["hf"], default=None)
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    for flag, kw in extra.items():
        p.add_argument(flag, **kw)
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.repeats = smoke_molecules, 1
    torch.set_num_threads(a.threads)
    smiles, source = molecules(a.molecules)
    return a, ogb_items(smiles), source


def median_rate(fn: Callable[[], int], repeats: int) -> tuple[float, list[float]]:
    """Run ``fn`` (which returns how many graphs it handled) ``repeats`` times: median graphs/s."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - start))
    return statistics.median(rates), rates


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, config: dict, results: dict) -> None:
    """Print the JSON report of one benchmark."""
    out = {
        "benchmark": name,
        "config": config,
        "results": results,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }
    print(json.dumps(out, indent=2))


def hf_graphormer():
    """Hugging Face's (deprecated) Graphormer modules, or ``None`` when not installed."""
    try:
        from transformers.models.deprecated.graphormer import (
            collating_graphormer,
            configuration_graphormer,
            modeling_graphormer,
        )
    except Exception:
        return None
    return collating_graphormer, configuration_graphormer, modeling_graphormer
