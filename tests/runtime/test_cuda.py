"""CUDA correctness (``pytest -m cuda``): skipped without a GPU, checked on one.

The slowest tests (``torch.compile``) come last, so that a time limit cuts them first.

Run on a GPU machine by ``tools/device/device_check.py`` (correctness section). The references
are the CPU ones of the other test modules: the float64 attention formula of
``test_attention`` and the CPU model itself. The commands on a GPU are in
``tests/cli/test_cuda_commands.py``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphormer_urpe import Graphormer, URPEAttention, collate, urpe_attention
from graphormer_urpe.attention.core import _AttentionCore
from graphormer_urpe.graph.model import fit_tables
from graphormer_urpe.io.checkpoint import rng_state, set_rng_state
from graphormer_urpe.training.run import (
    Precision,
    StepTotals,
    linear_schedule,
    make_optimizer,
    train_step,
)
from tests.helpers import attention_inputs, graph_zoo, tiny_config
from tests.reference import naive_attention

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CPU = torch.device("cpu")
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# forward / gradient tolerances against the float64 reference, per autocast dtype
TOL = {"fp32": 1e-4, "bf16": 6e-2, "fp16": 2e-2}


@pytest.fixture(autouse=True)
def _exact_float32():
    """No TF32 for float32 matmuls, so that float32 on the GPU is float32."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _autocast(kind: str):
    dtype = DTYPES[kind]
    return torch.autocast("cuda", dtype=dtype, enabled=dtype is not None)


def _masked_inputs(seed: int):
    """``test_attention``'s inputs, with a fully masked query row and a fully padded graph."""
    q, k, v, bias, scale, kpm = attention_inputs(seed)
    bias = bias.clone()
    bias[:, :, 2, :] = float("-inf")
    kpm = kpm.clone()
    kpm[2] = True
    return q, k, v, bias, scale, kpm


def _grads(fn, *leaves):
    leaves = [t.detach().clone().requires_grad_(True) for t in leaves]
    out = fn(*leaves)
    w = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    (out.double() * w.to(out.device)).sum().backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("kind", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("with_scale", [False, True])
def test_attention_forward_backward_against_float64_cpu(kind, with_scale):
    q, k, v, bias, scale, kpm = _masked_inputs(11)
    s = scale if with_scale else None
    ref, ref_grads = _grads(  # float64 leaves: float64 reference gradients too
        lambda q, k, v: naive_attention(q, k, v, bias, s, kpm), q.double(), k.double(), v.double()
    )
    dev = torch.device("cuda")

    def run(q, k, v):
        with _autocast(kind):
            return urpe_attention(
                q,
                k,
                v,
                attn_bias=bias.to(dev),
                attn_scale=None if s is None else s.to(dev),
                key_padding_mask=kpm.to(dev),
            )

    out, grads = _grads(run, q.to(dev), k.to(dev), v.to(dev))
    assert torch.isfinite(out).all()
    assert (out[:, :, 2] == 0).all() and (out[2] == 0).all()  # fully masked rows are zero
    tol = TOL[kind]
    torch.testing.assert_close(out.double().cpu(), ref, atol=tol, rtol=tol)
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double().cpu(), r, atol=3 * tol, rtol=3 * tol)


@pytest.mark.parametrize("kind", ["fp32", "bf16"])
def test_fused_sdpa_path_equals_the_core_path(kind):
    """Without C the GPU takes PyTorch's fused attention; with C = 1 the URPE core."""
    dev = torch.device("cuda")
    q, k, v, bias, _, kpm = (t.to(dev) for t in _masked_inputs(12))
    ones = torch.ones(1, 1, 1, 1, device=dev)
    fused, fused_grads = _grads(
        lambda q, k, v: _run_attention(kind, q, k, v, bias, None, kpm), q, k, v
    )
    core, core_grads = _grads(
        lambda q, k, v: _run_attention(kind, q, k, v, bias, ones, kpm), q, k, v
    )
    tol = TOL[kind]
    torch.testing.assert_close(fused.double(), core.double(), atol=tol, rtol=tol)
    for a, b in zip(fused_grads, core_grads, strict=True):
        torch.testing.assert_close(a.double(), b.double(), atol=3 * tol, rtol=3 * tol)


