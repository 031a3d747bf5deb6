"""The work of one training step's forward + backward, op by op: the static path against the
eager one.

A captured GPU step runs on static batches
(:class:`~graphormer_urpe.graph.static_shapes.StaticShapes`: a fixed number of graphs, the
attention length and the path hops rounded up to buckets); the eager step runs on batches sized
to their graphs. This script counts, on the same molecules, what each path executes in the
forward and backward of the training loss (L1, as ``bench_train.py``; the AdamW update, the same
for both, is left out):

* ``flops``: the matrix-product FLOPs of every ATen operator (PyTorch's FLOP formulas, those of
  ``torch.utils.flop_counter``: linear layers, batched matmuls), the count ``bench_train.py``
  reports as ``flops_per_step``;
* ``bytes``: the bytes of every operator's tensor inputs and outputs (each read and written
  once: what an unfused kernel moves at least; a gather counts its whole source), views
  excluded;
* ``profiler_flops``: the total of ``torch.profiler`` with ``with_flops=True`` (its formulas
  also count element-wise multiplies and adds), as a cross-check of a second counter.

Counts do not depend on the device: they are the same operators with the same shapes on a GPU
(the fused attention kernels of a GPU aside). Prints JSON: per step (the mean over the
batches), the totals of each path, the ratios static / eager, and the per-operator table. Run::

    python scripts/bench_step_work.py --preset zinc-slim --batch-size 256 --molecules 512
    python scripts/bench_step_work.py --preset pcqm4mv2-base --smiles-file pcqm_smiles.csv
    python scripts/bench_step_work.py --smoke

Eager batches are padded to ``--pad-to-multiple`` (1 on the CPU; ``graphormer-urpe train``
pads to 8 on a GPU when it does not capture): each value given is one eager path.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from _bench import add_molecule_flags, molecules, ogb_items, pyg_graphs, report
from bench_train import VIEW_OPS, size_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from graphormer_urpe import Graphormer, collate, get_preset
from graphormer_urpe.graph.model import fit_tables
from graphormer_urpe.graph.static_shapes import StaticShapes

NOTE = (
    "per training step (mean over the batches), forward + backward of the L1 loss; flops: "
    "matrix-product FLOPs (torch.utils.flop_counter's formulas); bytes: tensor inputs + outputs "
    "of every non-view ATen operator; profiler_flops: torch.profiler(with_flops=True) total"
)


class OpWork(TorchDispatchMode):
    """Calls, FLOPs and bytes of every non-view ATen operator dispatched under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # calls, flops, bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in VIEW_OPS:
            return out
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        entry = self.ops[name]
        entry[0] += 1
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            entry[1] += int(formula(*args, **kwargs, out_val=out))
        entry[2] += sum(t.numel() * t.element_size() for t in tensors)
        return out


def loss_and_backward(model: Graphormer, batch) -> None:
    """The training loss of ``batch``'s real graphs (L1) and its backward."""
    model.zero_grad(set_to_none=True)
    real = batch.num_graphs
    loss = (model(batch)[:real].float() - batch.y[:real]).abs().mean()
    loss.backward()


def profiler_flops(model: Graphormer, batch) -> int:
    """``torch.profiler``'s FLOP total of one forward + backward."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        loss_and_backward(model, batch)
    return int(sum(e.flops for e in prof.key_averages()))


def step_work(model: Graphormer, batches: list, profile: bool) -> dict:
    """Per-step means over ``batches``: totals and the per-operator table."""
    counter = OpWork()
    with counter:
        for batch in batches:
            loss_and_backward(model, batch)
    k = len(batches)
    ops = {
        name: {"calls": c // k, "flops": f // k, "bytes": b // k}
        for name, (c, f, b) in counter.ops.items()
    }
    out = {
        "flops": sum(o["flops"] for o in ops.values()),
        "bytes": sum(o["bytes"] for o in ops.values()),
        "calls": sum(o["calls"] for o in ops.values()),
    }
    if profile:
        out["profiler_flops"] = sum(profiler_flops(model, b) for b in batches) // k
    out["ops"] = ops
    return out


def op_table(paths: dict[str, dict], top: int) -> list[dict]:
    """The ``top`` operators with the most bytes in any path, each path's figures side by side."""
    names = {n for p in paths.values() for n in p["ops"]}
    zero = {"calls": 0, "flops": 0, "bytes": 0}
    rows = [{"op": n, **{k: p["ops"].get(n, zero) for k, p in paths.items()}} for n in names]
    rows.sort(key=lambda r: (-max(r[k]["bytes"] for k in paths), r["op"]))
    return rows[:top]


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="zinc-slim", help="zinc-slim or pcqm4mv2-base size")
    p.add_argument("--attention", nargs="+", default=["graphormer", "urpe"])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--molecules", type=int, default=512)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--pad-to-multiple", type=int, nargs="+", default=[1, 8], help="eager paths' padding"
    )
    p.add_argument("--top", type=int, default=25, help="operators listed in the table")
    p.add_argument("--no-profiler", action="store_true", help="skip the profiler's cross-check")
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    add_molecule_flags(p)
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.batch_size = 16, 8
    if a.threads:
        torch.set_num_threads(a.threads)
    smiles, source, selection = molecules(a.molecules, a.smiles_file, a.disconnected)
    cfg = get_preset(a.preset, **({"num_layers": 1} if a.smoke else {}))
    cfg = fit_tables(cfg, "ogb")
    mh, bs = cfg.multi_hop_max_dist, a.batch_size
    graphs = pyg_graphs(ogb_items(smiles), mh)
    if len(graphs) < bs:
        raise SystemExit(f"--molecules gives {len(graphs)} graphs, fewer than --batch-size {bs}")
    parts = [graphs[i : i + bs] for i in range(0, len(graphs) - bs + 1, bs)]
    inputs = {
        f"eager_pad{m}": [collate(g, mh, pad_to_multiple=m) for g in parts]
        for m in a.pad_to_multiple
    }
    inputs["static"] = [collate(g, mh, static=StaticShapes(bs, mh)) for g in parts]
    results: dict = {}
    for attention in a.attention:
        torch.manual_seed(0)
        model = Graphormer(cfg, attention=attention).train()
        paths = {k: step_work(model, b, not a.no_profiler) for k, b in inputs.items()}
        ratios = {
            k: {m: round(paths["static"][m] / paths[k][m], 3) for m in ("flops", "bytes")}
            for k in paths
            if k != "static"
        }
        results[attention] = {
            "totals": {k: {m: v for m, v in p.items() if m != "ops"} for k, p in paths.items()},
            "static_over_eager": ratios,
            "ops": op_table(paths, a.top),
        }
    real = sum(int(b.num_nodes.sum()) + b.num_graphs for b in inputs["static"])
    config = {
        **size_config(a.preset, cfg, bs),
        "batches": len(parts),
        "molecules": len(graphs),
        "source": source,
        **selection,
        "eager_shapes": {
            k: sorted({(b.x.shape[0], b.x.shape[1], b.path_hops) for b in v})
            for k, v in inputs.items()
            if k != "static"
        },
        "static_shapes": sorted({b.static_shape for b in inputs["static"]}),
        "shapes_note": "eager (B, n, M), static (B, n, M, T): graphs, nodes (attention length "
        "n + 1), path hops, tokens of the per-token operations",
        "real_tokens_per_step": real // len(parts),
        "note": NOTE,
    }
    report("step_work", config, results)


if __name__ == "__main__":
    main()
