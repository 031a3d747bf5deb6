"""Benchmark training steps (forward + backward + AdamW step) on real molecules.

Prints JSON: graphs/s (median over steps, after warm-up) and peak memory for this library's
Graphormer and URPE-Graphormer and, with ``--peer hf``, Hugging Face's Graphormer of the same
size on the same pre-collated batches. Run::

    python scripts/bench_train.py --preset zinc-slim --batch-size 64 --threads 2 --peer hf
    python scripts/bench_train.py --preset pcqm4mv2-base --batch-size 16 --peer hf
    python scripts/bench_train.py --preset pcqm4mv2-base --batch-size 256 --precision bf16 \
        --steps 1 --warmup 1 --molecules 600
    python scripts/bench_train.py --device cuda --precision bf16 --preset pcqm4mv2-base \
        --batch-size 256 --pad-to-multiple 8
    python scripts/bench_train.py --compile
    python scripts/bench_train.py --device cuda --precision bf16 --modes eager captured fused
    python scripts/bench_train.py --smoke
    python scripts/bench_train.py --disconnected --peer hf --peer-max-gib 4  # salts alone

Modes (``--modes``, ours only): ``eager`` runs every step's operators from Python on batches
sized to their graphs (``--pad-to-multiple``); ``captured`` collates the same molecules into
static shapes and replays the whole step (forward, loss, backward, AdamW) from a CUDA graph per
shape, as ``graphormer-urpe train`` does on one GPU (on the CPU a stand-in replays it by calling
the step again, which only checks the path); ``fused`` is ``captured`` with the fused attention
kernel. Captured modes warm up and capture every batch shape before timing.

Connected molecules only unless ``--disconnected``; the peer is skipped with a message when its
padded tensors are estimated above ``--peer-max-gib`` (a salt pads them to 510 hops).

FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` counts the matrix products (linear layers,
batched matmuls, fused attention) of one forward + backward of each model on the first batch:
the FLOPs each implementation executes, padding included. Model FLOP utilisation (``mfu``) is
that count times steps/s over ``--peak-flops`` (the device's dense peak for the precision,
e.g. 989.4e12 for an H100 SXM in bf16); ``mfu_model`` uses our Graphormer's count (real
tokens only, the useful work) for every model, so that it compares throughput on equal work.

Memory: on a GPU, ``torch.cuda.max_memory_allocated``. On the CPU (no allocator statistics),
one extra step per model runs under ``torch.profiler`` with ``profile_memory=True``; the
allocator's alloc/free events give the peak of tensor bytes allocated during the step above
its start (activations, gradients, temporaries). Parameters and optimizer state live across
steps and are counted separately; their sum with the step's peak is the CPU proxy of a GPU's
peak allocated memory (allocator caching and fragmentation excluded).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch
from _bench import (
    add_molecule_flags,
    hf_peer,
    molecules,
    ogb_items,
    peer_skipped,
    pyg_graphs,
    report,
)
from torch.utils.flop_counter import FlopCounterMode

from graphormer_urpe import Graphormer, collate, get_preset
from graphormer_urpe.attention.kernel_choice import attention_kernel
from graphormer_urpe.graph.model import fit_tables
from graphormer_urpe.graph.published_weights import config_to_hf, hf_inputs
from graphormer_urpe.graph.static_shapes import StaticShapes
from graphormer_urpe.runtime import Precision
from graphormer_urpe.runtime.capture import CapturedStep, EagerGraphs, default_backend
from graphormer_urpe.training.run import StepTotals, make_optimizer, step_body

MIB = 2**20

MEMORY_NOTE = {
    "cpu": (
        "peak_step_mib: peak of tensor bytes allocated during one training step (zero_grad, "
        "forward, backward, AdamW) above the step's start, from torch.profiler allocator "
        "events (profile_memory=True); persistent_mib: parameters + AdamW state, alive "
        "between steps; peak_total_mib = persistent_mib + peak_step_mib, a CPU proxy of a "
        "GPU's peak allocated memory (no allocator caching or fragmentation)"
    ),
    "cuda": "torch.cuda.max_memory_allocated over one step; peak_step_mib above its start",
}


FLOPS_NOTE = (
    "flops_per_step: matrix-product FLOPs of one forward + backward counted by "
    "torch.utils.flop_counter.FlopCounterMode (executed, padding included); mfu = flops_per_step "
    "x steps/s / peak_flops; mfu_model uses our Graphormer's count (real tokens) for every model"
)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step, batches, steps: int, warmup: int, device: torch.device) -> list[float]:
    """Seconds per step for ``warmup + steps`` steps (the first ``warmup`` are untimed)."""
    out = []
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        _sync(device)
        start = time.perf_counter()
        step(batch)
        _sync(device)
        out.append(time.perf_counter() - start)
    return out


def tensor_mib(tensors) -> float:
    return round(sum(t.numel() * t.element_size() for t in tensors) / MIB, 1)


def step_memory(step: Callable, batch, device: torch.device) -> dict:
    """Peak memory of one training step (see the module docstring for what it counts)."""
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        step(batch)
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak_step_mib": round((peak - start) / MIB, 1), "peak_gpu_mib": round(peak / MIB)}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(batch)
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    return {"peak_step_mib": round(peak / MIB, 1)}


def count_flops(model, loss_fn, batch, precision: Precision) -> int:
    """Matrix-product FLOPs of one forward + backward of ``model`` on ``batch`` (eager)."""
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        with precision.autocast():
            loss = loss_fn(model, batch)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


# operators that only re-describe a tensor's memory: no kernel on any device
VIEW_OPS = frozenset(
    "alias as_strided chunk detach diagonal expand expand_as flatten lift_fresh movedim narrow "
    "permute _reshape_alias reshape select slice split split_with_sizes squeeze t transpose "
    "unbind unflatten unsqueeze _unsafe_view view view_as".split()
)

OPS_NOTE = (
    "ops_per_step: ATen operators dispatched in one training step (zero_grad, forward, "
    "backward, AdamW), views excluded: a device-independent count of the launches a step "
    "makes. On CUDA, gpu_activity: kernels (and copies) of one profiled step, the GPU's busy "
    "time (union of their intervals) and busy_fraction = busy time / median step time; well "
    "below 1 means the step waits on the host (launch-bound), not on the GPU"
)


def count_ops(step: Callable, batch) -> int:
    """Non-view ATen operators dispatched by one call of ``step(batch)``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ not in VIEW_OPS:
                Counter.ops += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        step(batch)
    return Counter.ops


