r"""Transformer encoder layers that thread the URPE matrices ``B`` and ``C`` to every layer.

A pre-LN layer (Graphormer v1, the basis of the paper's graph numbers) computes

.. math::
    x \leftarrow x + \operatorname{Drop}(\operatorname{MHA}(\operatorname{LN}_1(x); B, C)),
    \qquad
    x \leftarrow x + \operatorname{Drop}(\operatorname{FFN}(\operatorname{LN}_2(x)))

and a post-LN layer (RoBERTa, used by the paper's synthetic tasks) computes
:math:`x \leftarrow \operatorname{LN}_1(x + \operatorname{Drop}(\operatorname{MHA}(x)))`,
:math:`x \leftarrow \operatorname{LN}_2(x + \operatorname{Drop}(\operatorname{FFN}(x)))`, with
:math:`\operatorname{FFN} = W_2\,\operatorname{Drop}_{act}(\operatorname{GELU}(W_1 x))`.

Every layer takes either a dense padded batch ``x`` ``[B, N, d]`` or, with a
:class:`~graphormer_urpe.attention.token_layout.TokenLayout`, only its ``T`` real tokens
``[T, d]``: then the LayerNorms, projections, feed-forward block and dropouts skip the padding,
and only the attention product itself sees the padded ``[B, H, N, N]`` layout. Both give the
same values on the real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch.nn.functional as F
from torch import Tensor, nn

from .attention.attn_scale import AttnScale, IndexedAttnScale
from .attention.core import PreparedBias, prepare_bias
from .attention.dropout import Dropout, dropout_add
from .attention.multihead import URPEAttention
from .attention.token_layout import TokenLayout

__all__ = ["EncoderLayer", "Encoder", "LayerAttnScales"]


class LayerAttnScales(Protocol):
    """Anything that yields URPE's ``C`` (``attn_scale``) of layer ``i``:
    ``attn_scale[i] -> AttnScale | None``."""

    def __getitem__(self, layer: int) -> AttnScale | None: ...

    def __len__(self) -> int: ...


class EncoderLayer(nn.Module):
    """One transformer layer around :class:`~graphormer_urpe.attention.multihead.URPEAttention`.

    Args:
        embed_dim: width ``d``.
        ffn_dim: hidden width of the feed-forward block.
        num_heads: attention heads ``H``.
        dropout: dropout on the attention and feed-forward outputs (residual branch).
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout after the GELU inside the feed-forward block.
        pre_ln: pre-LN (``True``, Graphormer v1) or post-LN (``False``, RoBERTa).
        attention_cls: the attention module, built as ``attention_cls(embed_dim, num_heads,
            dropout=attention_dropout)`` and called like
            :class:`~graphormer_urpe.attention.multihead.URPEAttention` (a subclass such as
            Transformer-XL's relative attention may take its own ``attn_bias``, and
            ``memory``).

    Shapes:
        ``x`` ``[B, N, d]`` → ``[B, N, d]``, or with ``layout`` the real tokens ``[T, d]`` →
        ``[T, d]``; ``attn_bias`` / ``attn_scale`` broadcastable to ``[B, H, N, N]``;
        ``key_padding_mask`` ``[B, N]``. With ``layout`` and no ``key_padding_mask`` the
        layout's padding mask is used, unless ``attn_bias`` is a
        :class:`~graphormer_urpe.attention.core.PreparedBias` (which must then forbid padded keys).
        With ``first_token_only`` only the first token of each sequence is updated (it
        attends to all tokens, through the attention's ``first_query``) and the output is
        ``[B, d]``: the last layer of a model that reads out a ``[CLS]``-like token needs no
        more. ``memory`` ``[B, M, d]`` (dense inputs only, and an attention that takes it, as
        Transformer-XL's do) is this layer's input from the previous segment: it serves as
        ``M`` extra keys and values before ``x`` (normalised by the same ``LN_1`` in a pre-LN
        layer), so ``attn_bias`` / ``attn_scale`` then cover ``M + N`` keys; it is not
        updated.
    """

    def __init__(
        self,
        embed_dim: int,
        ffn_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        pre_ln: bool = True,
        attention_cls: type[URPEAttention] = URPEAttention,
    ) -> None:
        super().__init__()
        self.pre_ln = pre_ln
        self.self_attn = attention_cls(embed_dim, num_heads, dropout=attention_dropout)
        self.attn_norm = nn.LayerNorm(embed_dim)
        self.ffn_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.dropout = Dropout(dropout)
        self.activation_dropout = Dropout(activation_dropout)

    def reset_parameters(self) -> None:
        self.self_attn.reset_parameters()
        for m in (self.attn_norm, self.ffn_norm, self.fc1, self.fc2):
            m.reset_parameters()

    def _ffn(self, x: Tensor) -> Tensor:
        return self.fc2(self.activation_dropout(F.gelu(self.fc1(x))))

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: AttnScale | None = None,
        key_padding_mask: Tensor | None = None,
        layout: TokenLayout | None = None,
        first_token_only: bool = False,
        memory: Tensor | None = None,
    ) -> Tensor:
        p, training = self.dropout.p, self.training
        first = first_token_only
        attend = self.self_attn.first_query if first else self.self_attn
        segment: dict[str, Tensor] = {}  # Transformer-XL's memory, for a SegmentAttention
        if memory is not None:
            if first:
                raise ValueError("memory and first_token_only cannot be combined")
            segment["memory"] = self.attn_norm(memory) if self.pre_ln else memory

        def residual(t: Tensor) -> Tensor:  # the rows that this layer outputs
            if not first:
                return t
            return t[:, 0] if layout is None else t.index_select(0, layout.first)

        if self.pre_ln:
            h = attend(
                self.attn_norm(x), attn_bias, attn_scale, key_padding_mask, layout, **segment
            )
            x = dropout_add(residual(x), h, p, training)
            return dropout_add(x, self._ffn(self.ffn_norm(x)), p, training)
        h = attend(x, attn_bias, attn_scale, key_padding_mask, layout, **segment)
        x = self.attn_norm(dropout_add(residual(x), h, p, training))
        return self.ffn_norm(dropout_add(x, self._ffn(x), p, training))


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` sharing one bias ``B`` and one or per-layer ``C``.

    Args:
        num_layers: number of layers ``L``.
        final_norm: apply a final LayerNorm after the last layer (pre-LN models).
        **layer_kwargs: forwarded to :class:`EncoderLayer`.

    ``attn_scale`` is ``None`` (no URPE), one tensor shared by every layer, or a sequence
    (e.g. a lazy :class:`LayerAttnScales`) whose item ``i`` is the ``C`` of layer ``i``.
    ``attn_bias`` may be a :class:`~graphormer_urpe.attention.core.PreparedBias` already holding the
    padding mask (then ``key_padding_mask`` must be ``None``).

    Shapes:
        ``x`` ``[B, N, d]`` → ``[B, N, d]``, or with ``layout`` (a
        :class:`~graphormer_urpe.attention.token_layout.TokenLayout` of the ``[B, N]`` batch)
        the real tokens ``[T, d]`` → ``[T, d]``. With ``first_token_only`` the output is the
        first token of each sequence, ``[B, d]`` (the last layer then computes nothing else).
    """

    def __init__(self, num_layers: int, final_norm: bool = True, **layer_kwargs) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(**layer_kwargs) for _ in range(num_layers)])
        embed_dim = layer_kwargs["embed_dim"]
        self.final_norm = nn.LayerNorm(embed_dim) if final_norm else None

    def forward(
        self,
        x: Tensor,
        attn_bias: Tensor | PreparedBias | None = None,
        attn_scale: AttnScale | Sequence[AttnScale | None] | LayerAttnScales | None = None,
        key_padding_mask: Tensor | None = None,
        layout: TokenLayout | None = None,
        first_token_only: bool = False,
    ) -> Tensor:
        if isinstance(attn_bias, PreparedBias):
            if key_padding_mask is not None:
                raise ValueError("pass key_padding_mask to prepare_bias, not with a PreparedBias")
            bias = attn_bias
        else:
            if layout is not None and key_padding_mask is None:
                key_padding_mask = layout.key_padding_mask
            bias = prepare_bias(attn_bias, key_padding_mask)  # masks folded in once for all layers
        for i, layer in enumerate(self.layers):
            shared = attn_scale is None or isinstance(attn_scale, Tensor | IndexedAttnScale)
            scale = attn_scale if shared else attn_scale[i]
            last = i == len(self.layers) - 1
            x = layer(x, bias, scale, layout=layout, first_token_only=first_token_only and last)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x
