r"""A small Transformer-XL: causal URPE attention with segment-level recurrence.

The decoder of Dai et al. (ACL 2019) on this library's attention core. A long token stream
is read in segments of ``tgt_len`` tokens; every layer attends to its own segment and to a
memory :math:`\tilde h^{(l)}` of the ``mem_len`` previous hidden states of the same layer,
kept without gradient:

.. math::
    \tilde h^{(l)}_{\tau+1} = \operatorname{sg}\big([\tilde h^{(l)}_\tau;\ h^{(l)}_\tau]\big)
    _{[-\text{mem\_len}:]}, \qquad
    h^{(l+1)}_{\tau+1} = \operatorname{Layer}_l\big(h^{(l)}_{\tau+1};
    \text{keys, values} = [\tilde h^{(l)}_{\tau+1};\ h^{(l)}_{\tau+1}]\big).

Query ``i`` of a segment sits at position ``M + i`` of the window of ``M + N`` keys
(``M`` memory states, ``N`` segment tokens) and may attend to keys ``j <= M + i``. Positions
enter in one of the four schemes of :mod:`graphormer_urpe.sequence.model`:

* ``"none"``: only the causal mask (a causal decoder still infers some order from it);
* ``"ape"``: learned absolute embeddings of the position in the window, ``M + i`` (so the
  first segment uses ``0..N-1`` and later ones ``M..M+N-1``; memory states keep the
  positions they were computed with). This is the simple scheme that Transformer-XL's paper
  argues against; it is here as the baseline;
* ``"rpe"``: a learned bias per head and distance, :math:`B_h[i, j] = b_h[(M + i) - j]`, for
  the distances ``0..mem_len + tgt_len - 1``. This is the simplest form of Transformer-XL's
  relative attention (its "global position bias" term alone, one scalar per head and
  distance, as in T5), not its sinusoidal content-position terms;
* ``"urpe"``: RPE plus a learned :math:`C_h[i, j] = c_h[(M + i) - j]` per head, initialised
  to 1, multiplying the attention probabilities (Luo et al., NeurIPS 2022);
* ``"xl"``: Transformer-XL's own relative attention (content-position terms with sinusoidal
  encodings, a projection :math:`W_R` per layer and the biases :math:`u, v` shared by all
  layers; :mod:`graphormer_urpe.sequence.xl_attention`), computed per layer as the core's
  additive bias :math:`B^{(l)}`;
* ``"xl-urpe"``: ``"xl"`` with URPE's :math:`C` as above (the paper's Transformer-XL row):

.. math::
    A_h = \operatorname{softmax}\!\Big(\frac{Q_h [\tilde K_h; K_h]^\top}{\sqrt{d_h}} + B_h
    + M_{causal}\Big) \odot C_h, \qquad M_{causal}[i, j] = -\infty \text{ for } j > M + i.

Here :math:`B_h` is the RPE table or, for ``xl``, the per-layer relative-attention terms.
The mask and :math:`B` go into the attention core's additive bias, so future keys get
probability exactly 0 and :math:`C` (which reads the distance-0 entry there) only ever
multiplies allowed positions; no query row is fully masked (its own key is allowed).

Layers are :class:`~graphormer_urpe.encoder.EncoderLayer` (post-LN as in Transformer-XL, or
pre-LN) with a GELU feed-forward block; the token embedding is tied to the output
projection and scaled by :math:`\sqrt{d}` as in Transformer-XL (for APE, after adding the
position embedding, so that both start at the same scale). With ``adaptive_cutoffs`` the
output is Transformer-XL's tied adaptive softmax
(:class:`~graphormer_urpe.sequence.adaptive_softmax.TiedAdaptiveLogSoftmax`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.core import PreparedBias, prepare_bias
from ..attention.dropout import Dropout
from .adaptive_softmax import TiedAdaptiveLogSoftmax
from .choices import LM_PE_SCHEMES, LMPEName, check_choice
from .model import RelativePositionTable, sequence_encoder
from .xl_attention import SegmentAttention, XLPositions, XLRelativeAttention, sinusoid_encoding

__all__ = [
    "LMPEName",
    "LM_PE_SCHEMES",
    "TransformerXLConfig",
    "TransformerXL",
    "causal_window_mask",
]


def causal_window_mask(
    query_len: int, memory_len: int, device: torch.device | None = None
) -> Tensor:
    """Where query ``i`` (at window position ``M + i``) may not attend key ``j``.

    Returns:
        ``[N, M + N]`` bool, ``True`` on the future keys ``j > M + i``.
    """
    keys = torch.arange(memory_len + query_len, device=device)
    queries = torch.arange(query_len, device=device) + memory_len
    return keys[None, :] > queries[:, None]


@dataclass
class TransformerXLConfig:
    """Configuration of :class:`TransformerXL`.

    Attributes:
        vocab_size: output classes (the corpus vocabulary).
        tgt_len: tokens per training segment ``N``.
        mem_len: memory states kept per layer ``M`` (0: no recurrence).
        width: model width ``d``.
        layers: number of layers.
        heads: attention heads ``H``.
        ffn: feed-forward hidden width.
        pe: positional scheme, ``"none" | "ape" | "rpe" | "urpe" | "xl" | "xl-urpe"``.
        share_scale: one URPE matrix ``C`` for all layers (as the synthetic model) or one per
            layer.
        pre_ln: pre-LN layers (plus a final LayerNorm) instead of Transformer-XL's post-LN.
        init_std: std of the normal initialisation of Linear / Embedding weights and ``B``.
        dropout: embedding, residual-branch and output dropout.
        attention_dropout: dropout on the attention probabilities (after ``C``).
        adaptive_cutoffs: cluster boundaries of a tied adaptive softmax (Transformer-XL on
            WikiText-103: 20000, 40000, 200000); those ``>= vocab_size`` are dropped, and
            none left means one full softmax.
    """

    vocab_size: int = 0
    tgt_len: int = 64
    mem_len: int = 64
    width: int = 128
    layers: int = 3
    heads: int = 4
    ffn: int = 512
    pe: LMPEName = "urpe"
    share_scale: bool = True
    pre_ln: bool = False
    init_std: float = 0.02
    dropout: float = 0.1
    attention_dropout: float = 0.0
    adaptive_cutoffs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_choice("positional scheme", self.pe, LM_PE_SCHEMES)
        if self.width % self.heads != 0:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")
        if self.relative_attention and self.width % 2 != 0:
            raise ValueError(f"{self.pe} needs an even width for its encodings, got {self.width}")
        self.adaptive_cutoffs = [int(c) for c in self.adaptive_cutoffs]
        if self.tgt_len < 1 or self.mem_len < 0:
            raise ValueError(
                f"need tgt_len >= 1 and mem_len >= 0, got {self.tgt_len}, {self.mem_len}"
            )

    @property
    def relative_attention(self) -> bool:
        """Whether positions enter through Transformer-XL's relative attention."""
        return self.pe in ("xl", "xl-urpe")

    @property
    def cutoffs(self) -> list[int]:
        """The adaptive-softmax cutoffs inside the vocabulary (empty: full softmax)."""
        return [c for c in self.adaptive_cutoffs if 0 < c < self.vocab_size]

    @property
    def window(self) -> int:
        """Longest key window ``mem_len + tgt_len`` (the relative tables' size)."""
        return self.mem_len + self.tgt_len

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "adaptive_cutoffs": list(self.adaptive_cutoffs)}


