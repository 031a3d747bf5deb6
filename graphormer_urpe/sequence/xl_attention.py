r"""Transformer-XL's relative attention, as an additive bias of the URPE attention core.

Dai et al. (ACL 2019, Eq. in §3.3; ``RelPartialLearnableMultiHeadAttn`` in their code) score
query :math:`i` (window position :math:`M + i`) against key :math:`j` with

.. math::
    s_{ij} = \frac{1}{\sqrt{d_h}}\big(q_i^\top k_j + q_i^\top W_R r_{M+i-j}
    + u^\top k_j + v^\top W_R r_{M+i-j}\big),

per head, where :math:`r_\delta` is the fixed sinusoidal encoding of the distance
:math:`\delta`, :math:`W_R` a learned projection of each layer, and :math:`u, v` learned
vectors per head shared by all layers. The core
(:func:`~graphormer_urpe.attention.core.urpe_attention`) computes
:math:`\operatorname{softmax}(q k^\top / \sqrt{d_h} + B) \odot C`, so the three position terms
arrive as its additive bias

.. math::
    B_{ij} = \frac{1}{\sqrt{d_h}}\big((q_i + v)^\top W_R r_{M+i-j} + u^\top k_j\big)
    + M_{causal}[i, j],

and URPE's :math:`C` (``xl-urpe``) as its scale. The content-position products are computed
once per query and distance, :math:`[N, K + 1]` for the distances :math:`K, \dots, 0`, and
moved to query-key order by the relative shift (:func:`relative_shift`, a view), not per
query-key pair.

The previous segment's cached states are extra keys and values before the segment's own
(:class:`SegmentAttention`, the attention of the other positional schemes, which this layer
extends).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..attention.core import PreparedBias
from ..attention.multihead import URPEAttention

__all__ = [
    "SegmentAttention",
    "XLPositions",
    "XLRelativeAttention",
    "distance_order_mask",
    "relative_shift",
    "sinusoid_encoding",
    "xl_position_bias",
]


def sinusoid_encoding(distances: Tensor, dim: int) -> Tensor:
    r"""Fixed encodings :math:`r_\delta = [\sin(\delta \omega); \cos(\delta \omega)]` with
    :math:`\omega_k = 10000^{-2k / d}` (Vaswani et al.; Transformer-XL's ``PositionalEmbedding``).

    Args:
        distances: ``[K]`` distances (any order).
        dim: encoding width ``d`` (even).

    Returns:
        ``[K, d]`` float32.
    """
    if dim % 2 != 0:
        raise ValueError(f"sinusoidal encodings need an even width, got {dim}")
    freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=distances.device) / dim))
    angles = distances.float()[:, None] * freq[None, :]  # [K, d / 2]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_shift(scores: Tensor) -> Tensor:
    """Per-distance scores to query-key order: ``out[..., i, j] = scores[..., i, N - i + j]``.

    ``scores[..., i, c]`` belongs to query ``i`` (window position ``M + i`` of ``K = M + N``
    keys) and distance ``K - c``, for ``c = 0..K``; ``out[..., i, j]`` is then the score of
    distance ``M + i - j``. Entries with ``j > M + i`` (future keys) hold other finite values
    and must be masked. The rows of ``K + 1`` are re-read as rows of ``K`` starting at flat
    offset ``N``: a view, no copy (Transformer-XL's trick, whose extra column is the
    distance ``K`` here instead of a padded zero).

    Shapes:
        ``[..., N, K + 1]`` (contiguous in the last two dimensions) → ``[..., N, K]``.
    """
    *batch, n, k1 = scores.shape
    flat = scores.reshape(*batch, n * k1)
    return flat[..., n : n + n * (k1 - 1)].view(*batch, n, k1 - 1)


def distance_order_mask(query_len: int, keys: int, device: torch.device | None = None) -> Tensor:
    """``-inf`` where a per-distance score (:func:`relative_shift`'s input) is read only by future
    keys, else 0: row ``r``, columns ``c < N - r``.

    Returns:
        ``[N, K + 1]`` float.
    """
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(keys + 1, device=device)[None, :]
    return torch.zeros(query_len, keys + 1, device=device).masked_fill(
        cols < query_len - rows, float("-inf")
    )


class _ShiftedScores(torch.autograd.Function):
    r""":math:`\operatorname{shift}(qv\, rel^\top + \text{mask}) + uk`, as one matrix product per
    head over all queries of the batch, written straight into the ``[B, H, N, K]`` layout of the
    attention core; the backward writes the gradient of the per-distance scores in one pass
    (the shift is a view; scores that no key reads get gradient 0).

    Shapes:
        ``qv`` ``[B, H, N, d_h]``, ``rel`` ``[H, K + 1, d_h]``, ``uk`` ``[B, H, 1, K]``,
        ``mask`` ``[N, K + 1]`` (:func:`distance_order_mask`) → ``[B, H, N, K]``.
    """

    @staticmethod
    def forward(ctx, qv: Tensor, rel: Tensor, uk: Tensor, mask: Tensor) -> Tensor:
        b, h, n, dh = qv.shape
        k1 = rel.shape[1]
        qv_h = qv.transpose(0, 1).reshape(h, b * n, dh)  # [H, B*N, d_h]
        mask_h = mask.repeat(b, 1)  # [B*N, K + 1]
        by_distance = torch.baddbmm(mask_h, qv_h, rel.transpose(1, 2))  # [H, B*N, K + 1]
        shifted = relative_shift(by_distance.view(h * b, n, k1)).view(h, b, n, k1 - 1)
        out = torch.empty((b, h, n, k1 - 1), dtype=qv.dtype, device=qv.device)
        torch.add(shifted.transpose(0, 1), uk, out=out)
        ctx.save_for_backward(qv_h, rel)
        ctx.dims = (b, h, n, k1, dh)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        qv_h, rel = ctx.saved_tensors
        b, h, n, k1, dh = ctx.dims
        need_qv, need_rel, need_uk, _ = ctx.needs_input_grad
        g_by = grad.new_empty(h, b, n * k1)
        g_by[..., :n] = 0.0  # scores no key reads
        g_by[..., n:] = grad.transpose(0, 1).reshape(h, b, n * (k1 - 1))  # the shift's inverse
        g_by = g_by.view(h, b * n, k1)
        g_qv = None
        if need_qv:
            g_qv = torch.bmm(g_by, rel).view(h, b, n, dh).transpose(0, 1)  # [B, H, N, d_h]
        g_rel = torch.bmm(g_by.transpose(1, 2), qv_h) if need_rel else None  # [H, K + 1, d_h]
        g_uk = grad.sum(dim=2, keepdim=True) if need_uk else None
        return g_qv, g_rel, g_uk, None


def xl_position_bias(q: Tensor, k: Tensor, rel: Tensor, u: Tensor, v: Tensor) -> Tensor:
    r"""The additive bias :math:`B` of Transformer-XL's relative attention (module docstring),
    with the causal mask of the window.

    Args:
        q: ``[B, H, N, d_h]`` queries (window positions ``M .. M + N - 1``).
        k: ``[B, H, K, d_h]`` keys (``K = M + N``, memory first).
        rel: ``[H, K + 1, d_h]`` projected encodings :math:`W_R r_\delta` of the distances
            ``K, ..., 0`` (descending).
        u: ``[H, d_h]`` content bias.
        v: ``[H, d_h]`` position bias.

    Returns:
        ``[B, H, N, K]`` float, ``-inf`` on the future keys ``j > M + i``.
    """
    n, keys = q.shape[-2], k.shape[-2]
    if rel.shape[-2] != keys + 1:
        raise ValueError(f"expected encodings of {keys + 1} distances, got {rel.shape[-2]}")
    scale = 1.0 / math.sqrt(q.shape[-1])
    qv = (q + v[None, :, None, :]) * scale  # [B, H, N, d_h]
    uk = torch.matmul(k, u[None, :, :, None] * scale).transpose(-1, -2)  # [B, H, 1, K]
    mask = distance_order_mask(n, keys, q.device).to(qv.dtype)  # [N, K + 1]
    return _ShiftedScores.apply(qv, rel.to(qv.dtype), uk, mask)


class XLPositions(NamedTuple):
    """What every layer's relative attention needs of one segment.

    Attributes:
        encodings: ``[K + 1, d]`` sinusoidal encodings of the distances ``K, ..., 0``.
        u: ``[H, d_h]`` content bias (shared by all layers).
        v: ``[H, d_h]`` position bias (shared by all layers).
    """

    encodings: Tensor
    u: Tensor
    v: Tensor


class SegmentAttention(URPEAttention):
    r""":class:`~graphormer_urpe.attention.multihead.URPEAttention` over a segment and the cached
    states of the previous one (Transformer-XL's recurrence).

    The queries are the ``N`` rows of ``x``, the keys and values ``[memory; x]`` (``M + N``
    rows), so ``attn_bias``, ``attn_scale`` and ``key_padding_mask`` then cover ``M + N``
    keys. Without ``memory`` it is :class:`~graphormer_urpe.attention.multihead.URPEAttention`.

    Shapes:
        - ``x``: ``[B, N, d]``; ``memory``: ``[B, M, d]`` or ``None``
        - ``attn_bias`` / ``attn_scale``: broadcastable to ``[B, H, N, M + N]``
        - ``key_padding_mask``: ``[B, M + N]``
        - output: ``[B, N, d]``
    """

    def _segment_heads(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``[B, H, N, d_h]`` of ``x``, keys and values ``[B, H, M + N, d_h]`` of
        ``[memory; x]``."""
        kv = x if memory is None else torch.cat([memory, x], dim=1)  # [B, M + N, d]
        q = self._heads(self.q_proj(x))
        return q, self._heads(self.k_proj(kv)), self._heads(self.v_proj(kv))

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        layout: object | None = None,
        memory: Tensor | None = None,
    ) -> Tensor:
        if memory is None:
            return super().forward(x, attn_bias, attn_scale, key_padding_mask, layout)
        if layout is not None:
            raise ValueError("memory is only supported for dense [B, N, d] inputs")
        q, k, v = self._segment_heads(x, memory)
        out = self._attend(q, k, v, attn_bias, attn_scale, key_padding_mask)  # [B, H, N, d_h]
        return self.out_proj(self._merge_heads(out))


class XLRelativeAttention(SegmentAttention):
    r"""Transformer-XL's relative multi-head attention on the URPE core.

    :class:`~graphormer_urpe.attention.multihead.URPEAttention`'s projections (without biases, as in
    Transformer-XL) plus this layer's :math:`W_R` (``r_proj``); the position terms become the
    core's additive bias (:func:`xl_position_bias`), an optional URPE :math:`C` its scale.

    Shapes:
        - ``x``: ``[B, N, d]``; ``memory``: ``[B, M, d]`` or ``None``
        - ``attn_bias``: an :class:`XLPositions` with ``K = M + N``
        - ``attn_scale``: broadcastable to ``[B, H, N, K]`` or ``None``
        - output: ``[B, N, d]``
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = False
    ) -> None:
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias)
        self.r_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights (``W_R`` too) and zero biases."""
        super().reset_parameters()
        r_proj = getattr(self, "r_proj", None)  # absent while the base class initialises
        if r_proj is not None:
            nn.init.xavier_uniform_(r_proj.weight)

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        attn_bias: XLPositions,
        attn_scale: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        layout: object | None = None,
        memory: Tensor | None = None,
    ) -> Tensor:
        if key_padding_mask is not None or layout is not None:
            raise ValueError("relative attention takes dense, unpadded [B, N, d] segments")
        q, k, v = self._segment_heads(x, memory)  # [B, H, N, d_h], [B, H, K, d_h] (twice)
        pos = attn_bias
        rel = self.r_proj(pos.encodings).view(-1, self.num_heads, self.head_dim).transpose(0, 1)
        bias = xl_position_bias(q, k, rel, pos.u, pos.v)  # [B, H, N, K], causal
        # every query sees itself: no dead rows
        out = self._attend(q, k, v, PreparedBias(bias, None), attn_scale, None)
        return self.out_proj(self._merge_heads(out))  # [B, N, d]

    def first_query(self, *args: object, **kwargs: object) -> Tensor:
        """Not supported: Transformer-XL's segments have no read-out token."""
        raise ValueError("relative attention takes dense, unpadded [B, N, d] segments")
