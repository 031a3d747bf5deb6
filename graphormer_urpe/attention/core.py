r"""The attention core: URPE attention on already projected heads (:func:`urpe_attention`).

It knows nothing about graphs or sequences: callers pass an additive relative-position bias
:math:`B` and, for URPE, a multiplicative relative-position matrix :math:`C`, both per head:

.. math::
    A = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_h}} + B\right) \odot C,
    \qquad \operatorname{out} = \operatorname{Dropout}(A)\, V

(Luo et al., "Your Transformer May Not be as Powerful as You Expect", NeurIPS 2022,
Eq. 8). :math:`C` multiplies the probabilities *after* the softmax and *before* the
attention dropout; rows are not renormalised. With :math:`C` absent the multiply is skipped.

Kernels: on GPUs, attention without :math:`C` runs on
:func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels). Everywhere else the
product runs in one autograd function (:class:`_AttentionCore`) that keeps only the
probabilities, the (scaled, dropped) attention weights and the dropout mask for the backward
pass, adds :math:`B` inside the ``Q K^T`` product and applies the softmax gradient in one
kernel. Under :func:`torch.compile` plain tensor operations are used so that the compiler can
fuse them.

Masking conventions:

* ``attn_bias`` may hold ``-inf`` to forbid a query-key pair.
* ``key_padding_mask`` (``True`` = padded key) forbids those keys for every query.
* A query row in which every key is forbidden yields an output of exactly zero (never NaN),
  and gradients stay finite.

The softmax always runs in float32, also under float16 / bfloat16 inputs or autocast.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .attn_scale import AttnScale, IndexedAttnScale
from .dropout import dropout_mask
from .fused.guard import disable_fused
from .kernel_choice import fused_kernel_for

__all__ = ["PreparedBias", "prepare_bias", "urpe_attention"]


# ---------------------------------------------------------------------------------------------
# The attention product


class PreparedBias(NamedTuple):
    """An additive bias with the key-padding mask folded in and dead rows resolved.

    Build it once with :func:`prepare_bias` and pass it as ``attn_bias`` to every layer that
    shares the bias, so the masking work is not repeated per layer.

    Attributes:
        bias: ``[B|1, H|1, N_q, N_k]`` float with ``-inf`` on forbidden pairs and 0 on the
            rows in which every key is forbidden, or ``None``.
        dead_rows: ``[B|1, H|1, N_q, 1]`` bool, ``True`` on those rows (their output is 0), or
            ``None`` when there are none.
    """

    bias: Tensor | None
    dead_rows: Tensor | None


def prepare_bias(
    attn_bias: Tensor | None,
    key_padding_mask: Tensor | None = None,
    live_rows: bool = False,
) -> PreparedBias:
    """Fold ``key_padding_mask`` (``[B, N_k]``, ``True`` = padded) into ``attn_bias``.

    ``live_rows=True`` is the caller's guarantee that every query row keeps at least one
    allowed key (e.g. Graphormer's graph-token column): dead rows are then not searched for,
    which would read a flag back from the device.

    Args:
        attn_bias: broadcastable to ``[B, H, N_q, N_k]`` (float, may hold ``-inf``) or ``None``.
        key_padding_mask: ``[B, N_k]`` bool or ``None``.

    Returns:
        The :class:`PreparedBias`.
    """
    bias = attn_bias
    if key_padding_mask is not None:
        pad = key_padding_mask[:, None, None, :]  # [B, 1, 1, N_k]
        if bias is None:
            bias = torch.zeros(pad.shape, dtype=torch.float32, device=pad.device)
        bias = bias.masked_fill(pad, float("-inf"))
    if bias is None or live_rows:
        return PreparedBias(bias, None)
    dead = torch.isneginf(bias).all(dim=-1, keepdim=True)  # [B|1, H|1, N_q, 1]
    if torch.compiler.is_compiling():
        # no data-dependent branch under compile: resolve dead rows unconditionally
        return PreparedBias(bias.masked_fill(dead, 0.0), dead)
    if not bool(dead.any()):
        return PreparedBias(bias, None)
    return PreparedBias(bias.masked_fill(dead, 0.0), dead)


class _AttentionCore(torch.autograd.Function):
    r""":math:`(\operatorname{softmax}(q k^\top / \sqrt{d_h} + B) \odot C \odot M)\, v`.

    ``M`` is a dropout keep-mask (0 or :math:`1/(1-p)`) or absent. Saved for backward: the
    inputs, the float32 probabilities and the weights actually applied to ``v`` (in ``v``'s
    dtype). Half-precision inputs are multiplied in their dtype; the softmax, ``C`` and ``M``
    act in float32.

    Shapes:
        ``q`` ``[B, H, N_q, d_h]``, ``k`` / ``v`` ``[B, H, N_k, d_h]``; ``bias`` / ``scale`` /
        ``mask`` broadcastable to ``[B, H, N_q, N_k]`` (``mask`` full size) or ``None``;
        output ``[B, H, N_q, d_h]`` in ``v``'s dtype.
    """

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias: Tensor | None,
        scale: Tensor | None,
        mask: Tensor | None,
    ) -> Tensor:
        b, h, nq, dh = q.shape
        nk = k.shape[-2]
        sm = 1.0 / math.sqrt(dh)
        q3 = q.reshape(b * h, nq, dh)
        k3 = k.reshape(b * h, nk, dh)
        v3 = v.reshape(b * h, nk, dh)
        acc = torch.promote_types(q.dtype, torch.float32)  # softmax dtype
        with torch.autocast(q.device.type, enabled=False):
            full = (b, h, nq, nk)
            if (
                bias is not None
                and q.dtype == acc
                and bias.dtype == acc
                and tuple(bias.shape) == full
            ):
                s = torch.baddbmm(bias.reshape(b * h, nq, nk), q3, k3.transpose(1, 2), alpha=sm)
            else:
                s = torch.bmm(q3, k3.transpose(1, 2)).to(acc).mul_(sm)
                if bias is not None:
                    s = s.view(full).add_(bias).view(b * h, nq, nk)
            probs = torch.softmax(s, dim=-1)  # [B*H, N_q, N_k], float32 (or float64)
            del s
            weights = probs
            if scale is not None:
                weights = (weights.view(full) * scale).view(b * h, nq, nk)
            if mask is not None:
                m = mask.reshape(b * h, nq, nk)
                weights = weights * m if weights is probs else weights.mul_(m)
            weights = weights.to(v.dtype)  # what multiplies v (kept for its gradient)
            out = torch.bmm(weights, v3)
        ctx.save_for_backward(q3, k3, v3, probs, weights, scale, mask)
        ctx.shapes = (full, None if bias is None else bias.shape, bias is not None)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return out.view(b, h, nq, dh)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q3, k3, v3, probs, weights, scale, mask = ctx.saved_tensors
        full, bias_shape, has_bias = ctx.shapes
        b, h, nq, nk = full
        dh = q3.shape[-1]
        sm = 1.0 / math.sqrt(dh)
        go = grad_out.reshape(b * h, nq, dh).to(v3.dtype)
        need_q, need_k, need_v, need_bias, need_scale, _ = ctx.needs_input_grad
        dv = torch.bmm(weights.transpose(1, 2), go) if need_v else None
        dw = torch.bmm(go, v3.transpose(1, 2)).to(probs.dtype)  # [B*H, N_q, N_k], of the weights
        if mask is not None:
            dw.mul_(mask.reshape(b * h, nq, nk))
        dscale = None
        if scale is not None:
            if need_scale:
                dscale = (dw.view(full) * probs.view(full)).sum_to_size(scale.shape)
                dscale = dscale.to(scale.dtype)
            dw = dw.view(full).mul_(scale).view(b * h, nq, nk)
        ds = torch._softmax_backward_data(dw, probs, -1, probs.dtype)  # grad of the scores
        del dw
        dbias = None
        if has_bias and need_bias:
            dbias = ds.view(full)
            if tuple(bias_shape) != full:
                dbias = dbias.sum_to_size(bias_shape)
            dbias = dbias.to(ctx.bias_dtype)
        ds_q = ds.to(q3.dtype)
        dq = dk = None
        if need_q:
            dq = torch.baddbmm(q3, ds_q, k3, beta=0.0, alpha=sm).view(b, h, nq, dh)
        if need_k:
            dk = torch.baddbmm(k3, ds_q.transpose(1, 2), q3, beta=0.0, alpha=sm)
            dk = dk.view(b, h, nk, dh)
        if dv is not None:
            dv = dv.view(b, h, nk, dh)
        return dq, dk, dv, dbias, dscale, None


def _composite_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor | None,
    scale: Tensor | None,
    p: float,
) -> Tensor:
    """The attention product in plain tensor operations (for compilers and fused kernels)."""
    if scale is None and (q.device.type != "cpu" or torch.compiler.is_compiling()):
        mask = None if bias is None else bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    d_h = q.shape[-1]
    scores = torch.matmul(q * (1.0 / math.sqrt(d_h)), k.transpose(-1, -2)).float()
    if bias is not None:
        scores = scores + bias
    probs = torch.softmax(scores, dim=-1)  # [B, H, N_q, N_k], float32
    if scale is not None:
        probs = probs * scale.float()
    if p > 0.0:
        probs = F.dropout(probs, p=p, training=True)
    return torch.matmul(probs.to(v.dtype), v)


def _fused(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, scale: AttnScale | None, p: float
) -> Tensor:
    """The product in the fused kernel; a dense ``C`` becomes a table with a row per entry."""
    from .fused.launch import fused_urpe_attention

    if scale is not None and not isinstance(scale, IndexedAttnScale):
        # [B|1, H|1, N_q, N_k]: one table row per (b, i, j)
        c = scale.expand(scale.shape[0], scale.shape[1], q.shape[2], k.shape[2])
        table = c.permute(0, 2, 3, 1).reshape(-1, c.shape[1])  # [B * N_q * N_k, H]
        index = torch.arange(table.shape[0], device=q.device, dtype=torch.int32)
        scale = IndexedAttnScale(table, index.view(c.shape[0], c.shape[2], c.shape[3]))
    return fused_urpe_attention(q, k, v, bias, scale, p)


def urpe_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | PreparedBias | None = None,
    attn_scale: AttnScale | None = None,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    r"""Functional URPE attention on already projected heads.

    Computes :math:`\operatorname{Dropout}(\operatorname{softmax}(q k^\top/\sqrt{d_h} + B)
    \odot C)\, v`. With ``attn_scale=None`` this is exactly biased scaled-dot-product
    attention (the fused PyTorch kernel on GPUs).

    Args:
        q: ``[B, H, N_q, d_h]`` queries (not yet scaled).
        k: ``[B, H, N_k, d_h]`` keys.
        v: ``[B, H, N_k, d_h]`` values.
        attn_bias: additive bias ``B``, broadcastable to ``[B, H, N_q, N_k]``; may hold ``-inf``;
            or a :class:`PreparedBias` (then ``key_padding_mask`` must be ``None``).
        attn_scale: multiplicative ``C``, broadcastable to ``[B, H, N_q, N_k]``, or an
            :class:`~graphormer_urpe.attention.attn_scale.IndexedAttnScale` (a table and an index),
            or ``None``.
        key_padding_mask: ``[B, N_k]`` bool, ``True`` for padded keys.
        dropout_p: attention dropout probability (applied after ``C``).
        training: apply dropout only when ``True``.

    Returns:
        ``[B, H, N_q, d_h]`` attention output, zero on fully masked query rows.

    The kernel is chosen by
    :func:`~graphormer_urpe.attention.kernel_choice.attention_kernel`: by default PyTorch
    operators; the fused Triton kernel with ``attention_kernel("fused")``.
    """
    if isinstance(attn_bias, PreparedBias):
        if key_padding_mask is not None:
            raise ValueError("pass key_padding_mask to prepare_bias, not with a PreparedBias")
        bias, dead_rows = attn_bias
    else:
        bias, dead_rows = prepare_bias(attn_bias, key_padding_mask)
    p = dropout_p if training else 0.0

    if p < 1.0 and fused_kernel_for(q.device):
        try:
            out = _fused(q, k, v, bias, attn_scale, p)
        except Exception as exc:
            if q.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise  # the capture fails and the step goes on eagerly (runtime/capture.py)
            disable_fused(q.device, exc)  # warns once; the eager kernel takes over
            if p > 0.0:  # a dropout seed was drawn: a training step redoes itself exactly
                raise
        else:
            return out if dead_rows is None else out.masked_fill(dead_rows, 0.0)
    if isinstance(attn_scale, IndexedAttnScale):
        attn_scale = attn_scale.materialize()
    fused_gpu = attn_scale is None and q.device.type != "cpu"
    if torch.compiler.is_compiling() or fused_gpu or p >= 1.0:
        out = _composite_attention(q, k, v, bias, attn_scale, p)
    else:
        b, h, nq, _ = q.shape
        mask = None
        if p > 0.0:
            mask = dropout_mask((b, h, nq, k.shape[-2]), p, q.device, torch.float32)
        out = _AttentionCore.apply(q, k, v, bias, attn_scale, mask)
    if dead_rows is not None:
        out = out.masked_fill(dead_rows, 0.0)
    return out
