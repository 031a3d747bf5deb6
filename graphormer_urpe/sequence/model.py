r"""Sequence transformer for the synthetic tasks, with four positional schemes on one core.

The model is the reference RoBERTa-style encoder (spec §5.2): token embedding, optional
learned absolute positions, an embedding LayerNorm, post-LN layers from
:mod:`graphormer_urpe.encoder` and a masked-LM style head. Positions enter in one of four
ways (``pe``):

* ``"none"``: no positional information at all (the model is permutation-equivariant);
* ``"ape"``: learned absolute position embeddings added to the token embeddings;
* ``"rpe"``: a per-head additive bias :math:`B_h[i, j] = b_h[\phi(j - i)]` inside the softmax;
* ``"urpe"``: RPE plus a per-head multiplicative matrix :math:`C_h[i, j] = c_h[\phi(j - i)]`
  applied to the attention probabilities (Luo et al., NeurIPS 2022, Eq. 8):

.. math::
    A_h = \operatorname{softmax}\!\Big(\frac{Q_h K_h^\top}{\sqrt{d_h}} + B_h\Big) \odot C_h .

:math:`\phi` maps a relative offset :math:`r = j - i` (key minus query) to a table row: either
one row per offset (``r + L_{max} - 1``, :math:`2 L_{max} - 1` rows) or the signed T5
log-buckets of :func:`t5_relative_bucket`. As in the reference code, one :math:`B` table and
one :math:`C` table serve every layer; ``share_scale=False`` gives each layer its own
:math:`C`. :math:`C` starts at exactly 1, so at initialisation URPE computes the same function
as RPE with the same weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..encoder import Encoder
from .choices import PE_SCHEMES, PEName, check_choice
from .tasks import NUM_SPECIAL_TOKENS, PAD_INDEX

__all__ = [
    "PEName",
    "PE_SCHEMES",
    "SequenceModelConfig",
    "RelativePositionTable",
    "SequenceTransformer",
    "t5_relative_bucket",
    "relative_position_index",
]


def t5_relative_bucket(
    relative_position: Tensor, num_buckets: int = 64, max_distance: int = 128
) -> Tensor:
    r"""Signed T5 bucket of relative offsets, exactly as the reference code computes it.

    With :math:`h = \text{num\_buckets} / 2` buckets per sign and :math:`e = h / 2` exact ones,

    .. math::
        \beta(n) = \begin{cases} n & n < e \\
        \min\!\Big(h - 1,\; e + \Big\lfloor \frac{\log(n / e)}{\log(\text{max\_distance} / e)}
        (h - e) \Big\rfloor\Big) & n \ge e \end{cases},
        \qquad \text{bucket}(r) = \operatorname{sign}(r)\, \beta(|r|).

    Args:
        relative_position: integer tensor of offsets ``r = j - i`` (any shape).
        num_buckets: total buckets over both signs (64 in the reference).
        max_distance: offset at which the log buckets saturate (128 in the reference).

    Returns:
        Long tensor of the same shape with values in ``[-(h-1), h-1]``.
    """
    half = num_buckets // 2
    max_exact = half // 2
    if max_exact < 1:
        raise ValueError(f"num_buckets must be >= 4, got {num_buckets}")
    sign = torch.sign(relative_position)
    n = relative_position.abs()
    is_small = n < max_exact
    n_large = n.clamp(min=max_exact).float()  # avoid log(0) on the small branch
    val_if_large = max_exact + (
        torch.log(n_large / max_exact) / math.log(max_distance / max_exact) * (half - max_exact)
    ).to(torch.long)
    val_if_large = val_if_large.clamp(max=half - 1)
    return torch.where(is_small, n, val_if_large) * sign


def relative_position_index(
    max_len: int, num_buckets: int | None = None, max_distance: int = 128, causal: bool = False
) -> tuple[Tensor, int]:
    r"""Table row of every (query ``i``, key ``j``) pair of a length-``max_len`` sequence.

    * Unique offsets (``num_buckets=None``): :math:`r + L_{max} - 1`, ``2 * max_len - 1`` rows.
    * Causal (``causal=True``, unique offsets only): the distance :math:`i - j = -r` for the
      reachable keys :math:`j \le i`, ``max_len`` rows (offsets ``0..L_max - 1``); future keys
      (:math:`j > i`) read row 0, a value that a causal mask makes irrelevant.
    * T5 buckets: the signed bucket of :func:`t5_relative_bucket`, plus 2 where non-negative,
      plus :math:`h - 1`; rows ``0..num_buckets`` (``num_buckets + 1`` rows, the rows
      :math:`h - 1` and :math:`h` are never used). The reference subtracts the minimum over its
      ``max_len`` instead of adding :math:`h - 1`; both agree whenever the most negative bucket
      is reached (``max_len = 128``, ``max_distance = 128``) and otherwise differ only by a
      relabelling of rows.

    Args:
        max_len: the longest sequence ``L_max``; shorter inputs use the ``[:N, :N]`` corner.
        num_buckets: ``None`` for unique offsets, else the T5 bucket count (even, >= 4).
        max_distance: T5 saturation distance.
        causal: one row per non-negative distance ``i - j`` (for causal attention).

    Returns:
        ``(index [L_max, L_max] long, num_rows)``.
    """
    pos = torch.arange(max_len, dtype=torch.long)
    rel = pos[None, :] - pos[:, None]  # [L, L], r = j - i
    if causal:
        if num_buckets is not None:
            raise ValueError("causal relative tables use one row per offset (num_buckets=None)")
        return (-rel).clamp(min=0), max_len
    if num_buckets is None:
        return rel + (max_len - 1), 2 * max_len - 1
    if num_buckets % 2 != 0:
        raise ValueError(f"num_buckets must be even, got {num_buckets}")
    bucket = t5_relative_bucket(rel, num_buckets, max_distance)
    bucket = torch.where(bucket >= 0, bucket + 2, bucket) + (num_buckets // 2 - 1)
    return bucket, num_buckets + 1


class RelativePositionTable(nn.Module):
    r"""A per-head Toeplitz matrix :math:`M_h[i, j] = t[\phi(j - i), h]` from a learned table.

    Used for both the additive bias :math:`B` (``init_value=None``: BERT init
    :math:`\mathcal{N}(0, 0.02)`) and the multiplicative URPE matrix :math:`C`
    (``init_value=1.0``).

    Args:
        max_len: longest sequence ``L_max``.
        num_heads: heads ``H``.
        num_buckets: ``None`` for one row per offset, else T5 buckets.
        max_distance: T5 saturation distance.
        init_value: constant initial value, or ``None`` for :math:`\mathcal{N}(0, 0.02)`.
        causal: one row per distance ``i - j >= 0`` (see :func:`relative_position_index`).

    Shapes:
        ``forward(seq_len)`` → ``[1, H, N, N]`` with ``N = seq_len <= L_max``;
        ``forward(seq_len, query_len)`` → ``[1, H, N_q, N]``, the last ``N_q`` query rows
        (queries that follow ``N - N_q`` earlier keys, e.g. a Transformer-XL memory).
    """

    index: Tensor

    def __init__(
        self,
        max_len: int,
        num_heads: int,
        num_buckets: int | None = None,
        max_distance: int = 128,
        init_value: float | None = None,
        causal: bool = False,
    ) -> None:
        super().__init__()
        index, rows = relative_position_index(max_len, num_buckets, max_distance, causal)
        self.causal = causal
        self.max_len = max_len
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.init_value = init_value
        self.register_buffer("index", index, persistent=False)  # [L_max, L_max]
        self.weight = nn.Parameter(torch.empty(rows, num_heads))  # [rows, H]
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Constant ``init_value``, or normal with std ``std`` when ``init_value`` is None."""
        if self.init_value is None:
            nn.init.normal_(self.weight, mean=0.0, std=std)
        else:
            nn.init.constant_(self.weight, self.init_value)

    def forward(self, seq_len: int, query_len: int | None = None) -> Tensor:
        if seq_len > self.max_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_len={self.max_len}")
        q = seq_len if query_len is None else query_len
        if not 0 < q <= seq_len:
            raise ValueError(f"query_len must be in [1, {seq_len}], got {query_len}")
        idx = self.index[seq_len - q : seq_len, :seq_len]  # [N_q, N]
        return F.embedding(idx, self.weight).permute(2, 0, 1).unsqueeze(0)  # [1, H, N_q, N]

    def by_offset(self) -> tuple[Tensor, Tensor]:
        """Values per head against the offset ``j - i``, for plotting.

        Returns:
            ``(offsets [2 L_max - 1], values [H, 2 L_max - 1])`` (detached, on the CPU); for a
            causal table only the offsets ``-(L_max - 1)..0`` (``L_max`` of them).
        """
        if self.causal:  # the last row holds the offsets -(L-1)..0
            offsets = torch.arange(-(self.max_len - 1), 1, device=self.index.device)
            return offsets.cpu(), self.weight.detach()[self.index[-1]].t().cpu()
        offsets = torch.arange(-(self.max_len - 1), self.max_len, device=self.index.device)
        # Row 0 of the index holds offsets 0..L-1, column 0 offsets -(L-1)..0.
        rows = torch.cat([self.index[1:, 0].flip(0), self.index[0, :]])
        return offsets.cpu(), self.weight.detach()[rows].t().cpu()

    def extra_repr(self) -> str:
        kind = "unique" if self.num_buckets is None else f"t5({self.num_buckets})"
        kind = "causal" if self.causal else kind
        return (
            f"max_len={self.max_len}, num_heads={self.num_heads}, rows={self.weight.shape[0]}, "
            f"index={kind}, init={self.init_value if self.init_value is not None else 'N(0,.02)'}"
        )


