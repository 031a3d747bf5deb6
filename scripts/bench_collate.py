"""Benchmark collation of pre-processed graphs into dense Graphormer batches.

Prints JSON: graphs/s (median of repeats) collating batches of ``--batch-size`` graphs whose
features were computed beforehand, for this library and, with ``--peer hf``, for Hugging
Face's ``GraphormerDataCollator`` on the same molecules. Run::

    python scripts/bench_collate.py --molecules 2000 --batch-size 64 --threads 1 [--peer hf]
    python scripts/bench_collate.py --pad-to-multiple 8
    python scripts/bench_collate.py --smoke
    python scripts/bench_collate.py --disconnected --peer hf   # salts and mixtures alone

Connected molecules only unless ``--disconnected``; the peer is skipped with a message when its
padded tensors are estimated above ``--peer-max-gib``.
"""

from __future__ import annotations

from _bench import (
    hf_peer,
    median_rate,
    peer_skipped,
    pyg_graphs,
    report,
    setup,
)

from graphormer_urpe import collate


def main() -> None:
    a, items, source = setup(
        __doc__,
        64,
        **{
            "--batch-size": dict(type=int, default=64),
            "--pad-to-multiple": dict(type=int, default=1),
        },
    )
    mh = a.multi_hop_max_dist
    graphs = pyg_graphs(items, mh)
    bs = a.batch_size
    chunks = [graphs[i : i + bs] for i in range(0, len(graphs), bs)]

    def ours() -> int:
        for c in chunks:
            collate(c, multi_hop_max_dist=mh, pad_to_multiple=a.pad_to_multiple)
        return len(graphs)

    results: dict = {}
    rate, rates = median_rate(ours, a.repeats)
    results["ours"] = {"graphs_per_s": round(rate, 1), "all": [round(r) for r in rates]}
    skipped = peer_skipped(a, items, bs)
    if skipped:
        results["hf"] = skipped
    elif a.peer == "hf":
        collating = hf_peer(need_collator=True).collating
        pre = [collating.preprocess_item(dict(it)) for it in items]
        collator = collating.GraphormerDataCollator(spatial_pos_max=1024)
        collator.multi_hop_max_dist = mh  # the peer's own default is 5 as well
        peer_chunks = [pre[i : i + bs] for i in range(0, len(pre), bs)]

        def peer() -> int:
            for c in peer_chunks:
                collator([dict(x) for x in c])
            return len(pre)

        rate, rates = median_rate(peer, a.repeats)
        results["hf"] = {"graphs_per_s": round(rate, 1), "all": [round(r) for r in rates]}
        results["speedup"] = round(results["ours"]["graphs_per_s"] / rate, 2)
    report(
        "collate",
        {
            "molecules": len(graphs),
            "source": source,
            **a.selection,
            "batch_size": bs,
            "multi_hop_max_dist": mh,
            "pad_to_multiple": a.pad_to_multiple,
            "repeats": a.repeats,
        },
        results,
    )


if __name__ == "__main__":
    main()