def _run_attention(kind, q, k, v, bias, scale, kpm):
    with _autocast(kind):
        return urpe_attention(q, k, v, attn_bias=bias, attn_scale=scale, key_padding_mask=kpm)


def test_attention_module_and_core_run_on_cuda():
    torch.manual_seed(0)
    m = URPEAttention(embed_dim=16, num_heads=4).cuda().eval()
    x = torch.randn(2, 5, 16, device="cuda")
    c = torch.rand(2, 4, 5, 5, device="cuda")
    out = m(x, attn_scale=c)
    ref = copy.deepcopy(m).cpu()(x.cpu(), attn_scale=c.cpu())
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)
    assert _AttentionCore is not None


def _model_and_batches(attention: str, pad_to_multiple: int = 1, seed: int = 0):
    cfg = fit_tables(tiny_config(attention=attention), "ogb")
    torch.manual_seed(seed)
    model = Graphormer(cfg)
    with torch.no_grad():  # move C away from 1 so that URPE differs from Graphormer
        for name, p in model.named_parameters():
            if "scale" in name:
                p.add_(0.3 * torch.randn_like(p))
    graphs = graph_zoo(seed=seed + 5, count=24, node_features=3, edge_features=3)
    batch = collate(graphs, cfg.multi_hop_max_dist, pad_to_multiple=pad_to_multiple)
    return model, batch


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
@pytest.mark.parametrize("kind", ["fp32", "bf16"])
def test_model_on_cuda_matches_cpu(attention, kind):
    model, batch = _model_and_batches(attention)
    model.train()  # dropout off in tiny_config: train mode is deterministic
    ref = model(batch)
    ref.square().sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    gpu = copy.deepcopy(model).cuda()
    gpu.zero_grad(set_to_none=True)
    with _autocast(kind):
        out = gpu(batch.to("cuda"))
    out.float().square().sum().backward()
    tol = 1e-4 if kind == "fp32" else 5e-2
    torch.testing.assert_close(out.float().cpu(), ref, atol=tol, rtol=tol)
    for n, p in gpu.named_parameters():
        if n in ref_grads:
            g = p.grad.cpu()
            scale = ref_grads[n].abs().max().clamp(min=1e-3)
            assert (g - ref_grads[n]).abs().max() / scale < (1e-3 if kind == "fp32" else 0.15), n


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_pad_to_multiple_of_8_on_cuda(attention):
    model, b1 = _model_and_batches(attention, pad_to_multiple=1)
    _, b8 = _model_and_batches(attention, pad_to_multiple=8)
    assert (b8.x.shape[1] + 1) % 8 == 0 and b8.x.shape[1] > b1.x.shape[1]
    model = model.cuda().eval()
    with torch.no_grad():
        out1, out8 = model(b1.to("cuda")), model(b8.to("cuda"))
    torch.testing.assert_close(out1, out8, atol=1e-5, rtol=1e-5)


