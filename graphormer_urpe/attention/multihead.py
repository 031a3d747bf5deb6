r"""URPE multi-head attention: :class:`URPEAttention`, the query, key, value and output
projections around the attention core (:func:`~graphormer_urpe.attention.core.urpe_attention`).

Unpadded tokens: :class:`~graphormer_urpe.attention.token_layout.TokenLayout` maps a padded
batch ``[B, N, d]`` to its ``T`` real tokens ``[T, d]`` and back. :class:`URPEAttention` given
a layout takes and returns ``[T, d]`` and pads only the projected heads for the attention
product, so that projections (and everything around them in :mod:`graphormer_urpe.encoder`)
skip the padding.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attn_scale import AttnScale, IndexedAttnScale
from .core import PreparedBias, prepare_bias, urpe_attention
from .token_layout import TokenLayout

__all__ = ["URPEAttention"]


def _padding_mask(
    attn_bias: Tensor | PreparedBias | None,
    key_padding_mask: Tensor | None,
    layout: TokenLayout | None,
) -> Tensor | None:
    """The padding mask to apply: the given one, else the layout's ``[B, N]`` (unless
    ``attn_bias`` is a :class:`PreparedBias`, which masks the padded keys already)."""
    if layout is None or key_padding_mask is not None or isinstance(attn_bias, PreparedBias):
        return key_padding_mask
    return layout.key_padding_mask


def _row0(t: AttnScale | None) -> AttnScale | None:
    """The first query row of a ``[..., N_q, N_k]`` matrix (kept when it broadcasts)."""
    if isinstance(t, IndexedAttnScale):
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
        - ``attn_bias``: broadcastable to ``[B, H, N, N]`` (float, may hold ``-inf``)
        - ``attn_scale``: broadcastable to ``[B, H, N, N]`` or ``None`` (plain RPE attention)
        - ``key_padding_mask``: ``[B, N]`` bool, ``True`` on padding
        - ``layout``: a :class:`TokenLayout` of the ``[B, N]`` batch, or ``None``; without a
          ``key_padding_mask`` its padding is masked (unless ``attn_bias`` is a
          :class:`PreparedBias`, which must then forbid the padded keys itself)
        - output: same shape as ``x``; ``[B, d]`` from :meth:`first_query`, where only the
          first token of every sequence attends
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
        """``[B, N, H * d_h]`` → ``[B, H, N, d_h]``."""
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, t: Tensor) -> Tensor:
        """``[B, H, N, d_h]`` → ``[B, N, H * d_h]``."""
        b, _, n, _ = t.shape
        return t.transpose(1, 2).reshape(b, n, self.embed_dim)

    def _keys_values(self, x: Tensor, layout: TokenLayout | None) -> tuple[Tensor, Tensor]:
        """Keys and values ``[B, H, N, d_h]`` of ``x`` (``[B, N, d]``, or ``[T, d]`` with
        ``layout``)."""
        if layout is None:
            return self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        # padded keys are masked and padded queries discarded: no zero-filling needed
        k = layout.pad_heads(self.k_proj(x), self.num_heads, zeros=False)
        v = layout.pad_heads(self.v_proj(x), self.num_heads, zeros=False)
        return k, v

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_bias: Tensor | PreparedBias | None,
        attn_scale: AttnScale | None,
        key_padding_mask: Tensor | None,
    ) -> Tensor:
        """:func:`urpe_attention` with this module's dropout: ``[B, H, N_q, d_h]``."""
        mask, p = key_padding_mask, self.dropout
        return urpe_attention(q, k, v, attn_bias, attn_scale, mask, p, self.training)

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: AttnScale | None = None,
        key_padding_mask: Tensor | None = None,
        layout: TokenLayout | None = None,
    ) -> Tensor:
        """Self-attention over ``x``: ``[B, N, d]`` → ``[B, N, d]``, or ``[T, d]`` → ``[T, d]``
        with ``layout`` (projections on the real tokens only)."""
        key_padding_mask = _padding_mask(attn_bias, key_padding_mask, layout)
        k, v = self._keys_values(x, layout)
        if layout is None:
            q = self._heads(self.q_proj(x))  # [B, H, N, d_h]
            out = self._attend(q, k, v, attn_bias, attn_scale, key_padding_mask)
            return self.out_proj(self._merge_heads(out))  # [B, N, d]
        q = layout.pad_heads(self.q_proj(x), self.num_heads, zeros=False)  # [B, H, N, d_h]
        out = self._attend(q, k, v, attn_bias, attn_scale, key_padding_mask)
        return self.out_proj(layout.unpad_heads(out))  # [T, d]

    def first_query(
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: AttnScale | None = None,
        key_padding_mask: Tensor | None = None,
        layout: TokenLayout | None = None,
    ) -> Tensor:
        """:meth:`forward`'s output for the first token of each sequence alone, ``[B, d]``:
        only that token is a query (it attends to all tokens), which is all that the last
        layer of a model reading out a ``[CLS]``-like token needs. Takes what :meth:`forward`
        takes, ``attn_bias`` and ``attn_scale`` with all their ``N`` query rows."""
        key_padding_mask = _padding_mask(attn_bias, key_padding_mask, layout)
        k, v = self._keys_values(x, layout)
        first = x[:, :1] if layout is None else x.index_select(0, layout.first)[:, None]
        q = self._heads(self.q_proj(first))  # [B, H, 1, d_h]
        bias = _first_rows(attn_bias, key_padding_mask)
        out = self._attend(q, k, v, bias, _row0(attn_scale), None)  # [B, H, 1, d_h]
        return self.out_proj(out.reshape(out.shape[0], self.embed_dim))  # [B, d]

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"
