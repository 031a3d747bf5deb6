"""Shared helpers of the benchmark scripts: real molecules, timing, the JSON report.

Benchmarks run on connected molecules: a disconnected one (a salt or a mixture, ``.`` in its
SMILES) is left out and counted (``skipped_disconnected`` in the JSON), because Hugging Face's
peer pads the path features of such a molecule to 510 hops, which measures that padding rather
than ordinary molecules. ``--disconnected`` benchmarks the disconnected molecules alone.
"""

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
from types import ModuleType
from typing import NamedTuple

import numpy as np
import torch

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "zinc"

# Hugging Face's shortest-path distance of unreachable pairs: its path features are padded to
# the largest distance of a molecule, so to this many hops for a disconnected one.
PEER_UNREACHABLE = 510
GIB = 2**30


def add_molecule_flags(p: argparse.ArgumentParser) -> None:
    """The flags choosing the molecules and capping the peer's memory."""
    p.add_argument(
        "--smiles-file",
        default=None,
        help="molecules from this file (one SMILES per line, or a CSV whose first column is "
        "the SMILES) instead of the ZINC molecules or RDKit's NCI set",
    )
    p.add_argument(
        "--disconnected",
        action="store_true",
        help="benchmark the disconnected molecules (salts, mixtures) alone; by default they "
        "are left out and counted",
    )
    p.add_argument(
        "--peer-max-gib",
        type=float,
        default=8.0,
        help="skip the peer, with a message, when its padded tensors are estimated above this "
        "many GiB (default 8)",
    )


def molecules(
    count: int, smiles_file: str | None = None, disconnected: bool = False
) -> tuple[list[str], str, dict]:
    """``count`` real SMILES: from ``smiles_file``, else ZINC validation + training molecules,
    else RDKit's NCI set; connected ones only (disconnected ones only with ``disconnected``).

    Returns:
        ``(smiles, source, selection)``; ``selection`` says which molecules were kept and how
        many of the others were skipped on the way, for the JSON report.
    """
    smiles: list[str] = []
    source = "nci5k"
    if smiles_file is not None:
        with open(smiles_file) as fh:
            rows = [line.split(",")[0].strip() for line in fh]
        if rows and rows[0].lower() in ("smiles", "smi"):
            rows = rows[1:]
        smiles, source = [s for s in rows if s], os.path.basename(smiles_file)
    else:
        for name in ("val.csv", "train.csv"):
            path = SHARED / name
            if path.exists():
                with open(path) as fh:
                    next(fh)
                    smiles.extend(line.split(",")[0] for line in fh)
                source = "zinc"
    if not smiles:
        from graphormer_urpe.datasets.sources.nci import read_nci_smiles

        smiles = read_nci_smiles()
    kept: list[str] = []
    skipped = 0
    for s in smiles:
        if len(kept) == count:
            break
        if ("." in s) == disconnected:
            kept.append(s)
        else:
            skipped += 1
    kind = "disconnected" if disconnected else "connected"
    other = "connected" if disconnected else "disconnected"
    return kept, source, {"connectivity": kind, f"skipped_{other}": skipped}