def covered_ns(spans: list[tuple[int, int]]) -> int:
    """Length of the union of ``(start, end)`` intervals sorted by start."""
    busy, end = 0, None
    for lo, hi in spans:
        if end is None or lo >= end:
            busy += hi - lo
            end = hi
        elif hi > end:
            busy += hi - end
            end = hi
    return busy


def top_kernels(events: list[tuple[str, int, int]], k: int = 8) -> list[dict]:
    """The ``k`` device events with the most summed time, from ``(name, start_ns, end_ns)``:
    ``name`` (its first 100 characters), summed ``ms`` and ``calls``, most time first."""
    total: dict[str, list[int]] = {}
    for name, lo, hi in events:
        entry = total.setdefault(name[:100], [0, 0])
        entry[0] += hi - lo
        entry[1] += 1
    ranked = sorted(total.items(), key=lambda kv: (-kv[1][0], kv[0]))[:k]
    return [{"name": n, "ms": round(ns / 1e6, 3), "calls": c} for n, (ns, c) in ranked]


def gpu_activity(step: Callable, batch, device: torch.device, step_s: float) -> dict:
    """Device activity of one profiled ``step(batch)`` on CUDA: kernel count, busy time (the
    union of the device events' intervals), its fraction of the median step ``step_s``, and
    the kernels that take the most time (:func:`top_kernels`)."""
    from torch.profiler import ProfilerActivity, profile

    _sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(batch)
        _sync(device)
    events = [
        (e.name(), e.start_ns(), e.end_ns())
        for e in prof.profiler.kineto_results.events()
        if e.device_type() == torch.autograd.DeviceType.CUDA and e.end_ns() > e.start_ns()
    ]
    busy = covered_ns(sorted((lo, hi) for _, lo, hi in events))
    return {
        "device_events": len(events),
        "busy_ms": round(busy / 1e6, 2),
        "busy_fraction": round(busy / 1e9 / step_s, 3),
        "top_kernels": top_kernels(events),
    }


def size_config(preset: str, cfg, batch_size: int) -> dict:
    """The benchmarked model's size and batch, for the JSON report."""
    return {
        "preset": preset,
        "layers": cfg.num_layers,
        "hidden": cfg.hidden_dim,
        "heads": cfg.num_heads,
        "batch_size": batch_size,
    }


def captured_step(model, opt, precision: Precision, device: torch.device) -> CapturedStep:
    """``graphormer-urpe train``'s captured step (L1 loss, no clipping, constant rate)."""
    totals = StepTotals(device)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def body(batch, set_to_none: bool, step):
        return step_body(
            model, batch, opt, precision, totals, step, "l1", None, None, set_to_none, set_to_none
        )

    return CapturedStep(opt, sched, body, device, default_backend(device) or EagerGraphs())


