"""Benchmark Graphormer's structural features (shortest paths + multi-hop path bond features).

Prints JSON: graphs/s (median of repeats, the same molecules each time) for

* ``ours_per_graph``: ``graph_structure`` called graph by graph (numpy arrays in and out);
* ``ours_batched``: ``batched_graph_structure`` on all molecules at once (the same arrays in,
  every graph's features out);
* ``ours_per_graph_pyg`` / ``ours_batched_pyg``: the same two paths on PyG ``Data`` objects,
  ``GraphormerFeatures`` graph by graph against ``add_graphormer_features`` on the list (what
  dataset processing runs);
* ``ours_batched_in_calls``: ``batched_graph_structure`` on consecutive calls of 16, 48, 256
  and 1,000 molecules (a server featurises a few dozen at a time), with nearby sizes sharing
  a padded Floyd–Warshall stack (``stacks``) and with one stack per size (``one_per_size``,
  the layout before stacks were shared), alternated in each repeat;

whether the batched outputs equal the per-graph ones, and, with ``--peer hf``, Hugging Face's
Cython ``preprocess_item`` on the same molecules and whether both of our paths reproduce it
exactly. Run::

    python scripts/bench_preprocess.py --molecules 2000 --threads 1 [--peer hf]
    python scripts/bench_preprocess.py --smoke

Connected molecules only unless ``--disconnected``; the peer is skipped with a message when its
padded tensors are estimated above ``--peer-max-gib``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from _bench import hf_peer, median_rate, peer_skipped, report, setup
from torch_geometric.data import Data

from graphormer_urpe.graph import batched_structure
from graphormer_urpe.graph.add_features import add_graphormer_features
from graphormer_urpe.graph.batched_structure import BatchedStructures, batched_graph_structure
from graphormer_urpe.graph.structure import graph_structure
from graphormer_urpe.graph.transform import GraphormerFeatures


def _batched(items: list[dict], multi_hop_max_dist: int | None) -> BatchedStructures:
    """Features of all ``items`` (OGB dicts of numpy arrays) in one batched call."""
    return batched_graph_structure(
        np.array([it["num_nodes"] for it in items]),
        np.concatenate([it["edge_index"] for it in items], axis=1),
        np.array([it["edge_index"].shape[1] for it in items]),
        np.concatenate([it["edge_feat"] for it in items]),
        multi_hop_max_dist,
    )


def _in_calls(items: list[dict], multi_hop_max_dist: int | None, repeats: int) -> dict:
    """Graphs/s of batched calls of a few sizes, shared stacks against one per size."""
    costs = {
        "stacks": (batched_structure.FW_ROUND_COST, batched_structure.FW_STACK_COST),
        "one_per_size": (0, 0),  # padding never pays: every size its own stack
    }
    out: dict = {}
    for size in (16, 48, 256, 1000):
        calls = [items[i : i + size] for i in range(0, len(items), size)]
        rates: dict[str, list[float]] = {name: [] for name in costs}
        for _ in range(repeats):
            for name, (round_cost, stack_cost) in costs.items():
                batched_structure.FW_ROUND_COST = round_cost
                batched_structure.FW_STACK_COST = stack_cost
                start = time.perf_counter()
                for call in calls:
                    _batched(call, multi_hop_max_dist)
                rates[name].append(len(items) / (time.perf_counter() - start))
        batched_structure.FW_ROUND_COST, batched_structure.FW_STACK_COST = costs["stacks"]
        out[str(size)] = {name: round(statistics.median(r), 1) for name, r in rates.items()}
        out[str(size)]["speedup"] = round(
            out[str(size)]["stacks"] / out[str(size)]["one_per_size"], 2
        )
    return out


def _rate(fn, repeats: int) -> dict:
    rate, rates = median_rate(fn, repeats)
    return {"graphs_per_s": round(rate, 1), "all": [round(r) for r in rates]}


def main() -> None:
    a, items, source = setup(__doc__, 40)
    mh = a.multi_hop_max_dist
    graphs = [
        Data(
            x=torch.from_numpy(it["node_feat"]),
            edge_index=torch.from_numpy(it["edge_index"]),
            edge_attr=torch.from_numpy(it["edge_feat"]),
            num_nodes=it["num_nodes"],
        )
        for it in items
    ]
    transform = GraphormerFeatures(mh)

    def per_graph() -> int:
        for it in items:
            graph_structure(it["edge_index"], it["num_nodes"], it["edge_feat"], mh)
        return len(items)

    def batched() -> int:
        return len(_batched(items, mh))

    def per_graph_pyg() -> int:
        for g in graphs:
            transform(g)
        return len(graphs)

    def batched_pyg() -> int:
        return len(add_graphormer_features(graphs, mh))

    results: dict = {
        "ours_per_graph": _rate(per_graph, a.repeats),
        "ours_batched": _rate(batched, a.repeats),
        "ours_per_graph_pyg": _rate(per_graph_pyg, a.repeats),
        "ours_batched_pyg": _rate(batched_pyg, a.repeats),
        "ours_batched_in_calls": _in_calls(items, mh, a.repeats),
    }

    # the batched outputs against the per-graph ones (values, shapes, dtypes)
    s = _batched(items, mh)
    same = True
    for g, it in enumerate(items):
        ref = graph_structure(it["edge_index"], it["num_nodes"], it["edge_feat"], mh)
        got = s.graph(g)
        same &= bool(np.array_equal(got.spatial_pos, ref.spatial_pos))
        same &= got.edge_input.shape == ref.edge_input.shape
        same &= bool(np.array_equal(got.edge_input, ref.edge_input))
        same &= bool(np.array_equal(got.degree, ref.degree))
    for got, want in zip(add_graphormer_features(graphs, mh), map(transform, graphs), strict=True):
        for key in ("spatial_pos", "edge_input", "edge_input_hops", "degree"):
            x, y = got[key], want[key]
            same &= x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))
    results["batched_identical_to_per_graph"] = same

    skipped = peer_skipped(a, items, None)
    if skipped:
        results["hf_cython"] = skipped
    elif a.peer == "hf":
        collating = hf_peer(need_collator=True).collating

        def peer() -> int:
            for it in items:
                collating.preprocess_item(dict(it))
            return len(items)

        results["hf_cython"] = _rate(peer, a.repeats)
        # all hops (no truncation), as the peer stores them, shifted by one for padding
        full = _batched(items, None)
        identical, batched_identical = True, True
        for g, it in enumerate(items):
            ref = collating.preprocess_item(dict(it))
            spatial_pos, edge_input = ref["spatial_pos"] - 1, ref["input_edges"] - 1
            one = graph_structure(it["edge_index"], it["num_nodes"], it["edge_feat"], None)
            identical &= bool(np.array_equal(spatial_pos, one.spatial_pos))
            identical &= bool(np.array_equal(edge_input, one.edge_input))
            many = full.graph(g)
            batched_identical &= bool(np.array_equal(spatial_pos, many.spatial_pos))
            batched_identical &= bool(np.array_equal(edge_input, many.edge_input))
        results["identical_to_peer"] = identical
        results["batched_identical_to_peer"] = batched_identical
        hf_rate = results["hf_cython"]["graphs_per_s"]
        for key, name in (
            ("speedup", "ours_per_graph"),
            ("batched_speedup", "ours_batched"),
            ("batched_pyg_speedup", "ours_batched_pyg"),
        ):
            results[key] = round(results[name]["graphs_per_s"] / hf_rate, 2)
    results["batched_vs_per_graph"] = round(
        results["ours_batched"]["graphs_per_s"] / results["ours_per_graph"]["graphs_per_s"], 2
    )
    nodes = [it["num_nodes"] for it in items]
    report(
        "preprocess",
        {
            "molecules": len(items),
            "source": source,
            **a.selection,
            "features": "ogb",
            "mean_atoms": round(float(np.mean(nodes)), 1),
            "multi_hop_max_dist": mh,
            "repeats": a.repeats,
        },
        results,
    )


if __name__ == "__main__":
    main()
