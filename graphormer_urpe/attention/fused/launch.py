r"""Fused URPE attention: one Triton kernel for the forward pass, two for the backward.

The product (the one of :class:`graphormer_urpe.attention.core._AttentionCore`):

.. math::
    S = \frac{Q K^\top}{\sqrt{d_h}} + B, \qquad P = \operatorname{softmax}(S), \qquad
    W = P \odot C \odot M, \qquad O = W V

per batch ``b`` and head ``h``, with ``Q`` ``[N_q, d_h]``, ``K`` / ``V`` ``[N_k, d_h]``, an
additive bias ``B`` (not scaled by :math:`1/\sqrt{d_h}`, may hold ``-inf``), the URPE matrix
``C`` and a dropout keep-mask ``M`` (entries 0 or :math:`1/(1-p)`). The softmax runs in
float32 for every input dtype; ``C`` and ``M`` act in float32; ``W`` is cast to ``V``'s
dtype for the product with ``V``; ``O`` has ``V``'s dtype. Rows are not renormalised after
``C`` or ``M``. A query row whose keys are all ``-inf`` has ``O = 0`` and zero gradients.

Tiling (FlashAttention style). The forward kernel runs on a grid ``(B * H, ceil(N_q /
BLOCK_M))``: each program holds a ``[BLOCK_M, BLOCK_D]`` block of queries and walks the keys
in blocks of ``BLOCK_N`` with an online softmax (running row maximum ``m`` and row sum ``l``
of :math:`\exp(S - m)`): the unnormalised :math:`\exp(S - m) \odot C \odot M` multiplies the
``V`` block and the accumulator is divided by ``l`` at the end. It stores ``O`` and the
float32 log-sum-exp ``L = m + \log l`` ``[B, H, N_q]`` (0 on a fully masked row, whose
probabilities are then :math:`\exp(-\infty - 0) = 0`). The backward recomputes
:math:`P = \exp(S - L)` tile by tile, with :math:`\delta_i = \sum_j P_{ij}\, dP_{ij} =
dO_i \cdot O_i` computed beforehand by PyTorch:

* grid ``(B * H, ceil(N_k / BLOCK_N))``: each program holds a block of keys and values and
  walks the queries: :math:`dV \mathrel{+}= W^\top dO`, :math:`dS = P \odot (dP - \delta)`
  with :math:`dP = (dO\, V^\top) \odot C \odot M`, :math:`dK \mathrel{+}= dS^\top Q /
  \sqrt{d_h}`;
* grid ``(B * H, ceil(N_q / BLOCK_M))``: each program holds a block of queries and walks the
  keys: :math:`dQ \mathrel{+}= dS\, K / \sqrt{d_h}`; the same pass stores :math:`dB = dS`
  (per element, float32, summed by PyTorch over the dimensions ``B`` broadcasts over) and
  reduces :math:`dC = (dO\, V^\top) \odot P \odot M` into the table (below).

The head dimension is padded to ``BLOCK_D = max(16, next_power_of_2(d_h))`` with masked
loads; ``BLOCK_M`` / ``BLOCK_N`` follow a fixed rule of the sizes (:func:`block_sizes`), with
no autotuning, so every launch is deterministic. All tile products accumulate in float32;
float32 inputs multiply in IEEE float32 (no TF32).

``C`` is never materialised: it is given as a table ``[R, H]`` and an index ``[B|1, N_q,
N_k]`` (int16 / int32 / int64) with :math:`C_{bhij} = \text{table}[\text{index}_{bij}, h]`;
each tile loads its index entries and gathers the table (a few KiB, cache resident). The
gradient of the table is reduced with atomic float32 additions into a scratch of ``REPL``
copies of the table (program ``i`` adds into copy ``i mod REPL``, which spreads the
contention on the few table rows), summed by PyTorch afterwards. Being a sum of atomic
additions, it is not bitwise reproducible from run to run; every other result is.

Dropout: the keep-mask is drawn inside the kernels by Triton's Philox4x32-10 generator (the
numbers of ``tl.rand``, bit for bit), :math:`u = \text{rand}(\text{seed}, ((b H + h) N_q + i)
N_k + j)` with a 64-bit position, kept where :math:`u \ge p`. The seed is a one-element int64
tensor on the device, read by the kernels with a load; the backward regenerates the identical
mask from the same seed and positions, so the mask is never stored.
:func:`dropout_keep_mask` materialises the mask of a seed with the same in-kernel function.

CUDA graphs: launches take no value read from the device on the host, the block sizes and
the kernel specialisation depend only on shapes, dtypes and which inputs are present, the
seed is drawn by ``torch.randint`` on the device (captured: each replay draws a new one) and
is never a Python number, and scratch buffers come from the caching allocator. Forward and
backward can therefore be captured in a ``torch.cuda.CUDAGraph`` (after one warm-up call that
compiles the kernels) and replayed with fresh dropout masks.

Triton is optional: this module imports without it
(:func:`~graphormer_urpe.attention.fused.kernels.fused_available` is then ``False``). Triton's
interpreter (``TRITON_INTERPRET=1``, CPU tensors) runs the same kernels
(:mod:`graphormer_urpe.attention.fused.kernels`, decorated on first use, so the variable only
needs to be set before the first call).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..attn_scale import IndexedAttnScale
from .kernels import fused_available, interpreting, kernels

__all__ = [
    "MAX_HEAD_DIM",
    "REPL",
    "block_sizes",
    "draw_seed",
    "dropout_keep_mask",
    "fused_urpe_attention",
]

REPL = 32
"""Copies of the table gradient that the atomic additions are spread over."""

MAX_HEAD_DIM = 256
"""Largest head dimension the kernels accept."""

_SEED_HIGH = 2**62


# ---------------------------------------------------------------------------------------------
# Availability


def block_sizes(n_q: int, n_k: int, head_dim: int) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_D)`` of every kernel, a fixed rule of the sizes.

    ``BLOCK_D = max(16, next_power_of_2(d_h))``; ``BLOCK_M`` / ``BLOCK_N`` are the next power
    of two of ``N_q`` / ``N_k``, at least 16 (the smallest ``tl.dot`` tile) and at most
    ``32`` / ``64`` (``32`` / ``32`` when ``BLOCK_D`` is 128, ``16`` / ``32`` when it is 256),
    which keeps the tiles of a program in registers.
    """
    block_d = max(16, _next_pow2(head_dim))
    cap_m, cap_n = (32, 64) if block_d <= 64 else (32, 32) if block_d <= 128 else (16, 32)
    block_m = min(cap_m, max(16, _next_pow2(n_q)))
    block_n = min(cap_n, max(16, _next_pow2(n_k)))
    return block_m, block_n, block_d


