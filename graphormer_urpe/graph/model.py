r"""The Graphormer encoder (optionally with URPE attention) and its regression head.

.. math::
    H^{(0)} = \operatorname{Drop}([g; h_1; \dots; h_n]), \quad
    H^{(l)} = \operatorname{Layer}_l(H^{(l-1)}; B, C^{(l)}), \quad
    \hat y = W \operatorname{LN}(H^{(L)})_0 + b

with pre-LN layers and a final LayerNorm (Graphormer v1, the presets), ``B`` from
:class:`~graphormer_urpe.graph.encodings.AttentionBias` (shared by every layer) and, for
``attention="urpe"``, ``C^{(l)}`` from :class:`~graphormer_urpe.graph.encodings.SpatialScale`
(per layer, or shared). With ``attention="graphormer"`` there is no ``C`` and attention skips
the multiply (and runs on PyTorch's fused kernel on GPUs).

Graphormer v2 (Microsoft's fairseq code, Hugging Face's port) is the same model with other
switches of :class:`GraphormerConfig`: post-LN layers (``pre_ln=False``), a LayerNorm on the
input embeddings (``embedding_norm``), no final LayerNorm (``final_norm=False``), an optional
``embed_scale`` and :class:`TransformHead` (``head="transform"``); see
:mod:`graphormer_urpe.graph.published_weights`.

The encoder runs on the real tokens only (graph tokens and nodes, ``[T, d]``, see
:class:`~graphormer_urpe.graph.encodings.GraphTokens`): padding is skipped by every per-token
operation and only the attention product sees the padded ``[B, H, n + 1, n + 1]`` grid. The
values equal those of the padded computation. A static batch (captured GPU steps) fixes ``T``
by adding a few padding positions to its real tokens.

Initialisation follows Graphormer v1: every ``Linear`` ~ N(0, 0.02/√L) with zero bias, every
embedding ~ N(0, 0.02) with the padding row zeroed (so padded path hops contribute nothing
and outputs do not depend on how a graph is batched), URPE scales 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.core import PreparedBias, prepare_bias
from ..attention.dropout import Dropout
from ..encoder import Encoder
from .batch import GraphormerBatch, collate
from .encodings import (
    AttentionBias,
    GraphTokens,
    LayerSpatialScales,
    NodeEmbedding,
    SpatialScale,
)
from .model_config import (
    PRESETS,
    TABLES,
    AttentionKind,  # noqa: F401 - re-exported
    GraphormerConfig,
    HeadKind,  # noqa: F401 - re-exported
    fit_tables,
    get_preset,
)

__all__ = [
    "GraphormerConfig",
    "PRESETS",
    "TABLES",
    "fit_tables",
    "get_preset",
    "GraphormerEncoder",
    "Graphormer",
    "TransformHead",
]

if TYPE_CHECKING:
    from torch_geometric.data import Batch, Data

    GraphInput = GraphormerBatch | Batch | Sequence[Data]


def __getattr__(name: str) -> Any:
    """``GraphInput``, the inputs the model takes, built on first use: PyG's ``Batch`` and
    ``Data`` are imported only when a caller needs them (a model fed dense batches never
    imports ``torch_geometric``)."""
    if name == "GraphInput":
        from torch_geometric.data import Batch, Data

        return GraphormerBatch | Batch | Sequence[Data]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GraphormerEncoder(nn.Module):
    r"""Graphormer (or URPE-Graphormer) encoder, usable as a layer in a PyG model.

    Accepts a PyG ``Batch`` (or list of ``Data``) whose graphs carry
    :class:`~graphormer_urpe.graph.transform.GraphormerFeatures` attributes (computed on the
    fly when absent), or a dense :class:`~graphormer_urpe.graph.batch.GraphormerBatch`.

    Args:
        config: the architecture; see :class:`GraphormerConfig` and :data:`PRESETS`.

    Shapes:
        - :meth:`forward`: → ``(node_emb [num_nodes, d], graph_emb [B, d])``, nodes in PyG's
          flat order (graph by graph).
        - :meth:`forward_dense`: ``GraphormerBatch`` → ``[B, n + 1, d]`` (position 0 = graph token,
          zeros on padding).
        - :meth:`forward_tokens`: ``GraphormerBatch`` → ``([T, d], GraphTokens)``, the real
          tokens only.
    """

    def __init__(self, config: GraphormerConfig | None = None, **overrides) -> None:
        super().__init__()
        config = replace(config or GraphormerConfig(), **overrides)
        self.config = config
        c = config
        self.node_embedding = NodeEmbedding(c.num_atoms, c.num_degree, c.hidden_dim)
        self.attention_bias = AttentionBias(
            c.num_heads, c.num_spatial, c.num_edges, c.num_edge_dis, c.multi_hop_max_dist
        )
        self.spatial_scale: SpatialScale | None = None
        if c.attention == "urpe":
            tables = 1 if c.urpe_share_layers else c.num_layers
            self.spatial_scale = SpatialScale(c.num_heads, c.urpe_num_buckets, tables)
        self.embedding_norm = nn.LayerNorm(c.hidden_dim) if c.embedding_norm else None
        self.input_dropout = Dropout(c.input_dropout)
        self.encoder = Encoder(
            c.num_layers,
            final_norm=c.final_norm,
            embed_dim=c.hidden_dim,
            ffn_dim=c.ffn_dim,
            num_heads=c.num_heads,
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            activation_dropout=c.activation_dropout,
            pre_ln=c.pre_ln,
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Graphormer v1 initialisation (see the module docstring)."""
        std_linear = 0.02 / math.sqrt(self.config.num_layers)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, std_linear)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if m.padding_idx is not None:
                    with torch.no_grad():
                        m.weight[m.padding_idx].zero_()
            elif isinstance(m, nn.LayerNorm):
                m.reset_parameters()
        if self.spatial_scale is not None:
            self.spatial_scale.reset_parameters()

    def collate(self, graphs: Batch | Sequence[Data]) -> GraphormerBatch:
        """Dense batch of ``graphs`` with this model's hop and distance limits."""
        return collate(graphs, self.config.multi_hop_max_dist, self.config.spatial_pos_max)

    def check_vocabulary(self, batch: GraphormerBatch) -> None:
        """Raise a clear error when a batch indexes past an embedding table.

        A featuriser with more feature columns than the tables were sized for (e.g. OGB's 9
        atom columns with the ZINC-sized ``zinc-slim`` tables) would otherwise fail deep
        inside ``nn.Embedding``; see :func:`fit_tables`.
        """
        c = self.config
        for name, t, size, field in (
            ("node feature", batch.x, c.num_atoms, "num_atoms"),
            ("degree", batch.in_degree, c.num_degree, "num_degree"),
            ("path bond feature", batch.path_input, c.num_edges, "num_edges"),
        ):
            if t.numel() and int(t.max()) >= size:
                raise ValueError(
                    f"a {name} index ({int(t.max())}) exceeds the embedding table ({field}="
                    f"{size}); size the tables for your featuriser, e.g. "
                    f"fit_tables(config, 'ogb')"
                )

    def _dense(self, data: GraphInput) -> GraphormerBatch:
        if not isinstance(data, GraphormerBatch):
            data = self.collate(data)
        if data.x.device.type == "cpu" and not torch.compiler.is_compiling():
            self.check_vocabulary(data)
        device = next(self.parameters()).device
        return data.to(device) if data.x.device != device else data

    def forward_tokens(
        self, batch: GraphormerBatch, graph_tokens_only: bool = False
    ) -> tuple[Tensor, GraphTokens]:
        """Representations of the real tokens after the last layer (and the final LayerNorm
        when the config has one).

        Args:
            batch: the dense batch.
            graph_tokens_only: return only the graph tokens, ``[B, d]`` (the last layer then
                updates nothing else).

        Returns:
            ``(h, tokens)``: ``h`` ``[T, d]`` graph by graph, the graph token then the nodes
            (``[B, d]`` with ``graph_tokens_only``); ``tokens`` says where each graph token and
            node is.
        """
        tokens = GraphTokens(batch)
        h = self._inputs(self.node_embedding.forward_tokens(batch, tokens))  # [T, d]
        attn_bias, attn_scale = self._attention_inputs(batch)
        h = self.encoder(
            h,
            attn_bias=attn_bias,
            attn_scale=attn_scale,
            layout=tokens.layout,
            first_token_only=graph_tokens_only,
        )
        return h, tokens

    def forward_padded(self, batch: GraphormerBatch, graph_tokens_only: bool = False) -> Tensor:
        """:meth:`forward_tokens` laid out on the padded ``[B, n + 1]`` grid.

        For a static batch (see :class:`~graphormer_urpe.graph.static_shapes.StaticShapes`) the
        encoder runs on the batch's fixed number of tokens (its real ones and padding positions
        up to the bucket, :attr:`~graphormer_urpe.graph.batch.GraphormerBatch.token_slots`):
        nothing in it is sized by the data, so the same operations run on tensors of the same
        shapes for every batch of a shape, and a captured GPU step replays them. Padded keys
        are masked, so the values at real positions equal those of the batch sized to its
        graphs.

        Returns:
            ``[B, n + 1, d]`` (any values on padding), or ``[B, d]`` with
            ``graph_tokens_only``.
        """
        h, tokens = self.forward_tokens(batch, graph_tokens_only)
        return h if graph_tokens_only else tokens.layout.pad(h)

    def forward_embedded(
        self, batch: GraphormerBatch, embeddings: Tensor, graph_tokens_only: bool = False
    ) -> Tensor:
        """:meth:`forward_padded` from given token embeddings instead of the batch's own.

        The attention bias ``B`` (and URPE's ``C``) still come from the batch's structure, so
        gradients with respect to ``embeddings`` are those of the atoms' embeddings alone (what
        integrated gradients needs, :mod:`graphormer_urpe.inference.explain.integrated_gradients`).

        Args:
            batch: the dense batch (its structure).
            embeddings: ``[B, n + 1, d]`` token embeddings, as
                :class:`~graphormer_urpe.graph.encodings.NodeEmbedding` gives them (position 0
                the graph token), before the input scale, norm and dropout.
            graph_tokens_only: return only the graph tokens.

        Returns:
            ``[B, n + 1, d]``, or ``[B, d]`` with ``graph_tokens_only``.
        """
        h = self._inputs(embeddings)  # [B, n + 1, d]
        attn_bias, attn_scale = self._attention_inputs(batch)
        return self.encoder(
            h, attn_bias=attn_bias, attn_scale=attn_scale, first_token_only=graph_tokens_only
        )

    def forward_graphs(self, batch: GraphormerBatch) -> Tensor:
        """Graph-token representations ``[B, d]`` (for a static batch all its ``B`` graphs,
        the empty ones included)."""
        return self.forward_tokens(batch, graph_tokens_only=True)[0]

    def _inputs(self, h: Tensor) -> Tensor:
        """Scaled, normalised and dropped-out input embeddings (any shape ``[*, d]``)."""
        if self.config.embed_scale is not None:
            h = h * self.config.embed_scale
        if self.embedding_norm is not None:
            h = self.embedding_norm(h)
        return self.input_dropout(h)

    def _attention_inputs(
        self, batch: GraphormerBatch
    ) -> tuple[PreparedBias, LayerSpatialScales | None]:
        """``B`` for every layer and the lazy per-layer ``C`` (``None`` without URPE)."""
        # B forbids padded keys (-inf from the batch's mask), so it is prepared once, here;
        # every row keeps its graph-token key, so no row is fully masked.
        bias = prepare_bias(self.attention_bias(batch), live_rows=True)  # [B, H, n+1, n+1]
        if self.spatial_scale is None:
            return bias, None
        attn_scale = LayerSpatialScales(
            self.spatial_scale, batch.spatial_pos, batch.node_mask, self.config.num_layers
        )
        return bias, attn_scale

    def forward_dense(self, batch: GraphormerBatch) -> Tensor:
        """Token representations ``[B, n + 1, d]`` after the last layer (0 on padding)."""
        if batch.static_shape is not None:
            h = self.forward_padded(batch)
            return h * batch.token_mask.unsqueeze(-1).to(h.dtype)
        h, tokens = self.forward_tokens(batch)
        return tokens.layout.pad(h)

    def forward(self, data: GraphInput) -> tuple[Tensor, Tensor]:
        batch = self._dense(data)
        if batch.static_shape is not None:  # the real graphs' nodes and tokens
            h = self.forward_padded(batch)[: batch.num_graphs]  # [B_real, n + 1, d]
            return h[:, 1:][batch.node_mask[: batch.num_graphs]], h[:, 0]
        h, tokens = self.forward_tokens(batch)  # [T, d]
        node_emb = h.index_select(0, tokens.node_index)  # [num_nodes, d]
        return node_emb, h.index_select(0, tokens.graph_index)


