"""Benchmark per-graph Graphormer features (shortest paths + multi-hop path bond features).

Prints JSON: graphs/s (median of repeats) for this library and, with ``--peer hf``, for
Hugging Face's Cython ``preprocess_item`` on the same molecules, plus whether the outputs are
identical. Run::

    python scripts/bench_preprocess.py --molecules 2000 --threads 1 [--peer hf]
    python scripts/bench_preprocess.py --smoke
"""

from __future__ import annotations

import numpy as np
from _bench import hf_graphormer, median_rate, report, setup

from graphormer_urpe.graph.features import graph_structure


def main() -> None:
    a, items, source = setup(__doc__, 40)
    mh = a.multi_hop_max_dist

    def ours() -> int:
        for it in items:
            graph_structure(it["edge_index"], it["num_nodes"], it["edge_feat"], mh)
        return len(items)

    results: dict = {}
    rate, rates = median_rate(ours, a.repeats)
    results["ours_per_graph"] = {"graphs_per_s": round(rate, 1), "all": [round(r) for r in rates]}

    if a.peer == "hf":
        hf = hf_graphormer()
        if hf is None:
            raise SystemExit("--peer hf needs transformers<=4.57 and cython<3 installed")
        collating = hf[0]

        def peer() -> int:
            for it in items:
                collating.preprocess_item(dict(it))
            return len(items)

        rate, rates = median_rate(peer, a.repeats)
        results["hf_cython"] = {"graphs_per_s": round(rate, 1), "all": [round(r) for r in rates]}
        identical = True
        for it in items:
            ref = collating.preprocess_item(dict(it))
            s = graph_structure(it["edge_index"], it["num_nodes"], it["edge_feat"], None)
            # the peer stores everything shifted by one for padding
            identical &= bool(np.array_equal(ref["spatial_pos"] - 1, s.spatial_pos))
            identical &= bool(np.array_equal(ref["input_edges"] - 1, s.edge_input))
        results["identical_to_peer"] = identical
        results["speedup"] = round(
            results["ours_per_graph"]["graphs_per_s"] / results["hf_cython"]["graphs_per_s"], 2
        )
    nodes = [it["num_nodes"] for it in items]
    report(
        "preprocess",
        {
            "molecules": len(items),
            "source": source,
            "features": "ogb",
            "mean_atoms": round(float(np.mean(nodes)), 1),
            "multi_hop_max_dist": mh,
            "repeats": a.repeats,
        },
        results,
    )


if __name__ == "__main__":
    main()