@dataclass
class SequenceModelConfig:
    """Configuration of :class:`SequenceTransformer`.

    Attributes:
        vocab: task vocabulary ``V``; the embedding and output have ``V + 11`` rows.
        max_len: longest sequence ``L_max`` (positions and relative tables are sized by it).
        width: model width ``d``.
        layers: number of post-LN encoder layers.
        heads: attention heads ``H``.
        ffn: feed-forward hidden width.
        pe: positional scheme, ``"none" | "ape" | "rpe" | "urpe"``.
        rel_buckets: ``None`` for one table row per relative offset (the paper's runs), else
            the number of T5 buckets.
        rel_max_distance: T5 saturation distance.
        share_scale: one URPE matrix ``C`` for all layers (reference) or one per layer.
        tie_weights: tie the output projection to the token embedding (the paper ties in
            ETP runs and unties in PI runs).
        init_std: standard deviation of the normal initialisation of every Linear /
            Embedding weight and of the ``B`` table (BERT: 0.02).
        dropout: residual-branch and embedding dropout.
        attention_dropout: dropout on the (URPE-scaled) attention probabilities.
        activation_dropout: dropout after the feed-forward GELU.
    """

    vocab: int = 1000
    max_len: int = 128
    width: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 256
    pe: PEName = "urpe"
    rel_buckets: int | None = None
    rel_max_distance: int = 128
    share_scale: bool = True
    tie_weights: bool = False
    init_std: float = 0.02
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0

    def __post_init__(self) -> None:
        check_choice("positional scheme", self.pe, PE_SCHEMES)
        if self.width % self.heads != 0:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")

    @property
    def dictionary_size(self) -> int:
        """Embedding / output rows, ``V + 11``."""
        return self.vocab + NUM_SPECIAL_TOKENS

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SequenceModelConfig:
        """A named architecture, with keyword overrides of any field (e.g. ``pe="rpe"``).

        * ``"paper"``: 3 layers, width 768, 12 heads, ffn 3072, BERT init std 0.02 (spec §5.2).
        * ``"cpu"``: 2 layers, width 64, 4 heads, ffn 256, init std 0.07. The std is scaled
          so that ``std * sqrt(width)`` (the scale of a projection's output) matches the
          paper's ``0.02 * sqrt(768)``; with 0.02 at width 64 every projection starts 3.5x
          smaller than in the paper model and the small model stays much longer on the
          chance plateau.
        """
        presets: dict[str, dict[str, Any]] = {
            "cpu": dict(width=64, layers=2, heads=4, ffn=256, init_std=0.07),
            "paper": dict(width=768, layers=3, heads=12, ffn=3072, init_std=0.02),
        }
        check_choice("model preset", name, sorted(presets))
        return cls(**{**presets[name], **overrides})


