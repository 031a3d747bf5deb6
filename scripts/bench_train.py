"""Benchmark training steps (forward + backward + AdamW step) on real molecules.

Prints JSON: graphs/s (median over steps, after warm-up) and peak memory for this library's
Graphormer and URPE-Graphormer and, with ``--peer hf``, Hugging Face's Graphormer of the same
size on the same pre-collated batches. Run::

    python scripts/bench_train.py --preset zinc-slim --batch-size 64 --threads 2 --peer hf
    python scripts/bench_train.py --preset pcqm4mv2-base --batch-size 16 --peer hf
    python scripts/bench_train.py --device cuda --precision bf16 --preset pcqm4mv2-base \
        --batch-size 256
    python scripts/bench_train.py --smoke
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _bench import hf_graphormer, molecules, ogb_items, pyg_graphs, report

from graphormer_urpe import Graphormer, collate, get_preset
from graphormer_urpe.graph.model import fit_tables
from graphormer_urpe.training import Precision


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step, batches, steps: int, warmup: int, device: torch.device) -> list[float]:
    """Seconds per step for ``steps`` steps after ``warmup`` untimed ones."""
    out = []
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        _sync(device)
        start = time.perf_counter()
        step(batch)
        _sync(device)
        if i >= warmup:
            out.append(time.perf_counter() - start)
    return out


def measure(model, loss_fn, batches, a, precision: Precision, device: torch.device) -> dict:
    """Median graphs/s of AdamW training steps of ``model`` on ``batches`` (and peak memory)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch) -> None:
        opt.zero_grad(set_to_none=True)
        with precision.autocast():
            loss = loss_fn(model, batch)
        precision.scaler.scale(loss).backward()
        precision.scaler.step(opt)
        precision.scaler.update()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    med = statistics.median(time_steps(step, batches, a.steps, a.warmup, device))
    entry = {
        "graphs_per_s": round(a.batch_size / med, 1),
        "step_ms": round(1000 * med, 1),
        "parameters": sum(q.numel() for q in model.parameters()),
    }
    if device.type == "cuda":
        entry["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return entry


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="zinc-slim", help="zinc-slim or pcqm4mv2-base size")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--molecules", type=int, default=2000)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--attention", nargs="+", default=["graphormer", "urpe"])
    p.add_argument("--peer", choices=["hf"], default=None)
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.steps, a.warmup, a.batch_size = 16, 1, 1, 8
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    precision = Precision(a.precision, device)
    smiles, source = molecules(a.molecules)
    items = ogb_items(smiles)
    cfg = fit_tables(get_preset(a.preset), "ogb")
    if a.smoke:
        cfg = fit_tables(get_preset(a.preset, num_layers=1), "ogb")
    mh = cfg.multi_hop_max_dist
    graphs = pyg_graphs(items, mh)
    bs = a.batch_size
    batches = [
        collate(graphs[i : i + bs], mh).to(device) for i in range(0, len(graphs) - bs + 1, bs)
    ]
    results: dict = {}
    for attention in a.attention:
        torch.manual_seed(0)
        model = Graphormer(cfg, attention=attention).to(device).train()
        results[f"ours_{attention}"] = measure(
            model, lambda m, b: (m(b).float() - b.y).abs().mean(), batches, a, precision, device
        )
        del model

    if a.peer == "hf":
        hf = hf_graphormer()
        if hf is None:
            raise SystemExit("--peer hf needs transformers<=4.57 and cython<3 installed")
        collating, configuration, modeling = hf
        hcfg = configuration.GraphormerConfig(
            num_classes=1,
            num_atoms=512 * 9,
            num_edges=512 * 3,
            num_in_degree=512,
            num_out_degree=512,
            num_spatial=512,
            num_edge_dis=128,
            multi_hop_max_dist=mh,
            spatial_pos_max=1024,
            num_hidden_layers=cfg.num_layers,
            embedding_dim=cfg.hidden_dim,
            ffn_embedding_dim=cfg.ffn_dim,
            num_attention_heads=cfg.num_heads,
            dropout=cfg.dropout,
            attention_dropout=cfg.attention_dropout,
            activation_dropout=cfg.activation_dropout,
            pre_layernorm=True,
        )
        torch.manual_seed(0)
        model = modeling.GraphormerForGraphClassification(hcfg).to(device).train()
        collator = collating.GraphormerDataCollator(spatial_pos_max=1024)
        pre = [collating.preprocess_item(dict(it)) for it in items]
        hb = []
        for i in range(0, len(pre) - bs + 1, bs):
            c = collator([dict(x) for x in pre[i : i + bs]])
            c["labels"] = torch.randn(bs, 1)
            hb.append({k: v.to(device) for k, v in c.items()})

        entry = measure(model, lambda m, b: m(**b).loss, hb, a, precision, device)
        results["hf"] = entry
        for attention in a.attention:
            results[f"speedup_{attention}"] = round(
                results[f"ours_{attention}"]["graphs_per_s"] / entry["graphs_per_s"], 2
            )
    report(
        "train",
        {
            "preset": a.preset,
            "layers": cfg.num_layers,
            "hidden": cfg.hidden_dim,
            "heads": cfg.num_heads,
            "batch_size": bs,
            "steps": a.steps,
            "warmup": a.warmup,
            "device": str(device),
            "precision": precision.kind,
            "molecules": len(graphs),
            "source": source,
        },
        results,
    )


if __name__ == "__main__":
    main()