class TransformHead(nn.Module):
    r"""Graphormer v2's output head (fairseq and Hugging Face).

    .. math::
        \hat y = W \operatorname{LN}(\operatorname{GELU}(W_t h + b_t)) + b \mathbf{1}

    with ``W`` ``[T, d]`` (no bias) and one learned scalar ``b`` shared by all ``T`` outputs.

    Shapes:
        ``[B, d_in]`` → ``[B, T]`` (``d_in = d`` unless per-molecule features are joined).
    """

    def __init__(self, hidden_dim: int, num_targets: int, in_dim: int | None = None) -> None:
        super().__init__()
        self.transform = nn.Linear(in_dim or hidden_dim, hidden_dim)
        self.norm = nn.LayerNorm(hidden_dim)
        self.out = nn.Linear(hidden_dim, num_targets, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, h: Tensor) -> Tensor:
        return self.out(self.norm(F.gelu(self.transform(h)))) + self.bias


class Graphormer(nn.Module):
    r"""Graph-level predictor: :class:`GraphormerEncoder` + a head on the graph token.

    The head is ``Linear(d, T)`` (``config.head == "linear"``) or :class:`TransformHead`. With
    ``config.num_mol_features = K > 0`` it reads ``[h_0, m]``: the graph token joined to the
    batch's per-molecule features ``m`` ``[B, K]`` (``data.mol_x`` of each graph). With
    ``config.target_mean`` / ``target_std`` (see :meth:`set_target_scaling`) the head predicts
    standardised targets and :meth:`forward` returns them in the targets' own units.

    Shapes:
        graphs (``GraphormerBatch`` / PyG ``Batch`` / list of ``Data``) → ``[B, num_targets]``;
        for a static batch all its ``B`` rows, the real graphs first.
    """

    def __init__(self, config: GraphormerConfig | None = None, **overrides) -> None:
        super().__init__()
        self.encoder = GraphormerEncoder(config, **overrides)
        self.config = c = self.encoder.config
        in_dim = c.hidden_dim + c.num_mol_features
        self.head: nn.Module
        if c.head == "transform":
            self.head = TransformHead(c.hidden_dim, c.num_targets, in_dim)
        else:
            self.head = nn.Linear(in_dim, c.num_targets)
        # [T] each; not in the state dict: the config carries them (checkpoints keep loading)
        self.register_buffer("target_mean", torch.zeros(c.num_targets), persistent=False)
        self.register_buffer("target_std", torch.ones(c.num_targets), persistent=False)
        self.set_target_scaling(c.target_mean, c.target_std)
        self.reset_head()

    def set_target_scaling(self, mean: Sequence[float] | None, std: Sequence[float] | None) -> None:
        """Predict ``head * std + mean`` (``[T]`` each, e.g. the training targets' mean and
        standard deviation), or the head's output as it is (``None``, ``None``); recorded in
        ``config``."""
        self.config = self.encoder.config = replace(
            self.config,
            target_mean=None if mean is None else [float(v) for v in mean],
            target_std=None if std is None else [float(v) for v in std],
        )
        c = self.config
        self.target_mean.copy_(torch.tensor(c.target_mean or [0.0] * c.num_targets))
        self.target_std.copy_(torch.tensor(c.target_std or [1.0] * c.num_targets))

    def reset_head(self) -> None:
        """Initialise the head (Linear weights ~ N(0, 0.02/√L), zero biases, LN (1, 0))."""
        std = 0.02 / math.sqrt(self.config.num_layers)
        for m in self.head.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                m.reset_parameters()
        if isinstance(self.head, TransformHead):
            nn.init.zeros_(self.head.bias)

    def head_output_names(self) -> list[str]:
        """State-dict names of the head tensors whose shape or meaning depends on the outputs
        (re-initialised when fine-tuning on a task with another number of outputs)."""
        if isinstance(self.head, TransformHead):
            return ["head.out.weight", "head.bias"]
        return ["head.weight", "head.bias"]

    @classmethod
    def from_preset(cls, name: str, **overrides) -> Graphormer:
        """Build the model of preset ``name`` (see :data:`PRESETS`)."""
        return cls(get_preset(name, **overrides))

    def forward(self, data: GraphInput) -> Tensor:
        batch = self.encoder._dense(data)
        h = self.encoder.forward_graphs(batch)  # [B, d]
        return self.readout(h, batch.mol_features)

    def embed(self, data: GraphInput) -> tuple[GraphormerBatch, Tensor]:
        """The dense batch and its token embeddings ``[B, n + 1, d]`` (graph token first),
        the input of :meth:`forward_embedded`."""
        batch = self.encoder._dense(data)
        return batch, self.encoder.node_embedding(batch)

    def forward_embedded(
        self, batch: GraphormerBatch, embeddings: Tensor, mol_features: Tensor | None = None
    ) -> Tensor:
        """:meth:`forward` from token embeddings ``[B, n + 1, d]`` (see :meth:`embed`) and
        per-molecule features ``[B, K]`` (``None``: none): ``[B, num_targets]``."""
        h = self.encoder.forward_embedded(batch, embeddings, graph_tokens_only=True)  # [B, d]
        return self.readout(h, mol_features)

    def readout(self, h: Tensor, mol_features: Tensor | None = None) -> Tensor:
        """The head on graph-token representations ``h`` ``[B, d]`` joined to per-molecule
        features ``[B, K]`` where the config has them, in the targets' units:
        ``[B, num_targets]``."""
        return self.head_output(self.head_input(h, mol_features))

    def head_input(self, h: Tensor, mol_features: Tensor | None = None) -> Tensor:
        """What the head reads: graph-token representations ``h`` ``[B, d]``, joined to the
        per-molecule features ``[B, K]`` where the config has them: ``[B, d + K]``."""
        k = self.config.num_mol_features
        if not k:
            return h
        m = mol_features
        if m is None or m.shape != (h.shape[0], k):
            got = None if m is None else tuple(m.shape)
            raise ValueError(
                f"the model joins {k} per-molecule features to each graph; the batch has "
                f"mol_features {got} (give every graph data.mol_x [1, {k}])"
            )
        return torch.cat([h, m.to(h.dtype)], dim=1)  # [B, d + K]

    def head_output(self, x: Tensor) -> Tensor:
        """The head on its input ``x`` ``[B, d + K]`` (:meth:`head_input`), in the targets'
        units: ``[B, num_targets]``."""
        out = self.head(x)  # [B, num_targets]
        if self.config.target_std is not None:
            out = out * self.target_std + self.target_mean
        return out

    def forward_with_head_input(self, data: GraphInput) -> tuple[Tensor, Tensor]:
        """:meth:`forward` ``[B, num_targets]`` and the head's input ``[B, d + K]`` (the
        graph-level vector: the graph token's final representation, joined to the
        per-molecule features where the model uses them), from one pass."""
        batch = self.encoder._dense(data)
        x = self.head_input(self.encoder.forward_graphs(batch), batch.mol_features)
        return self.head_output(x), x
