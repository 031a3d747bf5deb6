"""The fused Triton URPE attention against a float64 reference and the library's attention.

Without CUDA the kernels run under Triton's interpreter on CPU tensors: ``TRITON_INTERPRET=1``
is set around every test (Triton reads it when a kernel is decorated, and the module decorates
its kernels on first use, so it need not be set before any import). Shapes stay small there;
the tests marked ``cuda`` repeat the checks at Graphormer sizes and capture a CUDA graph.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from graphormer_urpe.attention.attn_scale import IndexedAttnScale  # noqa: E402
from graphormer_urpe.attention.core import _AttentionCore, urpe_attention  # noqa: E402
from graphormer_urpe.attention.fused import kernels as fk  # noqa: E402
from graphormer_urpe.attention.fused import launch as fa  # noqa: E402
from graphormer_urpe.attention.fused.kernels import fused_available  # noqa: E402
from graphormer_urpe.attention.fused.launch import (  # noqa: E402
    dropout_keep_mask,
    fused_urpe_attention,
)

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """Triton's interpreter on CPU tensors when there is no GPU."""
    if not CUDA:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


DEVICE = torch.device("cuda" if CUDA else "cpu")


# ---------------------------------------------------------------------------------------------
# Inputs and the reference


def make_inputs(
    b: int,
    h: int,
    n_q: int,
    n_k: int,
    d: int,
    dtype: torch.dtype = torch.float32,
    *,
    bias: str | None = "full",
    scale: str | None = "full",
    index_dtype: torch.dtype = torch.int64,
    pad: int = 0,
    dead_row: bool = False,
    rows: int = 20,
    strided: bool = False,
    bias_dtype: torch.dtype = torch.float32,
    device: torch.device = DEVICE,
    seed: int = 0,
) -> dict:
    """Leaf tensors of one call: ``q, k, v`` (``dtype``), ``bias`` (``full`` ``[B, H, N_q,
    N_k]``, ``batch1`` ``[1, H, N_q, N_k]``, or ``None``), ``table`` ``[rows, H]`` float32 and
    ``index`` (``full`` ``[B, N_q, N_k]``, ``batch1`` ``[1, N_q, N_k]``, or ``None``).

    ``pad`` forbids the last keys of the first sequence (``-inf``), ``dead_row`` every key of
    query 0 of the last sequence (of every sequence for a ``batch1`` bias); ``strided`` builds
    ``q, k, v`` and the bias as non-contiguous views.
    """
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    if strided:  # [B, N, H, d] projections viewed head-major
        q = rand(b, n_q, h, d).transpose(1, 2)
        k = rand(b, n_k, h, d).transpose(1, 2)
        v = rand(b, n_k, h, d).transpose(1, 2)
    else:
        q, k, v = rand(b, h, n_q, d), rand(b, h, n_k, d), rand(b, h, n_k, d)
    out = {"q": q, "k": k, "v": v, "bias": None, "table": None, "index": None}
    if bias is not None:
        bb = b if bias == "full" else 1
        t = rand(bb, n_q, n_k, h).permute(0, 3, 1, 2) if strided else rand(bb, h, n_q, n_k)
        t = t.clone() if not strided else t
        if pad:
            t[0, :, :, n_k - pad :] = -math.inf
        if dead_row:
            t[-1, :, 0, :] = -math.inf
        out["bias"] = t.to(bias_dtype)
    if scale is not None:
        out["table"] = torch.rand(rows, h, generator=g) * 1.5 + 0.25
        bi = b if scale == "full" else 1
        out["index"] = torch.randint(0, rows, (bi, n_q, n_k), generator=g).to(index_dtype)
    for name in ("q", "k", "v"):
        out[name] = out[name].to(device=device, dtype=dtype)
    for name in ("bias", "table", "index"):
        if out[name] is not None:
            out[name] = out[name].to(device)
    for name in ("q", "k", "v", "bias", "table"):
        if out[name] is not None:
            out[name].requires_grad_(True)
    return out


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    table: torch.Tensor | None,
    index: torch.Tensor | None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias) * table[index] * mask @ v in float64, 0 on rows whose
    keys are all -inf."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias.double()
    dead = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    if table is not None:
        p = p * table.double()[index.long()].permute(0, 3, 1, 2)  # [B|1, H, N_q, N_k]
    if mask is not None:
        p = p * mask.double()
    return p @ v