class TransformerXL(nn.Module):
    r"""Causal decoder with segment-level recurrence and none / APE / RPE / URPE / XL /
    XL-URPE positions.

    .. math::
        h^{(0)} = \operatorname{Drop}(\sqrt{d}\, (E[x] + P)), \qquad
        h^{(l+1)} = \operatorname{Layer}_l(h^{(l)}; \tilde h^{(l)}, B, C^{(l)}), \qquad
        \text{logits} = E\, \operatorname{Drop}(h^{(L)}) + b

    Args:
        config: a :class:`TransformerXLConfig` with ``vocab_size`` set.

    Shapes:
        - input ``tokens``: ``[B, N]`` long, ``N <= tgt_len + mem_len - M``
        - input ``memory``: ``None`` or one ``[B, M, d]`` tensor per layer
        - output: ``(logits [B, N, V], new memory: one [B, min(M + N, mem_len), d] per layer,
          or None when mem_len == 0)``; with an adaptive softmax the "logits" are its
          log-probabilities (the cross-entropy of both is the same)
    """

    def __init__(self, config: TransformerXLConfig) -> None:
        super().__init__()
        if config.vocab_size < 1:
            raise ValueError(f"vocab_size must be set (>= 1), got {config.vocab_size}")
        self.config = cfg = config
        d = cfg.width
        self.embed_tokens = nn.Embedding(cfg.vocab_size, d)
        self.embed_scale = math.sqrt(d)
        self.embed_positions = nn.Embedding(cfg.window, d) if cfg.pe == "ape" else None
        self.dropout = Dropout(cfg.dropout)
        rel = dict(max_len=cfg.window, num_heads=cfg.heads, causal=True)
        self.rel_bias = RelativePositionTable(**rel) if cfg.pe in ("rpe", "urpe") else None
        self.rel_scales: nn.ModuleList | None = None
        self.u: nn.Parameter | None = None
        self.v: nn.Parameter | None = None
        if cfg.relative_attention:  # Transformer-XL's u, v: [H, d_h], shared by all layers
            self.u = nn.Parameter(torch.zeros(cfg.heads, d // cfg.heads))
            self.v = nn.Parameter(torch.zeros(cfg.heads, d // cfg.heads))
        if cfg.pe in ("urpe", "xl-urpe"):
            n_tables = 1 if cfg.share_scale else cfg.layers
            self.rel_scales = nn.ModuleList(
                [RelativePositionTable(**rel, init_value=1.0) for _ in range(n_tables)]
            )
        self.encoder = sequence_encoder(
            cfg,
            final_norm=cfg.pre_ln,
            pre_ln=cfg.pre_ln,
            attention_cls=XLRelativeAttention if cfg.relative_attention else SegmentAttention,
        )
        self.out_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.adaptive = None
        if cfg.cutoffs:
            self.adaptive = TiedAdaptiveLogSoftmax(d, cfg.vocab_size, cfg.cutoffs)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, ``init_std``) Linear / Embedding weights, ``u``, ``v`` and adaptive-softmax
        cluster weights, zero biases, ``B`` ~ N(0, std), ``C`` = 1, LayerNorms at identity."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RelativePositionTable):
                module.reset_parameters(std)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()
            elif isinstance(module, TiedAdaptiveLogSoftmax):
                module.reset_parameters(std)
        for p in (self.u, self.v):
            if p is not None:
                nn.init.normal_(p, mean=0.0, std=std)
        nn.init.zeros_(self.out_bias)

    def attention_matrices(
        self, query_len: int, memory_len: int, device: torch.device
    ) -> tuple[PreparedBias | XLPositions, list[Tensor | None]]:
        """The causal bias (with ``B`` for RPE / URPE) and per-layer ``C`` of one segment.

        Returns:
            ``(bias [1, H|1, N, M + N] prepared, [C_l [1, H, N, M + N] or None] * layers)``;
            for ``xl`` / ``xl-urpe`` the bias is the :class:`XLPositions` from which every
            layer computes its own.
        """
        keys = memory_len + query_len
        future = causal_window_mask(query_len, memory_len, device)  # [N, M + N]
        attn_scale = self.scale_matrices(query_len, memory_len)
        bias = torch.zeros(future.shape, device=device).masked_fill(future, float("-inf"))
        if self.u is not None and self.v is not None:
            distances = torch.arange(keys, -1, -1, device=device)  # K, ..., 0
            enc = self.dropout(sinusoid_encoding(distances, self.config.width))  # [K + 1, d]
            return XLPositions(enc, self.u, self.v), attn_scale  # (causal by construction)
        bias = bias[None, None]  # [1, 1, N, M + N]
        if self.rel_bias is not None:
            bias = bias + self.rel_bias(keys, query_len)  # [1, H, N, M + N]
        return prepare_bias(bias), attn_scale

    def scale_matrices(self, query_len: int, memory_len: int) -> list[Tensor | None]:
        """URPE's ``C`` of every layer, ``[1, H, N, M + N]`` each, or ``None`` per layer."""
        if self.rel_scales is None:
            return [None] * self.config.layers
        keys = memory_len + query_len
        tables = [t(keys, query_len).contiguous() for t in self.rel_scales]  # [1, H, N, K]
        return tables * self.config.layers if len(tables) == 1 else tables

    def forward(
        self, tokens: Tensor, memory: list[Tensor] | None = None
    ) -> tuple[Tensor, list[Tensor] | None]:
        cfg = self.config
        if tokens.dim() != 2:
            raise ValueError(f"expected tokens of shape [B, N], got {list(tokens.shape)}")
        b, n = tokens.shape
        if memory is not None and len(memory) == 0:
            memory = None
        m = 0 if memory is None else int(memory[0].shape[1])
        if memory is not None and (
            len(memory) != cfg.layers or any(t.shape[0] != b or t.shape[1] != m for t in memory)
        ):
            shapes = [list(t.shape) for t in memory]
            raise ValueError(f"memory must be {cfg.layers} tensors [{b}, M, d], got {shapes}")
        if m + n > cfg.window:
            raise ValueError(
                f"memory ({m}) + segment ({n}) exceeds the window mem_len + tgt_len = {cfg.window}"
            )
        x = self.embed_tokens(tokens)  # [B, N, d]
        if self.embed_positions is not None:  # same scale as the tokens: added before sqrt(d)
            x = x + self.embed_positions(torch.arange(m, m + n, device=tokens.device))
        x = self.dropout(x * self.embed_scale)
        attn_bias, attn_scale = self.attention_matrices(n, m, tokens.device)
        inputs: list[Tensor] = []
        for i, layer in enumerate(self.encoder.layers):
            inputs.append(x)
            mem = None if memory is None else memory[i]
            x = layer(x, attn_bias, attn_scale[i], memory=mem)  # [B, N, d]
        if self.encoder.final_norm is not None:
            x = self.encoder.final_norm(x)
        x = self.dropout(x)
        if self.adaptive is not None:
            logits = self.adaptive(x, self.embed_tokens.weight, self.out_bias)  # [B, N, V]
        else:
            logits = F.linear(x, self.embed_tokens.weight, self.out_bias)  # [B, N, V]
        return logits, self.update_memory(memory, inputs)

    @torch.no_grad()
    def update_memory(
        self, memory: list[Tensor] | None, inputs: list[Tensor]
    ) -> list[Tensor] | None:
        """The last ``mem_len`` states of ``[memory; inputs]`` per layer, detached."""
        mem_len = self.config.mem_len
        if mem_len == 0:
            return None
        if memory is None:
            return [h[:, -mem_len:].detach() for h in inputs]
        return [
            torch.cat([old, h], dim=1)[:, -mem_len:].detach()
            for old, h in zip(memory, inputs, strict=True)
        ]
