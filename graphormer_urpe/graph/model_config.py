"""The architecture of a Graphormer / URPE-Graphormer model, its presets and table sizes.

Plain data, no torch: the command line builds its flags from :class:`GraphormerConfig` and
lists the presets without importing the model (:mod:`graphormer_urpe.graph.model`, which
re-exports every name here).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

__all__ = [
    "AttentionKind",
    "HeadKind",
    "GraphormerConfig",
    "PRESETS",
    "TABLES",
    "fit_tables",
    "get_preset",
]

AttentionKind = Literal["graphormer", "urpe"]
HeadKind = Literal["linear", "transform"]


@dataclass
class GraphormerConfig:
    """Architecture of a Graphormer / URPE-Graphormer model.

    Defaults are the ``zinc-slim`` preset (Graphormer v1's ZINC set-up).
    """

    num_layers: int = 12
    """Transformer layers ``L``."""
    hidden_dim: int = 80
    """Model width ``d``."""
    ffn_dim: int = 80
    """Feed-forward hidden width."""
    num_heads: int = 8
    """Attention heads ``H`` (``d`` must divide by ``H``)."""
    dropout: float = 0.1
    """Dropout on the residual branches."""
    attention_dropout: float = 0.1
    """Dropout on the attention probabilities (after URPE's ``C``)."""
    input_dropout: float = 0.1
    """Dropout on the input embeddings."""
    activation_dropout: float = 0.0
    """Dropout after the feed-forward GELU."""
    num_atoms: int = 64
    """Rows of the node-feature table (index ``raw + 2 + 512 f``; 0 = padding)."""
    num_degree: int = 64
    """Rows of each degree (in, out) embedding table."""
    num_edges: int = 64
    """Rows of the bond-feature table (index ``raw + 3 + 512 f``; 0 = padding)."""
    num_spatial: int = 40
    """Rows of the spatial bias table ``B`` (shortest-path distance + 1; 0 = padding)."""
    num_edge_dis: int = 40
    """Number of per-hop ``H x H`` edge-encoding matrices."""
    multi_hop_max_dist: int = 20
    """Hops of path bond features kept (20 for ZINC, 5 for PCQM4M)."""
    spatial_pos_max: int = 1024
    """Pairs at shortest-path distance ``>=`` this are masked."""
    attention: AttentionKind = "graphormer"
    """``graphormer`` (plain RPE) or ``urpe`` (adds the learned ``C``)."""
    urpe_num_buckets: int = 25
    """Rows of each URPE ``C`` table: shifted distances ``0..K-1`` (larger ones share row K-1)."""
    urpe_share_layers: bool = False
    """One URPE ``C`` table for all layers instead of one per layer."""
    num_targets: int = 1
    """``T``, outputs of the head (a run sets it from its dataset)."""
    num_mol_features: int = 0
    """``K``, per-molecule features (``batch.mol_features`` ``[B, K]``, e.g. normalised RDKit
    descriptors) joined to the graph token before the head; 0: none."""
    target_mean: list[float] | None = None
    """``[T]``: with ``target_std``, the head predicts standardised targets and the model
    returns ``head * target_std + target_mean`` (in the targets' own units); ``None``: the
    head's output as it is."""
    target_std: list[float] | None = None
    """``[T]``, see ``target_mean``."""
    pre_ln: bool = True
    """Pre-LN layers (Graphormer v1); ``False``: post-LN (Graphormer v2 / fairseq / Hugging
    Face)."""
    embedding_norm: bool = False
    """LayerNorm on the input embeddings (v2's ``encoder_normalize_before``)."""
    final_norm: bool = True
    """LayerNorm after the last layer (v1; v2 builds one for pre-LN but never applies it)."""
    embed_scale: float | None = None
    """Multiply the input embeddings by this (v2's ``embed_scale``; ``None``: 1)."""
    head: HeadKind = "linear"
    """``linear``: ``W h_0 + b`` (v1). ``transform``: v2's
    ``W LN(GELU(W_t h_0 + b_t)) + b`` with one scalar ``b`` shared by all outputs."""

    def __post_init__(self) -> None:
        if self.attention not in ("graphormer", "urpe"):
            raise ValueError(f"attention must be 'graphormer' or 'urpe', got {self.attention!r}")
        if self.head not in ("linear", "transform"):
            raise ValueError(f"head must be 'linear' or 'transform', got {self.head!r}")
        if (self.target_mean is None) != (self.target_std is None):
            raise ValueError("give target_mean and target_std together, or neither")
        if self.target_std is not None and self.target_mean is not None:
            if not len(self.target_mean) == len(self.target_std) == self.num_targets:
                raise ValueError(
                    f"target scaling needs num_targets={self.num_targets} values each, got "
                    f"{len(self.target_mean)} and {len(self.target_std)}"
                )
            if not min(self.target_std) > 0:
                raise ValueError(f"target_std must be positive, got {self.target_std}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim ({self.hidden_dim}) must be divisible by num_heads ({self.num_heads})"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GraphormerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown GraphormerConfig fields: {sorted(unknown)}")
        return cls(**d)


TABLES: dict[str, dict[str, int]] = {
    # ZINC featuriser: 1 atom-type column (28 types), 1 bond-type column (1..3).
    "zinc": dict(num_atoms=64, num_degree=64, num_edges=64, num_spatial=40, num_edge_dis=40),
    # OGB featuriser: 9 atom / 3 bond columns of up to 512 values each (Graphormer v2 sizes).
    "ogb": dict(
        num_atoms=512 * 9 + 1,
        num_degree=512,
        num_edges=512 * 3 + 1,
        num_spatial=512,
        num_edge_dis=128,
    ),
}
"""Embedding-table sizes that fit each featuriser's vocabulary."""


def _sized(*, layers: int, width: int, heads: int, **fields: Any) -> GraphormerConfig:
    """A configuration of ``layers`` layers of width ``width`` (feed-forward width too) with
    ``heads`` heads and the other ``fields``."""
    return GraphormerConfig(
        num_layers=layers, hidden_dim=width, ffn_dim=width, num_heads=heads, **fields
    )


# Both PCQM4Mv2 models: OGB-sized tables (9 atom / 3 bond features, 512 values each), 5 hops
# of path features, 32 rows per URPE C table.
_PCQM: dict[str, Any] = dict(multi_hop_max_dist=5, urpe_num_buckets=32, **TABLES["ogb"])
# Graphormer v2's dropouts (its attention dropout, 0.1, is v1's).
_V2_DROPOUT = dict(dropout=0.0, input_dropout=0.0, activation_dropout=0.1)

PRESETS: dict[str, GraphormerConfig] = {
    # Graphormer v1 "slim" on ZINC-subset (489k parameters): ZINC-sized tables.
    "zinc-slim": GraphormerConfig(),
    # A small model for CPU runs (the default of `graphormer-urpe train`).
    "small": _sized(
        layers=4, width=64, heads=8, dropout=0.0, input_dropout=0.0, multi_hop_max_dist=5
    ),
    # Graphormer base on PCQM4Mv2 (v2 hyper-parameters, v1 pre-LN architecture).
    "pcqm4mv2-base": _sized(layers=12, width=768, heads=32, **_V2_DROPOUT, **_PCQM),
    # Graphormer-Small on PCQM4M (12.5M parameters in the v1 README): L=6, d=ffn=512, H=32
    # (spec 3.2, by parameter count) with v1's defaults (dropout, attention and input dropout
    # 0.1); the same tables and path features as the base model.
    "pcqm4mv2-small": _sized(layers=6, width=512, heads=32, **_PCQM),
}


def fit_tables(config: GraphormerConfig, featurizer: str) -> GraphormerConfig:
    """``config`` with every embedding table at least as large as ``featurizer`` needs.

    Tables that are already large enough are kept, so ``pcqm4mv2-base`` is unchanged for OGB
    features and ``zinc-slim`` is unchanged for ZINC features.
    """
    if featurizer not in TABLES:
        raise KeyError(f"unknown featurizer {featurizer!r}; choose from {sorted(TABLES)}")
    grow = {k: v for k, v in TABLES[featurizer].items() if getattr(config, k) < v}
    if config.num_edge_dis < config.multi_hop_max_dist:
        grow["num_edge_dis"] = max(grow.get("num_edge_dis", 0), config.multi_hop_max_dist)
    return replace(config, **grow) if grow else config


def get_preset(name: str, **overrides) -> GraphormerConfig:
    """A copy of preset ``name`` with ``overrides`` applied (e.g. ``attention="urpe"``)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)
