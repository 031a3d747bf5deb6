"""Benchmark the URPE attention product: fused Triton kernels against the unfused paths.

Times forward + backward (gradients of ``q``, ``k``, ``v``, the bias and, where there is one,
the URPE table) of one attention product at Graphormer sizes:

* ``fused``: :func:`graphormer_urpe.attention.fused.launch.fused_urpe_attention` (``C`` read
  from the ``[R, H]`` table through the ``[B, N, N]`` index, dropout drawn in the kernels);
* ``attention_core``: :class:`graphormer_urpe.attention.core._AttentionCore`, with ``C`` gathered
  from the table into ``[B, H, N, N]`` and a dropout mask built by
  :func:`graphormer_urpe.attention.dropout.dropout_mask` (both inside the timed step);
* ``sdpa``: :func:`torch.nn.functional.scaled_dot_product_attention` with the bias and no
  ``C`` (what plain Graphormer attention runs on a GPU), for scale.

Inputs: a padded batch whose sequences hold a random number of real nodes (keys beyond them are
``-inf`` in the bias; the first key, the graph token, is always real). Prints JSON: median and
all milliseconds per forward + backward (CUDA events on a GPU, wall time on the CPU) and, on a
GPU, the peak memory allocated by one step above its start. Run::

    python scripts/bench_attention.py                      # CUDA, bf16, both presets
    python scripts/bench_attention.py --precision fp32 --dropout 0.0
    TRITON_INTERPRET=1 python scripts/bench_attention.py --smoke   # CPU, tiny, interpreter

Without CUDA the fused kernels run only under Triton's interpreter (``TRITON_INTERPRET=1``),
which is for correctness, not speed; otherwise they are reported as skipped.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _bench import report

from graphormer_urpe.attention.attn_scale import IndexedAttnScale
from graphormer_urpe.attention.core import _AttentionCore
from graphormer_urpe.attention.dropout import dropout_mask
from graphormer_urpe.attention.fused.kernels import fused_available, interpreting
from graphormer_urpe.attention.fused.launch import block_sizes, fused_urpe_attention

MIB = 2**20

# batch, heads, padded nodes (graph token included), head dim, rows of the URPE table
PRESETS = {
    "zinc-slim": {"batch": 256, "heads": 8, "nodes": 40, "head_dim": 10, "table_rows": 40},
    "pcqm4mv2-base": {"batch": 256, "heads": 32, "nodes": 56, "head_dim": 24, "table_rows": 64},
}
SMOKE = {"batch": 2, "heads": 2, "nodes": 12, "head_dim": 10, "table_rows": 8}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(size: dict, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """Leaf tensors of one product: ``q, k, v`` ``[B, H, N, d]`` (``dtype``), ``bias`` ``[B, H,
    N, N]`` float32 with ``-inf`` on padded keys, ``table`` ``[R, H]`` float32, ``index``
    ``[B, N, N]`` int16, and the real node counts."""
    g = torch.Generator().manual_seed(seed)
    b, h, n, d, r = (size[k] for k in ("batch", "heads", "nodes", "head_dim", "table_rows"))
    real = torch.randint(max(1, n // 3), n + 1, (b,), generator=g)
    pad = torch.arange(n)[None, :] >= real[:, None]  # [B, N], True on padding
    bias = torch.randn(b, h, n, n, generator=g).masked_fill(pad[:, None, None, :], float("-inf"))
    tensors = {
        "q": torch.randn(b, h, n, d, generator=g).to(dtype),
        "k": torch.randn(b, h, n, d, generator=g).to(dtype),
        "v": torch.randn(b, h, n, d, generator=g).to(dtype),
        "bias": bias,
        "table": torch.rand(r, h, generator=g) + 0.5,
        "index": torch.randint(0, r, (b, n, n), generator=g).to(torch.int16),
    }
    out = {k: t.to(device) for k, t in tensors.items()}
    for k in ("q", "k", "v", "bias", "table"):
        out[k].requires_grad_(True)
    out["real_fraction"] = float(real.sum()) / (b * n)
    return out


def step_fused(x: dict, p: float) -> Callable[[], None]:
    grad = torch.randn_like(x["q"])

    def run() -> None:
        scale = IndexedAttnScale(x["table"], x["index"])
        out = fused_urpe_attention(x["q"], x["k"], x["v"], x["bias"], scale, dropout_p=p)
        out.backward(grad)

    return run


def step_core(x: dict, p: float) -> Callable[[], None]:
    grad = torch.randn_like(x["q"])
    b, h, n, _ = x["q"].shape

    def run() -> None:
        scale = x["table"][x["index"].long()].permute(0, 3, 1, 2)  # [B, H, N, N]
        mask = dropout_mask((b, h, n, n), p, x["q"].device, torch.float32) if p else None
        out = _AttentionCore.apply(x["q"], x["k"], x["v"], x["bias"], scale, mask)
        out.backward(grad)

    return run


def step_sdpa(x: dict, p: float) -> Callable[[], None]:
    grad = torch.randn_like(x["q"])

    def run() -> None:
        out = F.scaled_dot_product_attention(
            x["q"], x["k"], x["v"], attn_mask=x["bias"].to(x["q"].dtype), dropout_p=p
        )
        out.backward(grad)

    return run


def _zero_grads(x: dict) -> None:
    for k in ("q", "k", "v", "bias", "table"):
        x[k].grad = None


def time_ms(run: Callable[[], None], x: dict, repeats: int, warmup: int, device) -> list[float]:
    """Milliseconds of ``repeats`` calls of ``run`` after ``warmup`` untimed ones."""
    out = []
    for i in range(warmup + repeats):
        _zero_grads(x)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize(device)
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            run()
            ms = (time.perf_counter() - t0) * 1000.0
        if i >= warmup:
            out.append(ms)
    return out


def peak_mib(run: Callable[[], None], x: dict, device: torch.device) -> dict:
    """Peak memory allocated during one step above its start (CUDA only)."""
    if device.type != "cuda":
        return {}
    _zero_grads(x)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    run()
    torch.cuda.synchronize(device)
    return {"peak_step_mib": round((torch.cuda.max_memory_allocated(device) - start) / MIB, 1)}


def measure(name: str, x: dict, p: float, a, device: torch.device) -> dict:
    step = {"fused": step_fused, "attention_core": step_core, "sdpa": step_sdpa}[name](x, p)
    times = time_ms(step, x, a.repeats, a.warmup, device)
    return {
        "ms_median": round(statistics.median(times), 4),
        "ms": [round(t, 4) for t in times],
        **peak_mib(step, x, device),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    p.add_argument("--batch-size", type=int, default=None, help="override the presets' batch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=list(DTYPES), default=None, help="default bf16 on CUDA")
    p.add_argument("--dropout", type=float, default=0.1, help="attention dropout probability")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    a = p.parse_args()
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    precision = a.precision or ("bf16" if device.type == "cuda" else "fp32")
    dtype = DTYPES[precision]
    sizes = {name: dict(PRESETS[name]) for name in a.presets}
    if a.smoke:
        sizes = {"smoke": dict(SMOKE)}
        a.repeats, a.warmup = 2, 1
    if a.batch_size:
        for size in sizes.values():
            size["batch"] = a.batch_size
    results: dict = {}
    for name, size in sizes.items():
        x = make_inputs(size, dtype, device)
        entry: dict = {
            "size": size,
            "real_node_fraction": round(x["real_fraction"], 3),
            "blocks": block_sizes(size["nodes"], size["nodes"], size["head_dim"]),
        }
        if fused_available(device):
            entry["fused"] = measure("fused", x, a.dropout, a, device)
        else:
            entry["fused"] = {"skipped": "needs Triton and CUDA, or TRITON_INTERPRET=1 on the CPU"}
        entry["attention_core"] = measure("attention_core", x, a.dropout, a, device)
        entry["sdpa"] = measure("sdpa", x, a.dropout, a, device)
        if "ms_median" in entry["fused"]:
            fused = entry["fused"]["ms_median"]
            entry["speedup_vs_attention_core"] = round(
                entry["attention_core"]["ms_median"] / fused, 2
            )
            entry["speedup_vs_sdpa"] = round(entry["sdpa"]["ms_median"] / fused, 2)
        results[name] = entry
        del x
        if device.type == "cuda":
            torch.cuda.empty_cache()
    config = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "precision": precision,
        "fused_mode": (
            None
            if not fused_available(device)
            else "interpreter (correctness only, times not meaningful)"
            if interpreting()
            else "compiled"
        ),
        "dropout": a.dropout,
        "repeats": a.repeats,
        "warmup": a.warmup,
        "timing": "CUDA events per forward + backward" if device.type == "cuda" else "wall time",
        "step": "forward + backward: gradients of q, k, v, bias (and the URPE table)",
        "sdpa_note": "scaled_dot_product_attention with the bias, without C (no URPE)",
    }
    report("attention", config, results)


if __name__ == "__main__":
    main()