def _num_warps(block_m: int, block_n: int) -> int:
    """Warps per program: 8 for tiles of 2048 entries or more, else 4."""
    return 8 if block_m * block_n >= 2048 else 4


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# ---------------------------------------------------------------------------------------------
# Host side


def draw_seed(device: torch.device) -> Tensor:
    """A fresh dropout seed: ``[1]`` int64 on ``device``, drawn by ``torch.randint`` from the
    device's generator (inside a captured CUDA graph every replay draws a new one)."""
    return torch.randint(0, _SEED_HIGH, (1,), dtype=torch.int64, device=device)


def _check_p(p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {p}")


def _check_seed(seed: Tensor, device: torch.device | None = None) -> None:
    if seed.dtype != torch.int64 or seed.numel() != 1:
        raise ValueError(f"seed must be a 1-element int64 tensor, got {seed.dtype} {seed.shape}")
    if device is not None and seed.device != device:
        raise ValueError(f"seed must be on {device}, got {seed.device}")


def dropout_keep_mask(seed: Tensor, shape: Sequence[int], p: float) -> Tensor:
    """The dropout keep-mask that :func:`fused_urpe_attention` applies with ``seed``.

    Drawn by the same in-kernel function as the attention kernels, so it is bit for bit the
    mask of a call with this seed, ``dropout_p = p`` and these sizes.

    Args:
        seed: ``[1]`` int64 tensor, on the device the mask is built on.
        shape: ``(B, H, N_q, N_k)``.
        p: drop probability in ``[0, 1)``.

    Returns:
        ``[B, H, N_q, N_k]`` float32: 0 (dropped) or :math:`1 / (1 - p)` (kept).
    """
    _check_p(p)
    _check_seed(seed)
    b, h, n_q, n_k = (int(s) for s in shape)
    out = torch.empty((b, h, n_q, n_k), dtype=torch.float32, device=seed.device)
    if out.numel() == 0:
        return out
    block_m, block_n, _ = block_sizes(n_q, n_k, 16)
    grid = (b * h, _cdiv(n_q, block_m))
    kernels().mask_kernel[grid](
        out, seed, n_q, n_k, float(p), 1.0 / (1.0 - p), BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=_num_warps(block_m, block_n),
    )  # fmt: skip
    return out


def _cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``."""
    return -(-a // b)


class _Inputs:
    """The validated operands of one call, broadcast views and their strides."""

    def __init__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        table: Tensor | None,
        index: Tensor | None,
    ) -> None:
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError("q, k, v must be [B, H, N, d_h]")
        b, h, n_q, d = q.shape
        n_k = k.shape[2]
        if tuple(k.shape) != (b, h, n_k, d) or tuple(v.shape) != (b, h, n_k, d):
            raise ValueError(
                f"k and v must be [B, H, N_k, d_h] matching q {list(q.shape)}, "
                f"got {list(k.shape)} and {list(v.shape)}"
            )
        if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
            raise ValueError(
                f"q, k, v must share a floating dtype, got {q.dtype, k.dtype, v.dtype}"
            )
        if d < 1 or d > MAX_HEAD_DIM:
            raise ValueError(f"head dimension must be in [1, {MAX_HEAD_DIM}], got {d}")
        if (table is None) != (index is None):
            raise ValueError("an attn_scale needs both its table and its index")
        for t in (k, v, bias, table, index):
            if t is not None and t.device != q.device:
                raise ValueError(f"every input must be on {q.device}, got one on {t.device}")
        self.shape = (b, h, n_q, n_k, d)
        self.bias = self.table = self.index = None
        if bias is not None:
            if not bias.dtype.is_floating_point:
                raise ValueError(f"bias must be a float tensor, got {bias.dtype}")
            self.bias = bias.expand(b, h, n_q, n_k)
        if table is not None and index is not None:
            if table.dim() != 2 or table.shape[1] not in (1, h):
                raise ValueError(f"attn_scale.table must be [R, H={h}], got {list(table.shape)}")
            if not table.dtype.is_floating_point:
                raise ValueError(f"attn_scale.table must be a float tensor, got {table.dtype}")
            if index.dtype not in (torch.int16, torch.int32, torch.int64):
                raise ValueError(f"attn_scale.index must be int16/int32/int64, got {index.dtype}")
            self.table = table.expand(table.shape[0], h)
            self.index = index.expand(b, n_q, n_k)

    def pointer_args(self, dummy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Bias, table and index tensors (``dummy`` where absent: never read)."""
        return (
            dummy if self.bias is None else self.bias,
            dummy if self.table is None else self.table,
            dummy if self.index is None else self.index,
        )

    def stride_args(self) -> tuple[int, ...]:
        """The strides of bias (4), table (2) and index (3), zeros where absent."""
        sb = (0, 0, 0, 0) if self.bias is None else tuple(self.bias.stride())
        st = (0, 0) if self.table is None else tuple(self.table.stride())
        si = (0, 0, 0) if self.index is None else tuple(self.index.stride())
        return (*sb, *st, *si)


def _flags(inp: _Inputs, q: Tensor, p: float) -> dict[str, Any]:
    return {
        "HAS_BIAS": inp.bias is not None,
        "HAS_SCALE": inp.table is not None,
        "HAS_DROPOUT": p > 0.0,
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
        "UPCAST": q.dtype == torch.bfloat16 and interpreting(),
    }


def _forward(inp: _Inputs, q: Tensor, k: Tensor, v: Tensor, seed: Tensor, p: float):
    b, h, n_q, n_k, d = inp.shape
    out = torch.empty((b, h, n_q, d), dtype=v.dtype, device=q.device)
    lse = torch.empty((b, h, n_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    block_m, block_n, block_d = block_sizes(n_q, n_k, d)
    grid = (b * h, _cdiv(n_q, block_m))
    kernels().fwd_kernel[grid](
        q, k, v, out, lse, *inp.pointer_args(q), seed,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), *inp.stride_args(),
        h, n_q, n_k, d, 1.0 / math.sqrt(d), float(p), 1.0 / (1.0 - p),
        **_flags(inp, q, p), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        num_warps=_num_warps(block_m, block_n),
    )  # fmt: skip
    return out, lse


def _backward(
    inp: _Inputs,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    seed: Tensor,
    p: float,
    need_dbias: bool,
    need_dtable: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    b, h, n_q, n_k, d = inp.shape
    dev = q.device
    do = grad_out.to(v.dtype)
    delta = (do.float() * out.float()).sum(-1)  # [B, H, N_q] = rowsum(dO * O)
    dq = torch.empty((b, h, n_q, d), dtype=q.dtype, device=dev)
    dk = torch.empty((b, h, n_k, d), dtype=k.dtype, device=dev)
    dv = torch.empty((b, h, n_k, d), dtype=v.dtype, device=dev)
    need_dbias = need_dbias and inp.bias is not None
    need_dtable = need_dtable and inp.table is not None
    dbias = torch.empty((b, h, n_q, n_k), dtype=torch.float32, device=dev) if need_dbias else None
    block_m, block_n, block_d = block_sizes(n_q, n_k, d)
    m_blocks = _cdiv(n_q, block_m)
    repl = max(1, min(REPL, b * h * m_blocks))
    rows = 0 if inp.table is None else inp.table.shape[0]
    dtable = torch.zeros((repl, rows, h), dtype=torch.float32, device=dev) if need_dtable else None
    if q.numel() == 0 or k.numel() == 0:
        for t in (dq, dk, dv):
            t.zero_()
        if dbias is not None:
            dbias.zero_()
        return dq, dk, dv, dbias, None if dtable is None else dtable.sum(0)
    kern = kernels()
    flags = _flags(inp, q, p)
    blocks = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_D": block_d}
    warps = _num_warps(block_m, block_n)
    sizes = (h, n_q, n_k, d, 1.0 / math.sqrt(d), float(p), 1.0 / (1.0 - p))
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *inp.stride_args())
    bias_t, table_t, index_t = inp.pointer_args(q)
    kern.bwd_kv_kernel[(b * h, _cdiv(n_k, block_n))](
        q, k, v, do, lse, delta, dk, dv, bias_t, table_t, index_t, seed,
        *strides, *sizes, **flags, **blocks, num_warps=warps,
    )  # fmt: skip
    kern.bwd_q_kernel[(b * h, m_blocks)](
        q, k, v, do, lse, delta, dq, bias_t, table_t, index_t, seed,
        q if dbias is None else dbias, q if dtable is None else dtable,
        *strides, *sizes, repl, rows * h,
        NEED_DBIAS=need_dbias, NEED_DTABLE=need_dtable, **flags, **blocks, num_warps=warps,
    )  # fmt: skip
    return dq, dk, dv, dbias, None if dtable is None else dtable.sum(0)


class _FusedURPE(torch.autograd.Function):
    """The fused product as an autograd function (see the module docstring)."""

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        table: Tensor | None,
        index: Tensor | None,
        seed: Tensor | None,
        p: float,
    ) -> Tensor:
        inp = _Inputs(q, k, v, bias, table, index)
        out, lse = _forward(inp, q, k, v, q if seed is None else seed, p)
        ctx.save_for_backward(q, k, v, out, lse, bias, table, index, seed)
        ctx.p = p
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse, bias, table, index, seed = ctx.saved_tensors
        need_bias, need_table = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
        inp = _Inputs(q, k, v, bias, table, index)
        seed = q if seed is None else seed
        dq, dk, dv, dbias, dtable = _backward(
            inp, q, k, v, out, lse, grad_out, seed, ctx.p, need_bias, need_table
        )
        if dbias is not None and bias is not None:
            if tuple(dbias.shape) != tuple(bias.shape):
                dbias = dbias.sum_to_size(bias.shape)
            dbias = dbias.to(bias.dtype)
        if dtable is not None and table is not None:
            if tuple(dtable.shape) != tuple(table.shape):
                dtable = dtable.sum_to_size(table.shape)
            dtable = dtable.to(table.dtype)
        return dq, dk, dv, dbias, dtable, None, None, None


def fused_urpe_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None = None,
    attn_scale: IndexedAttnScale | None = None,
    dropout_p: float = 0.0,
    seed: Tensor | None = None,
) -> Tensor:
    r"""URPE attention :math:`(\operatorname{softmax}(q k^\top / \sqrt{d_h} + B) \odot C \odot
    M)\, v` in fused Triton kernels (differentiable in ``q``, ``k``, ``v``, ``bias`` and
    ``attn_scale.table``).

    Args:
        q: ``[B, H, N_q, d_h]`` queries (not yet scaled), float32 / bfloat16 / float16.
        k: ``[B, H, N_k, d_h]`` keys, ``q``'s dtype.
        v: ``[B, H, N_k, d_h]`` values, ``q``'s dtype.
        bias: additive ``B`` broadcastable to ``[B, H, N_q, N_k]`` (typically ``[B|1, H,
            N_q, N_k]``, any strides), float, may hold ``-inf``; not scaled; or ``None``.
        attn_scale: URPE's ``C`` as an
            :class:`~graphormer_urpe.attention.attn_scale.IndexedAttnScale`: ``table`` ``[R,
            H]`` (or ``[R, 1]``) float, ``index`` ``[B|1, N_q, N_k]`` (or ``[N_q, N_k]``) int16 /
            int32 / int64 rows of ``table``, in ``[0, R)`` (not checked): :math:`C_{bhij} =
            \text{table}[\text{index}_{bij}, h]`; or ``None`` (no ``C``).
        dropout_p: attention dropout probability in ``[0, 1)``, applied when positive.
        seed: ``[1]`` int64 dropout seed on ``q``'s device; ``None`` draws one
            (:func:`draw_seed`). :func:`dropout_keep_mask` gives the mask of a seed.

    Returns:
        ``[B, H, N_q, d_h]`` in ``v``'s dtype; exactly zero on query rows whose keys are all
        ``-inf``.
    """
    if not fused_available(q.device):
        raise RuntimeError(
            f"fused attention needs Triton and a CUDA device (or TRITON_INTERPRET=1 on the CPU); "
            f"got {q.device}"
        )
    _check_p(dropout_p)
    if dropout_p > 0.0:
        if seed is None:
            seed = draw_seed(q.device)
        _check_seed(seed, q.device)
    else:
        seed = None
    table, index = (None, None) if attn_scale is None else attn_scale
    if index is not None and index.dim() == 2:
        index = index.unsqueeze(0)
    return _FusedURPE.apply(q, k, v, bias, table, index, seed, float(dropout_p))
