r"""Universal RPE-based (URPE) multi-head attention.

The attention core of the library. It knows nothing about graphs or sequences: callers
pass an additive relative-position bias :math:`B` and, for URPE, a multiplicative
relative-position matrix :math:`C`, both per head:

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

Unpadded tokens: :class:`TokenLayout` (:mod:`graphormer_urpe.token_layout`) maps a padded
batch ``[B, N, d]`` to its ``T`` real tokens ``[T, d]`` and back. :class:`URPEAttention` given
a layout takes and returns ``[T, d]`` and pads only the projected heads for the attention
product, so that projections (and everything around them in :mod:`graphormer_urpe.encoder`)
skip the padding. The attention dropout, whose mask the backward pass reuses, is in
:mod:`graphormer_urpe.dropout`; this module gives both modules' names too.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention_kernel import IndexedScale, fused_kernel_for
from .dropout import Dropout, dropout, dropout_add, dropout_mask
from .fused_guard import disable_fused
from .token_layout import TokenLayout, true_positions

__all__ = [
    "URPEAttention",
    "urpe_attention",
    "PreparedBias",
    "prepare_bias",
    "TokenLayout",
    "true_positions",
    "Dropout",
    "dropout",
    "dropout_add",
    "dropout_mask",
]

Scale = Tensor | IndexedScale  # URPE's C, dense or as a table and an index


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
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, scale: Scale | None, p: float
) -> Tensor:
    """The product in the fused kernel; a dense ``C`` becomes a table with a row per entry."""
    from .fused_attention import fused_urpe_attention

    table = index = None
    if isinstance(scale, IndexedScale):
        table, index = scale
    elif scale is not None:  # [B|1, H|1, N_q, N_k]: one table row per (b, i, j)
        c = scale.expand(scale.shape[0], scale.shape[1], q.shape[2], k.shape[2])
        table = c.permute(0, 2, 3, 1).reshape(-1, c.shape[1])  # [B * N_q * N_k, H]
        index = torch.arange(table.shape[0], device=q.device, dtype=torch.int32)
        index = index.view(c.shape[0], c.shape[2], c.shape[3])
    return fused_urpe_attention(q, k, v, bias, table, index, p)


def urpe_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | PreparedBias | None = None,
    attn_scale: Scale | None = None,
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
            :class:`~graphormer_urpe.attention_kernel.IndexedScale` (a table and an index),
            or ``None``.
        key_padding_mask: ``[B, N_k]`` bool, ``True`` for padded keys.
        dropout_p: attention dropout probability (applied after ``C``).
        training: apply dropout only when ``True``.

    Returns:
        ``[B, H, N_q, d_h]`` attention output, zero on fully masked query rows.

    The kernel is chosen by :func:`~graphormer_urpe.attention_kernel.attention_kernel`: by
    default PyTorch operators; the fused Triton kernel with ``attention_kernel("fused")``.
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
    if isinstance(attn_scale, IndexedScale):
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


def _row0(t: Scale | None) -> Scale | None:
    """The first query row of a ``[..., N_q, N_k]`` matrix (kept when it broadcasts)."""
    if isinstance(t, IndexedScale):
        return t if t.index.shape[-2] == 1 else t.first_rows()
    return t if t is None or t.shape[-2] == 1 else t[..., :1, :]


def _first_rows(
    attn_bias: Tensor | PreparedBias | None, key_padding_mask: Tensor | None
) -> PreparedBias:
    """The prepared bias of the first query of every sequence."""
    if not isinstance(attn_bias, PreparedBias):
        attn_bias = prepare_bias(_row0(attn_bias), key_padding_mask)
    elif key_padding_mask is not None:
        raise ValueError("pass key_padding_mask to prepare_bias, not with a PreparedBias")
    return PreparedBias(_row0(attn_bias.bias), _row0(attn_bias.dead_rows))


class URPEAttention(nn.Module):
    r"""Multi-head attention with an additive bias :math:`B` and a URPE matrix :math:`C`.

    .. math::
        \operatorname{MHA}(X) = \operatorname{concat}_h\!\Big(
        \operatorname{Dropout}\big(\operatorname{softmax}(\tfrac{Q_h K_h^\top}{\sqrt{d_h}}
        + B_h) \odot C_h\big) V_h\Big) W^O

    with :math:`Q_h = X W^Q_h`, :math:`K_h = X W^K_h`, :math:`V_h = X W^V_h` (all linear maps
    with bias). :math:`B` is not scaled by :math:`1/\sqrt{d_h}`.

    Args:
        embed_dim: model width ``d``.
        num_heads: number of heads ``H``; ``d`` must be divisible by ``H``.
        dropout: attention dropout on the (URPE-scaled) probabilities.
        bias: whether the four projections have a bias.

    Shapes:
        - input ``x``: ``[B, N, d]``, or ``[T, d]`` real tokens with ``layout``
        - ``memory``: ``[B, M, d]`` extra keys / values before ``x`` (the bias, scale and
          padding mask then have ``M + N`` key columns), or ``None``
        - ``attn_bias``: broadcastable to ``[B, H, N, N]`` (float, may hold ``-inf``)
        - ``attn_scale``: broadcastable to ``[B, H, N, N]`` or ``None`` (plain RPE attention)
        - ``key_padding_mask``: ``[B, N]`` bool, ``True`` on padding
        - ``layout``: a :class:`TokenLayout` of the ``[B, N]`` batch, or ``None``; without a
          ``key_padding_mask`` its padding is masked (unless ``attn_bias`` is a
          :class:`PreparedBias`, which must then forbid the padded keys itself)
        - output: same shape as ``x``; with ``first_query_only`` only the first token of every
          sequence attends: ``[B, d]``
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights and zero biases (models may re-initialise)."""
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def _heads(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        layout: TokenLayout | None = None,
        first_query_only: bool = False,
        memory: Tensor | None = None,
    ) -> Tensor:
        """Self-attention over ``x``: ``[B, N, d]`` → ``[B, N, d]``, or ``[T, d]`` → ``[T, d]``
        with ``layout`` (projections on the real tokens only). With ``first_query_only`` only
        the first token of each sequence is a query and the output is ``[B, d]``.

        ``memory`` ``[B, M, d]`` (dense inputs only) holds extra keys and values placed before
        ``x``, as the cached states of Transformer-XL's previous segment: the queries are the
        ``N`` rows of ``x``, the keys ``[memory; x]`` (``M + N``), so ``attn_bias``,
        ``attn_scale`` and ``key_padding_mask`` then cover ``M + N`` keys."""
        h = self.num_heads
        if memory is not None and (layout is not None or first_query_only):
            raise ValueError("memory is only supported for dense [B, N, d] inputs")
        if layout is not None and key_padding_mask is None:
            if not isinstance(attn_bias, PreparedBias):  # (a PreparedBias already masks them)
                key_padding_mask = layout.key_padding_mask
        if layout is None:
            kv = x if memory is None else torch.cat([memory, x], dim=1)  # [B, M + N, d]
            k = self._heads(self.k_proj(kv))  # [B, H, M + N, d_h]
            v = self._heads(self.v_proj(kv))
            xq = x[:, :1] if first_query_only else x
            q = self._heads(self.q_proj(xq))  # [B, H, N_q, d_h]
        else:  # [T, d] -> padded [B, H, N, d_h]
            # padded keys are masked and padded queries discarded: no zero-filling needed
            k = layout.pad_heads(self.k_proj(x), h, zeros=False)
            v = layout.pad_heads(self.v_proj(x), h, zeros=False)
            if first_query_only:
                q = self.q_proj(x.index_select(0, layout.first))  # [B, d]
                q = q.view(-1, 1, h, self.head_dim).transpose(1, 2)  # [B, H, 1, d_h]
            else:
                q = layout.pad_heads(self.q_proj(x), h, zeros=False)
        if first_query_only:
            attn_bias, attn_scale = _first_rows(attn_bias, key_padding_mask), _row0(attn_scale)
            key_padding_mask = None
        out = urpe_attention(
            q,
            k,
            v,
            attn_bias=attn_bias,
            attn_scale=attn_scale,
            key_padding_mask=key_padding_mask,
            dropout_p=self.dropout,
            training=self.training,
        )  # [B, H, N_q, d_h]
        if first_query_only:
            out = out.reshape(out.shape[0], self.embed_dim)  # [B, d]
        elif layout is None:
            b, _, n, _ = out.shape
            out = out.transpose(1, 2).reshape(b, n, self.embed_dim)  # [B, N, d]
        else:
            out = layout.unpad_heads(out)  # [T, d]
        return self.out_proj(out)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"