def peer_hops(item: dict) -> int:
    """The hops Hugging Face pads one molecule's path features to: its largest shortest-path
    distance, :data:`PEER_UNREACHABLE` when it is disconnected."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    n = int(item["num_nodes"])
    ei = item["edge_index"]
    adj = coo_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(n, n)).tocsr()
    dist = shortest_path(adj, unweighted=True, directed=False)
    return PEER_UNREACHABLE if np.isinf(dist).any() else int(dist.max())


def peer_gib(items: list[dict], batch_size: int | None, keep_batches: bool = False) -> float:
    """Estimated GiB of Hugging Face's padded path features (``input_edges``) for ``items``.

    ``preprocess_item`` builds ``[n, n, hops, F]`` int32 per molecule; its collator a
    ``[B, N, N, hops_max, F]`` int64 tensor per batch (plus int64 copies of the molecules').
    ``batch_size=None``: molecules one at a time, nothing kept (the largest one counts);
    otherwise all preprocessed molecules are held, and the batches too with ``keep_batches``.
    """
    if not items:
        return 0.0
    feats = items[0]["edge_feat"].shape[1]
    sizes = [(int(it["num_nodes"]), peer_hops(it)) for it in items]
    one = [n * n * h * feats * 4 for n, h in sizes]
    if batch_size is None:
        return 2 * max(one) / GIB
    batches = []
    for i in range(0, len(sizes), batch_size):
        part = sizes[i : i + batch_size]
        n_max, h_max = max(n for n, _ in part), max(h for _, h in part)
        batches.append(
            len(part) * n_max * n_max * h_max * feats * 8 + 2 * sum(one[i : i + batch_size])
        )
    return (sum(one) + (sum(batches) if keep_batches else max(batches))) / GIB


def peer_skip_reason(gib: float, cap: float, items: list[dict]) -> str | None:
    """``None`` when an estimate of ``gib`` fits ``cap``; else the line saying why the peer is
    skipped (also written to standard error)."""
    if gib <= cap:
        return None
    far = sum(peer_hops(it) == PEER_UNREACHABLE for it in items)
    reason = (
        f"Hugging Face's peer skipped: its padded path features would need about {gib:.1f} GiB "
        f"(--peer-max-gib {cap:g}); it pads each molecule's path features to its largest "
        f"shortest-path distance, {PEER_UNREACHABLE} hops for the {far} disconnected one(s) "
        f"of these {len(items)} molecules"
    )
    print(reason, file=sys.stderr)
    return reason


def peer_skipped(
    a, items: list[dict], batch_size: int | None, keep_batches: bool = False
) -> dict | None:
    """With ``--peer hf``: the report entry of a peer skipped for its estimated memory
    (``{"skipped": reason, "estimated_gib": ...}``), ``None`` when it runs or is not asked."""
    if a.peer != "hf":
        return None
    gib = peer_gib(items, batch_size, keep_batches=keep_batches)
    reason = peer_skip_reason(gib, a.peer_max_gib, items)
    return None if reason is None else {"skipped": reason, "estimated_gib": round(gib, 2)}


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
        ``(args, items, source)``: the flags (``args.selection``: which molecules, for the
        report), OGB-featurised molecules and their source name.
    """
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--molecules", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--multi-hop-max-dist", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--peer", choices=["hf"], default=None)
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    add_molecule_flags(p)
    for flag, kw in extra.items():
        p.add_argument(flag, **kw)
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.repeats = smoke_molecules, 1
    torch.set_num_threads(a.threads)
    smiles, source, a.selection = molecules(a.molecules, a.smiles_file, a.disconnected)
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


def untrained_checkpoint(
    path: Path, preset: str, domain: dict | None = None, **model_overrides
) -> torch.nn.Module:
    """Save an untrained checkpoint of ``preset`` at ``path`` (seed 0, OGB featuriser, one
    regression target ``y``, metric MAE; ``model_overrides``: model config fields), with the
    training-domain record ``domain`` (checkpoint form) where given; returns the model.
    Benchmarks of ``predict`` use it: speed does not depend on the weights."""
    from graphormer_urpe.io.checkpoint import save_checkpoint
    from graphormer_urpe.runtime import make_config
    from graphormer_urpe.training.run import build_model

    torch.manual_seed(0)
    config = make_config(preset, model_overrides=model_overrides or None)
    model = build_model(config.model, "ogb", 1)
    config.model = model.config
    state = {
        "config": config.to_json(),
        "model": model.state_dict(),
        "featurizer": "ogb",
        "target_names": ["y"],
        "metric": "mae",
        "task_type": "regression",
        **({"domain": domain} if domain is not None else {}),
    }
    save_checkpoint(path, state)
    return model


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


class HFGraphormer(NamedTuple):
    """Hugging Face's (deprecated) Graphormer modules. ``collating`` is ``None`` when its Cython
    preprocessing cannot be built (Cython 3, or no compiler), ``collating_error`` saying why;
    the model itself needs no Cython."""

    configuration: ModuleType
    modeling: ModuleType
    collating: ModuleType | None
    collating_error: str | None


def hf_graphormer() -> HFGraphormer | None:
    """Hugging Face's Graphormer (transformers <= 4.57), or ``None`` when not installed."""
    try:
        from transformers.models.deprecated.graphormer import (
            configuration_graphormer,
            modeling_graphormer,
        )
    except Exception:
        return None
    try:  # builds its Cython algorithms on import (pyximport): needs Cython and a C compiler
        import pyximport

        # its algos_graphormer.pyx is Python-2 flavoured (``long``): with Cython 3 it builds only
        # at language level 2. Installed first, this importer is the one its own install() keeps.
        pyximport.install(setup_args={"include_dirs": np.get_include()}, language_level=2)
        from transformers.models.deprecated.graphormer import collating_graphormer

        collating_graphormer.GraphormerDataCollator()  # refuses when Cython is absent
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        error = f"{type(exc).__name__}: {reason} (it needs Cython and a C compiler)"
        return HFGraphormer(configuration_graphormer, modeling_graphormer, None, error)
    return HFGraphormer(configuration_graphormer, modeling_graphormer, collating_graphormer, None)


def hf_peer(need_collator: bool) -> HFGraphormer:
    """:func:`hf_graphormer` for ``--peer hf``; exits with a one-line reason when it is missing
    (or, with ``need_collator``, when its Cython collator cannot be built)."""
    hf = hf_graphormer()
    if hf is None:
        raise SystemExit(
            "--peer hf needs transformers<=4.57 installed (and Cython for its collator)"
        )
    if need_collator and hf.collating is None:
        raise SystemExit(f"--peer hf: Hugging Face's collator is unavailable: {hf.collating_error}")
    return hf