def _step_setup(attention: str, kind: str):
    model, batch = _model_and_batches(attention)
    batch.y = torch.randn(batch.num_graphs, 1, generator=torch.Generator().manual_seed(3))
    dev = torch.device("cuda")
    model = model.to(dev).train()
    opt = make_optimizer(model.parameters(), 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, 2, 10, 1e-3, 1e-9) / 1e-3
    )
    return model, batch.to(dev), opt, sched, Precision(kind, dev), StepTotals(dev)


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
@pytest.mark.parametrize("kind", ["bf16", "fp16"])
def test_training_steps_in_mixed_precision_never_synchronise(attention, kind):
    """bf16 autocast and fp16 with the grad scaler: steps update the weights, the loss stays
    finite and close to float32's, and no step waits for the device (CUDA's sync debug mode
    turns any synchronising call into an error)."""
    model, batch, opt, sched, precision, totals = _step_setup(attention, kind)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        ref = (model(batch).float() - batch.y).abs().mean()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [
            train_step(model, batch, opt, sched, precision, totals, i, "l1", 5.0) for i in range(4)
        ]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    loss_sum, steps, first_bad = totals.read()
    assert steps == 4 and first_bad == -1
    assert abs(float(losses[0]) - float(ref)) < 0.05 * max(1.0, float(ref))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "no parameter was updated"
    if kind == "fp16":
        assert precision.scaler.get_scale() > 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert abs(loss_sum - sum(float(x) for x in losses)) < 1e-3 * max(1.0, abs(loss_sum))


def test_a_nonfinite_loss_freezes_the_weights_on_the_device():
    model, batch, opt, sched, precision, totals = _step_setup("urpe", "bf16")
    train_step(model, batch, opt, sched, precision, totals, 0, "l1", None)
    good = {n: p.detach().clone() for n, p in model.named_parameters()}
    bad = copy.copy(batch)
    bad.y = torch.full_like(batch.y, 1e38)  # squared, it overflows float32
    train_step(model, bad, opt, sched, precision, totals, 1, "mse", None)
    train_step(model, batch, opt, sched, precision, totals, 2, "mse", None)
    assert totals.read()[2] == 1
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), good[n]), n


def test_checkpoint_rng_state_restores_the_gpus_random_stream():
    dev = torch.device("cuda")
    state = rng_state(dev)
    assert state["cuda"].dtype == torch.uint8
    a = torch.rand(64, device=dev)
    torch.nn.functional.dropout(torch.ones(1000, device=dev), 0.1)
    set_rng_state(state, dev)
    assert torch.equal(torch.rand(64, device=dev), a)


def test_benchmark_reports_the_gpus_activity():
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_train.py"
    cmd = [sys.executable, str(script), "--smoke", "--device", "cuda", "--precision", "bf16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, entry in json.loads(proc.stdout)["results"].items():
        if isinstance(entry, dict) and "graphs_per_s" in entry:
            act = entry["gpu_activity"]
            assert act.get("device_events", 0) > 0, (name, act)
            assert 0 < act["busy_ms"] and 0 < act["busy_fraction"] < 2, (name, act)
            top = act["top_kernels"]
            assert top and all(t["ms"] > 0 and t["calls"] > 0 for t in top), (name, top)
            assert [t["ms"] for t in top] == sorted((t["ms"] for t in top), reverse=True)


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_compiled_model_matches_eager_and_stops_recompiling(attention):
    import torch._dynamo

    torch._dynamo.reset()
    cfg = fit_tables(tiny_config(attention=attention), "ogb")
    torch.manual_seed(0)
    model = Graphormer(cfg).cuda().train()
    compiled = torch.compile(model, dynamic=True)
    graphs = graph_zoo(seed=9, count=96, node_features=3, edge_features=3)
    sizes = (8, 12, 16, 20, 24, 16)
    batches, start = [], 0
    for bs in sizes:  # different batch sizes and pad lengths, padded to 8 as in training
        chunk = graphs[start : start + bs]
        batches.append(collate(chunk, cfg.multi_hop_max_dist, pad_to_multiple=8).to("cuda"))
        start += bs
    assert len({b.attn_bias.shape[-1] for b in batches}) > 1  # the pad length does vary
    counts = []
    for b in batches:
        eager = model(b)
        out = compiled(b)
        torch.testing.assert_close(out, eager, atol=1e-4, rtol=1e-4)
        out.sum().backward()
        counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    # at most one recompilation (static -> dynamic shapes) after the first batch, then none
    assert counts[-1] == counts[2], counts