GRAD_NAMES = ("q", "k", "v", "bias", "table")


def upstream_grad(ref: torch.Tensor) -> torch.Tensor:
    """The gradient of the output that :func:`run_both` back-propagates (float64)."""
    return torch.randn(ref.shape, generator=torch.Generator().manual_seed(7)).to(ref)


def scale_of(inputs: dict) -> IndexedAttnScale | None:
    """The inputs' ``C`` as the fused kernel takes it (``None`` where they have none)."""
    if inputs["table"] is None:
        return None
    return IndexedAttnScale(inputs["table"], inputs["index"])


def run_both(inputs: dict, p: float = 0.0, seed: torch.Tensor | None = None):
    """Fused output and gradients, float64 reference output and gradients (same upstream
    gradient), for the leaves present."""
    names = [n for n in GRAD_NAMES if inputs[n] is not None]
    out = fused_urpe_attention(
        inputs["q"],
        inputs["k"],
        inputs["v"],
        inputs["bias"],
        scale_of(inputs),
        dropout_p=p,
        seed=seed,
    )
    b, h, n_q, _ = inputs["q"].shape
    mask = None
    if p > 0.0:
        mask = dropout_keep_mask(seed, (b, h, n_q, inputs["k"].shape[2]), p)
    ref_leaves = {n: inputs[n].detach().double().requires_grad_(True) for n in names}
    ref_in = {**inputs, **ref_leaves}
    ref = reference(
        ref_in["q"],
        ref_in["k"],
        ref_in["v"],
        ref_in["bias"],
        ref_in["table"],
        ref_in["index"],
        mask,
    )
    grad = upstream_grad(ref)
    grads = torch.autograd.grad(out, [inputs[n] for n in names], grad.to(out.dtype))
    ref_grads = torch.autograd.grad(ref, [ref_leaves[n] for n in names], grad)
    return out, dict(zip(names, grads, strict=True)), ref, dict(zip(names, ref_grads, strict=True))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """Largest error at most ``tol`` times the largest magnitude of ``expected`` (at least 1)."""
    assert actual.shape == expected.shape, what
    assert torch.isfinite(actual).all(), f"{what}: non-finite values"
    err = (actual.double() - expected.double()).abs().max().item()
    size = max(1.0, expected.abs().max().item())
    assert err <= tol * size, f"{what}: max error {err:.3g} > {tol:g} * {size:.3g}"


def check_all(inputs: dict, tol: float, grad_tol: float, p: float = 0.0, seed=None) -> None:
    out, grads, ref, ref_grads = run_both(inputs, p, seed)
    assert out.dtype == inputs["v"].dtype
    assert_close(out, ref, tol, "output")
    for name, g in grads.items():
        assert g.dtype == inputs[name].dtype and g.shape == inputs[name].shape, name
        assert_close(g, ref_grads[name], grad_tol, f"grad {name}")


# ---------------------------------------------------------------------------------------------
# Forward and gradients against the float64 reference

