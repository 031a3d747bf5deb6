r"""Universal RPE-based (URPE) multi-head attention.

The attention core of the library. It knows nothing about graphs or sequences: callers
pass an additive relative-position bias :math:`B` and, for URPE, a multiplicative
relative-position matrix :math:`C`, both per head:

.. math::
    A = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_h}} + B\right) \odot C,
    \qquad \operatorname{out} = \operatorname{Dropout}(A)\, V

(Luo et al., "Your Transformer May Not be as Powerful as You Expect", NeurIPS 2022,
Eq. 8). :math:`C` multiplies the probabilities *after* the softmax and *before* the
attention dropout; rows are not renormalised. With :math:`C` absent the module is
standard biased multi-head attention and runs on
:func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels where available).

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
from torch import Tensor, nn

__all__ = ["URPEAttention", "urpe_attention", "PreparedBias", "prepare_bias"]


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


def prepare_bias(attn_bias: Tensor | None, key_padding_mask: Tensor | None = None) -> PreparedBias:
    """Fold ``key_padding_mask`` (``[B, N_k]``, ``True`` = padded) into ``attn_bias``.

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
    if bias is None:
        return PreparedBias(None, None)
    dead = torch.isneginf(bias).all(dim=-1, keepdim=True)  # [B|1, H|1, N_q, 1]
    if not bool(dead.any()):
        return PreparedBias(bias, None)
    return PreparedBias(bias.masked_fill(dead, 0.0), dead)


def urpe_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_bias: Tensor | PreparedBias | None = None,
    attn_scale: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    r"""Functional URPE attention on already projected heads.

    Computes :math:`\operatorname{Dropout}(\operatorname{softmax}(q k^\top/\sqrt{d_h} + B)
    \odot C)\, v`. With ``attn_scale=None`` this is exactly biased scaled-dot-product
    attention and uses the fused PyTorch kernel.

    Args:
        q: ``[B, H, N_q, d_h]`` queries (not yet scaled).
        k: ``[B, H, N_k, d_h]`` keys.
        v: ``[B, H, N_k, d_h]`` values.
        attn_bias: additive bias ``B``, broadcastable to ``[B, H, N_q, N_k]``; may hold ``-inf``;
            or a :class:`PreparedBias` (then ``key_padding_mask`` must be ``None``).
        attn_scale: multiplicative ``C``, broadcastable to ``[B, H, N_q, N_k]``, or ``None``.
        key_padding_mask: ``[B, N_k]`` bool, ``True`` for padded keys.
        dropout_p: attention dropout probability (applied after ``C``).
        training: apply dropout only when ``True``.

    Returns:
        ``[B, H, N_q, d_h]`` attention output, zero on fully masked query rows.
    """
    d_h = q.shape[-1]
    if isinstance(attn_bias, PreparedBias):
        if key_padding_mask is not None:
            raise ValueError("pass key_padding_mask to prepare_bias, not with a PreparedBias")
        bias, dead_rows = attn_bias
    else:
        bias, dead_rows = prepare_bias(attn_bias, key_padding_mask)
    p = dropout_p if training else 0.0

    if attn_scale is None:
        mask = None if bias is None else bias.to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    else:
        scores = torch.matmul(q * (1.0 / math.sqrt(d_h)), k.transpose(-1, -2)).float()
        if bias is not None:
            scores = scores + bias
        probs = torch.softmax(scores, dim=-1)  # [B, H, N_q, N_k], float32
        probs = probs * attn_scale.float()
        if p > 0.0:
            probs = F.dropout(probs, p=p, training=True)
        out = torch.matmul(probs.to(v.dtype), v)
    if dead_rows is not None:
        out = out.masked_fill(dead_rows, 0.0)
    return out


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
        - input ``x``: ``[B, N, d]``
        - ``attn_bias``: broadcastable to ``[B, H, N, N]`` (float, may hold ``-inf``)
        - ``attn_scale``: broadcastable to ``[B, H, N, N]`` or ``None`` (plain RPE attention)
        - ``key_padding_mask``: ``[B, N]`` bool, ``True`` on padding
        - output: ``[B, N, d]``
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
    ) -> Tensor:
        """Self-attention over ``x`` (``[B, N, d]``); returns ``[B, N, d]``."""
        b, n, d = x.shape
        q = self._heads(self.q_proj(x))  # [B, H, N, d_h]
        k = self._heads(self.k_proj(x))
        v = self._heads(self.v_proj(x))
        out = urpe_attention(
            q,
            k,
            v,
            attn_bias=attn_bias,
            attn_scale=attn_scale,
            key_padding_mask=key_padding_mask,
            dropout_p=self.dropout,
            training=self.training,
        )
        out = out.transpose(1, 2).reshape(b, n, d)  # [B, N, d]
        return self.out_proj(out)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"