class EncoderShape(Protocol):
    """The fields of a sequence model's configuration that size its layer stack."""

    layers: int
    width: int
    heads: int
    ffn: int
    dropout: float
    attention_dropout: float


def sequence_encoder(cfg: EncoderShape, *, final_norm: bool, **layer: Any) -> Encoder:
    """The layer stack of a sequence model: ``cfg.layers`` layers of width ``cfg.width``,
    ``cfg.heads`` heads, feed-forward width ``cfg.ffn`` and ``cfg``'s dropouts; ``layer``:
    the other :class:`~graphormer_urpe.encoder.EncoderLayer` arguments. Maps ``[B, N, d]`` to
    ``[B, N, d]``."""
    shape = dict(embed_dim=cfg.width, ffn_dim=cfg.ffn, num_heads=cfg.heads)
    dropouts = dict(dropout=cfg.dropout, attention_dropout=cfg.attention_dropout)
    return Encoder(cfg.layers, final_norm=final_norm, **shape, **dropouts, **layer)


class SequenceTransformer(nn.Module):
    r"""RoBERTa-style encoder with no PE, absolute PE, RPE or URPE, and an LM head.

    .. math::
        h^{(0)} = \operatorname{LN}(E[x] + P), \qquad
        h^{(l)} = \operatorname{Layer}_l(h^{(l-1)}; B, C^{(l)}), \qquad
        \text{logits} = W\, \operatorname{LN}(\operatorname{GELU}(W_d h^{(L)} + b_d)) + b

    with :math:`P` the learned absolute embeddings (``ape`` only; positions start at 2 as in
    fairseq, padding tokens get position 1), post-LN layers, and :math:`W = E` when
    ``tie_weights``. Initialisation follows BERT: every Linear / Embedding weight
    :math:`\mathcal{N}(0, \sigma^2)` (``init_std`` :math:`\sigma`, 0.02 in BERT) with zero
    biases and padding rows, :math:`B` table :math:`\mathcal{N}(0, \sigma^2)`, :math:`C` table
    exactly 1. As in the reference code, an
    untied output projection is a bare parameter there and keeps PyTorch's default
    ``Linear`` initialisation.

    Padding tokens (id 1) are masked as keys: :math:`B = -\infty` and :math:`C = 0` on padded
    key columns; their own rows are computed but meaningless.

    Args:
        config: a :class:`SequenceModelConfig`.

    Shapes:
        - input ``tokens``: ``[B, N]`` long, ``N <= max_len``
        - output: ``[B, N, V + 11]`` logits
    """

    def __init__(self, config: SequenceModelConfig) -> None:
        super().__init__()
        self.config = config
        cfg = config
        d = cfg.width
        self.embed_tokens = nn.Embedding(cfg.dictionary_size, d, padding_idx=PAD_INDEX)
        self.embed_positions = (
            nn.Embedding(cfg.max_len + PAD_INDEX + 1, d, padding_idx=PAD_INDEX)
            if cfg.pe == "ape"
            else None
        )
        self.emb_layer_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(cfg.dropout)
        rel_kwargs = dict(
            max_len=cfg.max_len,
            num_heads=cfg.heads,
            num_buckets=cfg.rel_buckets,
            max_distance=cfg.rel_max_distance,
        )
        self.rel_bias = RelativePositionTable(**rel_kwargs) if cfg.pe in ("rpe", "urpe") else None
        self.rel_scales: nn.ModuleList | None = None
        if cfg.pe == "urpe":
            n_tables = 1 if cfg.share_scale else cfg.layers
            self.rel_scales = nn.ModuleList(
                [RelativePositionTable(**rel_kwargs, init_value=1.0) for _ in range(n_tables)]
            )
        self.encoder = sequence_encoder(
            cfg, final_norm=False, activation_dropout=cfg.activation_dropout, pre_ln=False
        )
        self.lm_dense = nn.Linear(d, d)
        self.lm_layer_norm = nn.LayerNorm(d)
        self.lm_weight: nn.Parameter | None = (
            None if cfg.tie_weights else nn.Parameter(torch.empty(cfg.dictionary_size, d))
        )
        self.lm_bias = nn.Parameter(torch.zeros(cfg.dictionary_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT initialisation (std ``config.init_std``); ``B`` ~ N(0, std), ``C`` = 1."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
            elif isinstance(module, RelativePositionTable):
                module.reset_parameters(std)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()
        if self.lm_weight is not None:
            nn.init.kaiming_uniform_(self.lm_weight, a=math.sqrt(5))
        nn.init.zeros_(self.lm_bias)

    @property
    def output_weight(self) -> Tensor:
        """``[V + 11, d]`` output projection (the token embedding when tied)."""
        return self.embed_tokens.weight if self.lm_weight is None else self.lm_weight

    def positional_matrices(
        self, seq_len: int, key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor | None, list[Tensor] | None]:
        """The ``B`` and per-layer ``C`` matrices for a length-``seq_len`` input.

        Args:
            seq_len: ``N``.
            key_padding_mask: ``[B, N]`` bool (``True`` = padding) or ``None``.

        Returns:
            ``(B [1, H, N, N] or None, [C_l [1 or B, H, N, N]] * layers or None)``; ``C`` is 0 on
            padded key columns.
        """
        bias = None if self.rel_bias is None else self.rel_bias(seq_len)
        if self.rel_scales is None:
            return bias, None
        tables = [t(seq_len) for t in self.rel_scales]  # each [1, H, N, N]
        if key_padding_mask is not None:
            pad = key_padding_mask[:, None, None, :]  # [B, 1, 1, N]
            tables = [t.masked_fill(pad, 0.0) for t in tables]
        if len(tables) == 1:
            tables = tables * self.config.layers
        return bias, tables

    def features(self, tokens: Tensor) -> Tensor:
        """Encoder output ``[B, N, d]`` for ``tokens`` ``[B, N]``."""
        if tokens.dim() != 2:
            raise ValueError(f"expected tokens of shape [B, N], got {list(tokens.shape)}")
        n = tokens.shape[1]
        if n > self.config.max_len:
            raise ValueError(f"sequence length {n} exceeds max_len={self.config.max_len}")
        pad = tokens.eq(PAD_INDEX)  # [B, N]
        key_padding_mask = pad if bool(pad.any()) else None
        x = self.embed_tokens(tokens)  # [B, N, d]
        if self.embed_positions is not None:
            not_pad = (~pad).long()
            positions = torch.cumsum(not_pad, dim=1) * not_pad + PAD_INDEX  # [B, N], from 2
            x = x + self.embed_positions(positions)
        x = self.dropout(self.emb_layer_norm(x))
        if key_padding_mask is not None:
            x = x * (~key_padding_mask).unsqueeze(-1).to(x.dtype)
        attn_bias, attn_scale = self.positional_matrices(n, key_padding_mask)
        return self.encoder(x, attn_bias, attn_scale, key_padding_mask)  # [B, N, d]

    def forward(self, tokens: Tensor) -> Tensor:
        h = self.features(tokens)  # [B, N, d]
        h = self.lm_layer_norm(F.gelu(self.lm_dense(h)))
        return F.linear(h, self.output_weight) + self.lm_bias  # [B, N, V + 11]