def measure(
    model, loss_fn, batches, a, precision: Precision, device: torch.device, mode: str = "eager"
) -> dict:
    """Median graphs/s of AdamW training steps of ``model`` on ``batches``, and memory.

    Every model, the peer's included, gets the optimizer ``graphormer-urpe train`` uses
    (PyTorch's fused AdamW; also the default of Hugging Face's Trainer with torch >= 2.8).
    ``mode`` ``captured``/``fused``: static ``batches`` and :func:`captured_step`.
    """
    opt = make_optimizer(model.parameters(), 1e-4, 0.01)
    run = torch.compile(model, dynamic=True) if a.compile else model
    warmup = a.warmup

    def step(batch) -> None:
        opt.zero_grad(set_to_none=True)
        with precision.autocast():
            loss = loss_fn(run, batch)
        precision.scaler.scale(loss).backward()
        precision.scaler.step(opt)
        precision.scaler.update()

    if mode != "eager":
        stepper = captured_step(model, opt, precision, device)
        count = iter(range(1 << 62))

        def step(batch) -> None:  # noqa: F811 - the captured step replaces the eager one
            stepper(batch, next(count))

        # every shape warmed up and captured before the timed steps
        warmup = max(warmup, (stepper.cycle.warmup + 1) * len(batches))

    times = time_steps(step, batches, a.steps, warmup, device)
    timed = times[warmup:]
    med = statistics.median(timed)
    entry = {
        "graphs_per_s": round(a.batch_size / med, 1),
        "step_ms": round(1000 * med, 1),
        "step_ms_all": [round(1000 * t, 1) for t in timed],
        "parameters": sum(q.numel() for q in model.parameters()),
    }
    if a.compile:
        entry["first_step_s"] = round(times[0], 1)  # includes compilation
    if mode != "eager":
        entry["captured_shapes"] = stepper.cycle.shapes
        entry["capture_failed"] = stepper.cycle.failed
    if not a.no_flops:
        flops = count_flops(model, loss_fn, batches[0], precision)
        entry["flops_per_step"] = flops
        entry["tflops_per_s"] = round(flops / med / 1e12, 2)
        if a.peak_flops:
            entry["mfu"] = round(flops / med / a.peak_flops, 4)
    if not a.no_ops:
        if mode != "eager":  # a replay dispatches nothing: count the step it recorded
            body = stepper.step_fn
            entry["ops_per_step"] = count_ops(
                lambda b: body(b, False, stepper.step_index), batches[0]
            )
            entry["host_calls_per_step"] = 1  # one graph replay
        elif not a.compile:  # a compiled step runs fused kernels, not these operators
            entry["ops_per_step"] = count_ops(step, batches[0])
        if device.type == "cuda":
            try:  # a profiler problem must not cost the figures above
                entry["gpu_activity"] = gpu_activity(step, batches[0], device, med)
            except Exception as exc:
                entry["gpu_activity"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if not a.no_memory:
        mem = step_memory(step, batches[0], device)
        state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
        persistent = tensor_mib(model.parameters()) + tensor_mib(state)
        mem = {"persistent_mib": round(persistent, 1), **mem}
        mem["peak_total_mib"] = round(persistent + mem["peak_step_mib"], 1)
        entry["memory"] = mem
    return entry


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="zinc-slim", help="zinc-slim or pcqm4mv2-base size")
    p.add_argument("--num-layers", type=int, default=None, help="override the preset's layers")
    p.add_argument("--peak-flops", type=float, default=None, help="device peak FLOP/s for MFU")
    p.add_argument("--no-flops", action="store_true", help="skip counting FLOPs")
    p.add_argument(
        "--no-ops", action="store_true", help="skip counting operators (and GPU activity)"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--molecules", type=int, default=2000)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--attention", nargs="+", default=["graphormer", "urpe"])
    p.add_argument("--pad-to-multiple", type=int, default=1, help="collate option (ours)")
    p.add_argument("--compile", action="store_true", help="torch.compile(dynamic=True) models")
    p.add_argument(
        "--modes",
        nargs="+",
        choices=["eager", "captured", "fused"],
        default=["eager"],
        help="how our steps run (see the module docstring; default eager)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory step")
    p.add_argument("--peer", choices=["hf"], default=None)
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    add_molecule_flags(p)
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.steps, a.warmup, a.batch_size = 16, 1, 1, 8
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    precision = Precision(a.precision, device)
    smiles, source, selection = molecules(a.molecules, a.smiles_file, a.disconnected)
    items = ogb_items(smiles)
    layers = 1 if a.smoke else a.num_layers
    cfg = fit_tables(get_preset(a.preset, **({"num_layers": layers} if layers else {})), "ogb")
    mh = cfg.multi_hop_max_dist
    graphs = pyg_graphs(items, mh)
    bs = a.batch_size
    if len(graphs) < bs:
        raise SystemExit(f"--molecules gives {len(graphs)} graphs, fewer than --batch-size {bs}")
    batches = [
        collate(graphs[i : i + bs], mh, pad_to_multiple=a.pad_to_multiple).to(device)
        for i in range(0, len(graphs) - bs + 1, bs)
    ]
    static = [  # only when measured: holding them slows the CPU's eager steps (allocator)
        collate(graphs[i : i + bs], mh, static=StaticShapes(bs, mh)).to(device)
        for i in range(0, len(graphs) - bs + 1, bs)
        if set(a.modes) - {"eager"}
    ]
    real = sum(int(b.num_nodes.sum()) + b.num_graphs for b in batches)
    grid = sum(b.attn_bias.shape[0] * b.attn_bias.shape[1] for b in batches)
    results: dict = {}
    for attention in a.attention:
        for mode in a.modes:
            torch.manual_seed(0)
            model = Graphormer(cfg, attention=attention).to(device).train()
            key = f"ours_{attention}" + ("" if mode == "eager" else f"_{mode}")
            with attention_kernel("fused" if mode == "fused" else "eager"):
                results[key] = measure(
                    model,
                    lambda m, b: (m(b).float() - b.y).abs().mean(),
                    batches if mode == "eager" else static,
                    a,
                    precision,
                    device,
                    mode,
                )
            del model

    skipped = peer_skipped(a, items, bs, keep_batches=True)
    if skipped:
        results["hf"] = skipped
    elif a.peer == "hf":
        hf = hf_peer(need_collator=False)
        # the same architecture in Hugging Face's terms (pre-LN; its transform head and no
        # final LayerNorm only change the cost of the head)
        hcfg = hf.configuration.GraphormerConfig(
            **config_to_hf(replace(cfg, final_norm=False, head="transform"))
        )
        torch.manual_seed(0)
        model = hf.modeling.GraphormerForGraphClassification(hcfg).to(device).train()
        hb = []
        if hf.collating is not None:
            collator = hf.collating.GraphormerDataCollator(spatial_pos_max=1024)
            pre = [hf.collating.preprocess_item(dict(it)) for it in items]
            for i in range(0, len(pre) - bs + 1, bs):
                c = collator([dict(x) for x in pre[i : i + bs]])
                c["labels"] = torch.randn(bs, 1)
                hb.append({k: v.to(device) for k, v in c.items()})
            inputs = "Hugging Face preprocess_item + GraphormerDataCollator"
        else:  # its Cython preprocessing cannot be built here: the same tensors from ours
            plain = [
                collate(graphs[i : i + bs], mh).to(device)
                for i in range(0, len(graphs) - bs + 1, bs)
            ]
            hb = [{**hf_inputs(b), "labels": torch.randn(b.num_graphs, 1)} for b in plain]
            inputs = f"built from our batches (Hugging Face's collator: {hf.collating_error})"

        entry = measure(model, lambda m, b: m(**b).loss, hb, a, precision, device)
        entry["inputs"] = inputs
        results["hf"] = entry
        for attention in a.attention:
            results[f"speedup_{attention}"] = round(
                results[f"ours_{attention}"]["graphs_per_s"] / entry["graphs_per_s"], 2
            )
    useful = results.get("ours_graphormer", {}).get("flops_per_step")
    if useful and a.peak_flops:
        for entry in results.values():
            if isinstance(entry, dict) and "step_ms" in entry:
                rate = 1000.0 / entry["step_ms"]
                entry["mfu_model"] = round(useful * rate / a.peak_flops, 4)
    config = {
        **size_config(a.preset, cfg, bs),
        "steps": a.steps,
        "warmup": a.warmup,
        "device": str(device),
        "precision": precision.kind,
        "compile": a.compile,
        "modes": a.modes,
        "static_shapes": sorted({b.static_shape for b in static}),
        "static_token_fraction": round(
            real / max(1, sum(b.attn_bias.shape[0] * b.attn_bias.shape[1] for b in static)), 3
        ),
        "pad_to_multiple": a.pad_to_multiple,
        "molecules": len(graphs),
        "source": source,
        **selection,
        "real_token_fraction": round(real / grid, 3),
        "peak_flops": a.peak_flops,
        "flops_note": None if a.no_flops else FLOPS_NOTE,
        "ops_note": None if a.no_ops else OPS_NOTE,
    }
    if not a.no_memory:
        config["memory_note"] = MEMORY_NOTE["cuda" if device.type == "cuda" else "cpu"]
    report("train", config, results)


if __name__ == "__main__":
    main()