CASES = {
    # key padding, a fully masked row, d = 10, N = 37 (neither a power of two)
    "padded": dict(b=2, h=2, n_q=37, n_k=37, d=10, pad=5, dead_row=True),
    # bias and index broadcast over the batch, int16 index, non-contiguous q / k / v / bias
    "broadcast": dict(
        b=2, h=3, n_q=24, n_k=24, d=24, bias="batch1", scale="batch1",
        index_dtype=torch.int16, dead_row=True, strided=True,
    ),
    "no-bias": dict(b=2, h=2, n_q=19, n_k=19, d=16, bias=None, index_dtype=torch.int32),
    "no-scale": dict(b=2, h=2, n_q=21, n_k=21, d=24, scale=None, pad=3),
    # several query and key blocks: the online softmax across key blocks
    "multi-block": dict(b=1, h=2, n_q=40, n_k=70, d=24, pad=9, rows=37),
    # one query (the graph token's row), 37 keys
    "single-query": dict(b=3, h=2, n_q=1, n_k=37, d=10, pad=4),
    "plain": dict(b=1, h=2, n_q=17, n_k=17, d=64, bias=None, scale=None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_float32_matches_float64_reference(case):
    check_all(make_inputs(**CASES[case]), tol=2e-5, grad_tol=5e-5)


@pytest.mark.parametrize("case", ["padded", "multi-block"])
def test_bfloat16_matches_float64_reference(case):
    inputs = make_inputs(**CASES[case], dtype=torch.bfloat16)
    check_all(inputs, tol=3e-2, grad_tol=6e-2)


def test_float16_with_a_float16_bias_matches_float64_reference():
    inputs = make_inputs(**CASES["broadcast"], dtype=torch.float16, bias_dtype=torch.float16)
    check_all(inputs, tol=1e-2, grad_tol=2e-2)


def test_fully_masked_row_is_exactly_zero_with_zero_gradients():
    inputs = make_inputs(**CASES["padded"])
    out, grads, _, _ = run_both(inputs)
    assert torch.equal(out[-1, :, 0], torch.zeros_like(out[-1, :, 0]))
    assert torch.equal(grads["q"][-1, :, 0], torch.zeros_like(grads["q"][-1, :, 0]))
    assert torch.equal(grads["bias"][-1, :, 0], torch.zeros_like(grads["bias"][-1, :, 0]))
    for name, g in grads.items():
        assert torch.isfinite(g).all(), name
    # padded keys receive no gradient through their bias entries, and none through k / v
    assert torch.equal(grads["bias"][0, :, :, -5:], torch.zeros_like(grads["bias"][0, :, :, -5:]))
    assert torch.equal(grads["v"][0, :, -5:], torch.zeros_like(grads["v"][0, :, -5:]))
    assert out[0].abs().sum() > 0 and grads["q"][0].abs().sum() > 0


def test_bias_broadcast_gradient_is_summed_over_the_batch():
    inputs = make_inputs(**CASES["broadcast"])
    _, grads, _, ref_grads = run_both(inputs)
    assert grads["bias"].shape == (1, 3, 24, 24)
    assert_close(grads["bias"], ref_grads["bias"], 5e-5, "broadcast bias grad")


def test_only_requested_gradients_are_computed():
    inputs = make_inputs(**CASES["padded"])
    inputs["bias"].requires_grad_(False)
    inputs["table"].requires_grad_(False)
    out = fused_urpe_attention(
        inputs["q"], inputs["k"], inputs["v"], inputs["bias"], scale_of(inputs)
    )
    out.sum().backward()
    assert inputs["q"].grad is not None and inputs["bias"].grad is None
    assert inputs["table"].grad is None


def test_head_shared_table_and_two_dimensional_index():
    """A ``[R, 1]`` table (one scale for every head) read through a ``[N_q, N_k]`` index."""
    inputs = make_inputs(b=2, h=3, n_q=9, n_k=11, d=8, bias=None, rows=5)
    inputs["table"] = inputs["table"][:, :1].detach().clone().requires_grad_(True)  # [5, 1]
    index = inputs["index"][0]  # [N_q, N_k]
    out = fused_urpe_attention(
        inputs["q"], inputs["k"], inputs["v"], None, IndexedAttnScale(inputs["table"], index)
    )
    table = inputs["table"].detach().double().requires_grad_(True)
    ref = reference(
        inputs["q"].detach(), inputs["k"].detach(), inputs["v"].detach(), None,
        table.expand(5, 3), index[None],
    )  # fmt: skip
    assert_close(out, ref, 2e-5, "output")
    grad = upstream_grad(ref)
    (ours,) = torch.autograd.grad(out, inputs["table"], grad.float())
    (theirs,) = torch.autograd.grad(ref, table, grad)
    assert ours.shape == (5, 1)
    assert_close(ours, theirs, 5e-5, "grad of a head-shared table")


@pytest.mark.parametrize("sizes", [(2, 2, 3, 0, 8), (2, 2, 0, 5, 8), (0, 2, 3, 5, 8)])
def test_empty_sizes(sizes):
    """No keys: zero output and gradients; no queries or no batch: empty results."""
    b, h, n_q, n_k, d = sizes
    inputs = make_inputs(b, h, n_q, n_k, d, bias=None, rows=4)
    out = fused_urpe_attention(
        inputs["q"], inputs["k"], inputs["v"], None, scale_of(inputs),
        dropout_p=0.1,
    )  # fmt: skip
    assert out.shape == (b, h, n_q, d) and not out.abs().sum()
    out.sum().backward()
    assert inputs["q"].grad.shape == inputs["q"].shape and not inputs["q"].grad.abs().sum()
    assert inputs["table"].grad.shape == (4, h) and not inputs["table"].grad.abs().sum()


# ---------------------------------------------------------------------------------------------
# Dropout


def test_dropout_matches_reference_given_the_kernel_mask():
    """Forward and backward against the reference multiplied by the materialised mask: both
    passes must apply that very mask (the backward regenerates it)."""
    inputs = make_inputs(**CASES["padded"])
    seed = torch.tensor([123456789], dtype=torch.int64, device=DEVICE)
    check_all(inputs, tol=2e-5, grad_tol=5e-5, p=0.3, seed=seed)


def test_dropout_reference_with_another_mask_disagrees():
    """The check above can fail: the reference with the mask of another seed disagrees, in
    the output and in the gradient of ``v`` (the backward's own mask)."""
    inputs = make_inputs(**CASES["no-bias"])
    seed = torch.tensor([5], dtype=torch.int64, device=DEVICE)
    out, grads, ref, ref_grads = run_both(inputs, p=0.3, seed=seed)
    assert_close(out, ref, 2e-5, "output with its own mask")
    assert_close(grads["v"], ref_grads["v"], 5e-5, "grad v with its own mask")
    other = torch.tensor([6], dtype=torch.int64, device=DEVICE)
    mask = dropout_keep_mask(other, (*out.shape[:3], inputs["k"].shape[2]), 0.3)
    v = inputs["v"].detach().double().requires_grad_(True)
    wrong = reference(
        inputs["q"].detach(), inputs["k"].detach(), v, None,
        inputs["table"].detach(), inputs["index"], mask,
    )  # fmt: skip
    assert (out.double() - wrong).abs().max() > 1e-2
    grad = upstream_grad(ref)
    (wrong_dv,) = torch.autograd.grad(wrong, v, grad)
    assert (grads["v"].double() - wrong_dv).abs().max() > 1e-2


def test_dropout_mask_values_rate_and_seeds():
    p = 0.25
    shape = (2, 3, 64, 80)
    s1 = torch.tensor([42], dtype=torch.int64, device=DEVICE)
    s2 = torch.tensor([43], dtype=torch.int64, device=DEVICE)
    m1 = dropout_keep_mask(s1, shape, p)
    assert m1.shape == shape and m1.dtype == torch.float32
    inv_keep = torch.tensor(1.0 / (1.0 - p), dtype=torch.float32).item()
    assert torch.unique(m1).tolist() == [0.0, inv_keep]
    keep = (m1 > 0).double().mean().item()
    assert abs(keep - (1.0 - p)) < 0.02  # ~8 standard deviations over 30720 draws
    assert abs(m1.double().mean().item() - 1.0) < 0.03  # unbiased
    assert torch.equal(dropout_keep_mask(s1, shape, p), m1)  # same seed, same mask
    differ = (dropout_keep_mask(s2, shape, p) != m1).double().mean().item()
    assert differ > 0.2  # independent masks differ on ~2 p (1 - p) = 37.5 % of entries
    # heads and rows draw different numbers (no repeated pattern)
    assert not torch.equal(m1[0, 0], m1[0, 1]) and not torch.equal(m1[0, 0, 0], m1[0, 0, 1])


def test_dropout_seed_drawn_per_call_and_explicit_seed_reproduces():
    inputs = make_inputs(**CASES["no-scale"])
    args = [inputs[n].detach() for n in ("q", "k", "v", "bias")]
    a = fused_urpe_attention(*args, dropout_p=0.5)
    b = fused_urpe_attention(*args, dropout_p=0.5)
    assert not torch.equal(a, b)  # a new seed each call
    seed = fa.draw_seed(DEVICE)
    assert seed.shape == (1,) and seed.dtype == torch.int64 and seed.device.type == DEVICE.type
    c = fused_urpe_attention(*args, dropout_p=0.5, seed=seed)
    assert torch.equal(c, fused_urpe_attention(*args, dropout_p=0.5, seed=seed))
    no_drop = fused_urpe_attention(*args)
    assert not torch.equal(c, no_drop)
    assert torch.equal(no_drop, fused_urpe_attention(*args, dropout_p=0.0, seed=seed))


# ---------------------------------------------------------------------------------------------
# Agreement with graphormer_urpe.attention


def _scale_matrix(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table[index.long()].permute(0, 3, 1, 2)  # [B|1, H, N_q, N_k]


def _fused_and_core(
    inputs: dict, seed: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The fused product with dropout ``p``, and :class:`_AttentionCore` on twins of the
    leaves with the same keep mask; the twins for their gradients."""
    out = fused_urpe_attention(
        *(inputs[n] for n in ("q", "k", "v", "bias")), scale_of(inputs), dropout_p=p, seed=seed
    )
    mask = dropout_keep_mask(seed, (*inputs["q"].shape[:3], inputs["k"].shape[2]), p)
    twins = {n: inputs[n].detach().clone().requires_grad_(True) for n in GRAD_NAMES}
    core = _AttentionCore.apply(
        twins["q"], twins["k"], twins["v"], twins["bias"],
        _scale_matrix(twins["table"], inputs["index"]), mask,
    )  # fmt: skip
    return out, core, twins


def test_matches_attention_core_with_dropout_mask():
    inputs = make_inputs(b=2, h=3, n_q=29, n_k=29, d=24, pad=4)
    seed = torch.tensor([2024], dtype=torch.int64, device=DEVICE)
    names = list(GRAD_NAMES)
    out, core, twins = _fused_and_core(inputs, seed, 0.2)
    assert_close(out, core, 1e-5, "output vs _AttentionCore")
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out)
    ours = torch.autograd.grad(out, [inputs[n] for n in names], grad)
    theirs = torch.autograd.grad(core, [twins[n] for n in names], grad)
    for name, a, b in zip(names, ours, theirs, strict=True):
        assert_close(a, b, 5e-5, f"grad {name} vs _AttentionCore")


def test_matches_urpe_attention_with_key_padding_and_dead_rows():
    inputs = make_inputs(b=2, h=2, n_q=37, n_k=37, d=10, pad=0)
    q, k, v, bias = (inputs[n].detach() for n in ("q", "k", "v", "bias"))
    kpm = torch.zeros(2, 37, dtype=torch.bool, device=DEVICE)
    kpm[1, 30:] = True
    bias = bias.clone()
    bias[0, 1, 5, :] = -math.inf  # a dead row
    c = _scale_matrix(inputs["table"].detach(), inputs["index"])
    theirs = urpe_attention(q, k, v, attn_bias=bias, attn_scale=c, key_padding_mask=kpm)
    masked = bias.masked_fill(kpm[:, None, None, :], -math.inf)
    ours = fused_urpe_attention(
        q, k, v, masked, IndexedAttnScale(inputs["table"].detach(), inputs["index"])
    )
    assert_close(ours, theirs, 1e-5, "output vs urpe_attention")
    assert torch.equal(ours[0, 1, 5], torch.zeros_like(ours[0, 1, 5]))


# ---------------------------------------------------------------------------------------------
# API


def test_block_size_rule():
    assert fa.block_sizes(1, 37, 10) == (16, 64, 16)
    assert fa.block_sizes(40, 40, 24) == (32, 64, 32)
    assert fa.block_sizes(65, 65, 64) == (32, 64, 64)
    assert fa.block_sizes(65, 65, 100) == (32, 32, 128)
    assert fa.block_sizes(600, 600, 256) == (16, 32, 256)


def test_rejects_bad_inputs():
    q = torch.randn(1, 2, 5, 8, device=DEVICE)
    k = torch.randn(1, 2, 6, 8, device=DEVICE)
    table = torch.rand(4, 2, device=DEVICE)
    index = torch.zeros(1, 5, 6, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="k and v"):
        fused_urpe_attention(q, k, k[:, :, :5])
    with pytest.raises(ValueError, match="both its table and its index"):
        fused_urpe_attention(q, k, k, attn_scale=IndexedAttnScale(table, None))
    with pytest.raises(ValueError, match="dropout_p"):
        fused_urpe_attention(q, k, k, dropout_p=1.0)
    with pytest.raises(ValueError, match="int16"):
        fused_urpe_attention(q, k, k, attn_scale=IndexedAttnScale(table, index.float()))
    with pytest.raises(ValueError, match="seed"):
        fused_urpe_attention(q, k, k, dropout_p=0.1, seed=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="dtype"):
        fused_urpe_attention(q, k.double(), k)
    with pytest.raises(RuntimeError):  # not broadcastable
        fused_urpe_attention(q, k, k, bias=torch.zeros(1, 2, 5, 5, device=DEVICE))
    with pytest.raises(ValueError, match="head dimension"):
        fused_urpe_attention(*(torch.randn(1, 1, 2, 300, device=DEVICE) for _ in range(3)))


def test_fused_available(monkeypatch):
    assert fused_available(DEVICE)
    assert not fused_available(torch.device("meta"))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not fused_available(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="Triton"):
        fused_urpe_attention(*(torch.randn(1, 1, 2, 4) for _ in range(3)))


def test_module_imports_without_triton(monkeypatch):
    """A fresh copy of the module, loaded while ``triton`` cannot be imported."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("_fused_copy", fk.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.tl is None
    assert not module.fused_available(torch.device("cpu"))
    assert not module.fused_available(torch.device("cuda"))


_LATE_INTERPRETER = """
import os, torch, torch._dynamo  # torch._dynamo imports triton before the variable is set
import sys
from graphormer_urpe.attention.fused.kernels import fused_available
from graphormer_urpe.attention.fused.launch import fused_urpe_attention
assert "triton" in sys.modules and not fused_available(torch.device("cpu"))
os.environ["TRITON_INTERPRET"] = "1"
assert fused_available(torch.device("cpu"))
q = torch.randn(1, 2, 5, 8)
out = fused_urpe_attention(q, q, q)
ref = torch.softmax(q @ q.transpose(-1, -2) / 8 ** 0.5, -1) @ q
assert (out - ref).abs().max() < 1e-5, (out - ref).abs().max()
print("ok")
"""


def test_interpreter_may_be_switched_on_after_import():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, "-c", _LATE_INTERPRETER],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


_PHILOX_SCRIPT = """
import os
import sys

if sys.argv[1] == "interpret":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: tl.rand interpretable
import torch
import triton
import triton.language as tl

from graphormer_urpe.attention.fused import kernels

uniform = kernels.kernels().uniform


@triton.jit
def both(Ours, Theirs, Seed, base, BLOCK: tl.constexpr):
    offs = base + tl.arange(0, BLOCK).to(tl.int64) * 7919
    seed = tl.load(Seed)
    tl.store(Ours + tl.arange(0, BLOCK), uniform(seed, offs))
    tl.store(Theirs + tl.arange(0, BLOCK), tl.rand(seed, offs))


device = "cpu" if sys.argv[1] == "interpret" else "cuda"
for seed, base in ((0, 0), (123456789, 2**33 + 5), (2**62 - 12345, 2**40)):
    ours = torch.empty(256, device=device)
    theirs = torch.empty(256, device=device)
    both[(1,)](ours, theirs, torch.tensor([seed], device=device), base, BLOCK=256)
    assert torch.equal(ours, theirs), (seed, base, (ours - theirs).abs().max())
    assert 0.0 <= float(ours.min()) and float(ours.max()) < 1.0
print("ok")
"""


def _run_philox_check(tmp_path, mode: str) -> None:
    script = tmp_path / "philox_check.py"  # Triton reads kernel sources from files
    script.write_text(_PHILOX_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if mode == "interpret":
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


def test_dropout_uniforms_are_those_of_tl_rand(tmp_path):
    """The kernels' Philox restatement draws exactly ``tl.rand``'s numbers (interpreter)."""
    _run_philox_check(tmp_path, "interpret")


def test_benchmark_script_smoke_mode_emits_json():
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_attention.py"), "--smoke"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["benchmark"] == "attention"
    (preset,) = report["results"].values()
    for name in ("fused", "attention_core", "sdpa"):
        assert preset[name]["ms_median"] > 0, name


# ---------------------------------------------------------------------------------------------
# CUDA: Graphormer sizes and CUDA graphs (skipped without a GPU)

REALISTIC = dict(b=64, h=32, n_q=65, n_k=65, d=24, pad=7, dead_row=True, rows=64)


@pytest.mark.parametrize(
    "dtype, tol, grad_tol",
    [
        pytest.param(torch.bfloat16, 3e-2, 6e-2, id="bf16"),
        pytest.param(torch.float32, 5e-5, 2e-4, id="fp32"),
    ],
)
@pytest.mark.parametrize("p", [0.0, 0.1], ids=["no-dropout", "dropout"])
@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_graphormer_sizes_match_float64_reference(dtype, tol, grad_tol, p):
    inputs = make_inputs(**REALISTIC, dtype=dtype, index_dtype=torch.int16)
    seed = torch.tensor([99], dtype=torch.int64, device="cuda") if p else None
    check_all(inputs, tol=tol, grad_tol=grad_tol, p=p, seed=seed)


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_broadcast_inputs_match_float64_reference():
    inputs = make_inputs(
        b=64, h=32, n_q=56, n_k=56, d=24, bias="batch1", scale="batch1", strided=True,
        dtype=torch.bfloat16, index_dtype=torch.int32,
    )  # fmt: skip
    check_all(inputs, tol=3e-2, grad_tol=6e-2)


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_matches_attention_core_at_graphormer_sizes():
    inputs = make_inputs(b=64, h=32, n_q=65, n_k=65, d=24, pad=7)
    seed = torch.tensor([7], dtype=torch.int64, device="cuda")
    out, core, twins = _fused_and_core(inputs, seed, 0.1)
    assert_close(out, core, 1e-4, "output vs _AttentionCore")
    grad = torch.randn_like(out)
    ours = torch.autograd.grad(out, [inputs[n] for n in GRAD_NAMES], grad)
    theirs = torch.autograd.grad(core, [twins[n] for n in GRAD_NAMES], grad)
    for name, a, b in zip(GRAD_NAMES, ours, theirs, strict=True):
        assert_close(a, b, 5e-4, f"grad {name} vs _AttentionCore")


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_graph_capture_replays_forward_backward_with_fresh_masks():
    b, h, n, d, p = 8, 4, 40, 24, 0.2
    dev = torch.device("cuda")
    static = make_inputs(b, h, n, n, d, torch.bfloat16, pad=5, dead_row=True, device=dev)
    leaves = [static[name] for name in GRAD_NAMES]
    grad_out = torch.randn(b, h, n, d, device=dev, dtype=torch.bfloat16)

    def step():
        seed = fa.draw_seed(dev)
        out = fused_urpe_attention(
            *(static[k] for k in ("q", "k", "v", "bias")), scale_of(static), dropout_p=p, seed=seed
        )
        return (seed, out, *torch.autograd.grad(out, leaves, grad_out))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # compiles the kernels, warms the allocator
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    seeds, masks = [], []
    for replay in range(2):
        fresh = make_inputs(b, h, n, n, d, torch.bfloat16, pad=5, dead_row=True, seed=10 + replay)
        with torch.no_grad():
            for name in ("q", "k", "v", "bias", "table", "index"):
                static[name].copy_(fresh[name].to(dev))
        graph.replay()
        torch.cuda.synchronize()
        seed = captured[0].clone()
        seeds.append(seed.item())
        masks.append(dropout_keep_mask(seed, (b, h, n, n), p))
        eager_in = {k: fresh[k].detach().to(dev) for k in fresh}
        for name in GRAD_NAMES:
            eager_in[name].requires_grad_(True)
        eager_out = fused_urpe_attention(
            *(eager_in[k] for k in ("q", "k", "v", "bias")),
            scale_of(eager_in),
            dropout_p=p,
            seed=seed,
        )
        eager = (
            eager_out,
            *torch.autograd.grad(eager_out, [eager_in[k] for k in GRAD_NAMES], grad_out),
        )
        for name, a, e in zip(("out", *GRAD_NAMES), captured[1:], eager, strict=True):
            if name == "table":  # atomic float32 sums: the order may differ
                assert_close(a, e, 1e-5, "captured table grad")
            else:
                assert torch.equal(a, e), f"captured {name} differs from eager"
        assert torch.equal(captured[1][-1, :, 0], torch.zeros_like(captured[1][-1, :, 0]))
    assert seeds[0] != seeds[1]
    assert not torch.equal(masks[0], masks[1])


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_dropout_uniforms_are_those_of_tl_rand(tmp_path):
    """The same check, compiled for the GPU."""
    _run_philox_check(tmp_path, "cuda")


# ---------------------------------------------------------------------------------------------
# The compiler (the interpreter accepts code that the compiler may refuse)

_POINTERS_16 = {"Q", "K", "V", "DO", "Out", "DQ", "DK", "DV"}  # in the inputs' dtype
_FLAGS = ("HAS_BIAS", "HAS_SCALE", "HAS_DROPOUT", "NEED_DBIAS", "NEED_DTABLE")


def _signature(fn, dtype: str, flags: bool) -> tuple[dict, dict]:
    """Triton signature and constants of kernel ``fn`` as the host side launches it."""
    signature: dict[str, str] = {}
    constants: dict[str, object] = {}
    blocks = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_D": 32}
    for name in fn.arg_names:
        if name in _FLAGS:
            constants[name] = flags
        elif name == "PRECISION":
            constants[name] = "ieee" if dtype == "fp32" else "tf32"
        elif name == "UPCAST":
            constants[name] = False
        elif name in blocks:
            constants[name] = blocks[name]
        elif name in _POINTERS_16:
            signature[name] = f"*{dtype}"
        elif name == "Seed":
            signature[name] = "*i64"
        elif name == "Index":
            signature[name] = "*i32"
        elif name[0].isupper() and name != "H":  # Lse, Delta, Bias, Table, DBias, DTable
            signature[name] = "*fp32"
        elif name in ("sm_scale", "p_drop", "inv_keep"):
            signature[name] = "fp32"
        else:  # strides and sizes
            signature[name] = "i64" if name.startswith("s") else "i32"
    for name in constants:
        signature[name] = "constexpr"
    return signature, constants


@pytest.mark.parametrize("arch, dtype", [(90, "bf16"), (80, "fp32")])
def test_kernels_compile_for_hopper_and_ampere(arch, dtype, monkeypatch):
    """Every kernel, with every optional input on and off, compiles to machine code."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    kernels = fk.kernels()
    for name in ("fwd_kernel", "bwd_kv_kernel", "bwd_q_kernel", "mask_kernel"):
        fn = getattr(kernels, name)
        for flags in (True, False):
            signature, constants = _signature(fn, dtype, flags)
            source = ASTSource(
                fn=fn,
                signature=signature,
                constexprs={(fn.arg_names.index(k),): v for k, v in constants.items()},
            )
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32))
            assert compiled.asm.get("cubin"), (name, flags)


def test_launches_bind_the_constants_the_compile_test_gives(monkeypatch):
    """A launch specialises the arguments by the decorated kernel's ``tl.constexpr``
    annotations: those must be the parameters given as constants above (the flags and block
    sizes), else a launch on a GPU fails to specialise the string ``PRECISION``."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    kernels = fk.kernels()
    for name in ("fwd_kernel", "bwd_kv_kernel", "bwd_q_kernel", "mask_kernel"):
        fn = getattr(kernels, name)
        _, constants = _signature(fn, "bf16", True)
        assert {p.name for p in fn.params if p.is_constexpr} == set(constants), name
