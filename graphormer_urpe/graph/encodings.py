r"""Graphormer's input embeddings and relative-position matrices ``B`` and ``C``.

* :class:`NodeEmbedding`: :math:`h_i = \sum_f \mathrm{Atom}[x_{if}] + \mathrm{InDeg}[d_i]
  + \mathrm{OutDeg}[d_i]`, with a learned graph token prepended at position 0.
* :class:`AttentionBias` (``B``, shared by all layers):

  .. math::
      B_{h,ij} = \underbrace{b_h[\phi(i,j)]}_{\text{spatial}}
      + \underbrace{\frac{1}{\min(\max(\phi,1), D_{max})}
        \sum_{t} \big(\operatorname{mean}_f E[e^{(t)}_{ij,f}]\big)^\top W_t}_{\text{multi-hop edge}}

  plus the graph token's virtual distance :math:`t_h` on row 0 and column 0, and the batch's
  ``attn_bias`` mask (0 / ``-inf``).
* :class:`SpatialScale` (``C``, URPE): :math:`C_{h,ij} = c_h[\min(\phi(i,j), K-1)]` for
  node pairs, learned per-head scalars on the graph token's row and column, 0 on padded keys;
  one table per layer or one shared by all layers, every entry initialised to 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .batch import GraphormerBatch

__all__ = ["NodeEmbedding", "AttentionBias", "SpatialScale", "LayerSpatialScales"]


class NodeEmbedding(nn.Module):
    """Atom + degree embeddings and the graph token.

    Args:
        num_atoms: rows of the shared node-feature vocabulary (index 0 = padding).
        num_degree: rows of each degree table (index 0 = padding).
        hidden_dim: width ``d``.

    Shapes:
        ``batch.x`` ``[B, n, F]``, ``batch.in_degree`` ``[B, n]`` → ``[B, n + 1, d]``.
    """

    def __init__(self, num_atoms: int, num_degree: int, hidden_dim: int) -> None:
        super().__init__()
        self.atom_encoder = nn.Embedding(num_atoms, hidden_dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.out_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.graph_token = nn.Embedding(1, hidden_dim)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        h = self.atom_encoder(batch.x).sum(dim=-2)  # [B, n, d]
        h = h + self.in_degree_encoder(batch.in_degree) + self.out_degree_encoder(batch.out_degree)
        token = self.graph_token.weight.expand(h.shape[0], 1, -1)  # [B, 1, d]
        return torch.cat([token, h], dim=1)  # [B, n + 1, d]


class AttentionBias(nn.Module):
    r"""Graphormer's attention bias ``B``: spatial + multi-hop edge encoding + graph token.

    The multi-hop sum :math:`\sum_t \bar e_t W_t` is computed from per-hop projected tables
    :math:`P_t = E W_t` (``[D, num_edges, H]``): one gather of the rows of the real path hops
    and one scatter-add per node pair. This equals the reference's per-hop batched matrix
    product without materialising the ``[B, n, n, D, F_e, H]`` embeddings or touching padded
    hops.

    Args:
        num_heads: ``H``.
        num_spatial: rows of the spatial table (shifted distance; clamped to the last row).
        num_edges: rows of the bond-feature table (index 0 = padding).
        num_edge_dis: number of per-hop ``H x H`` matrices (>= ``multi_hop_max_dist``).
        multi_hop_max_dist: ``D_max``, the divisor cap.

    Shapes:
        ``GraphormerBatch`` → ``[B, H, n + 1, n + 1]`` float32.
    """

    def __init__(
        self,
        num_heads: int,
        num_spatial: int,
        num_edges: int,
        num_edge_dis: int,
        multi_hop_max_dist: int,
    ) -> None:
        super().__init__()
        if num_edge_dis < multi_hop_max_dist:
            raise ValueError(
                f"num_edge_dis ({num_edge_dis}) must be >= multi_hop_max_dist "
                f"({multi_hop_max_dist})"
            )
        self.num_heads = num_heads
        self.multi_hop_max_dist = multi_hop_max_dist
        self.edge_encoder = nn.Embedding(num_edges, num_heads, padding_idx=0)
        self.edge_dis_encoder = nn.Embedding(num_edge_dis * num_heads * num_heads, 1)
        self.spatial_pos_encoder = nn.Embedding(num_spatial, num_heads, padding_idx=0)
        self.graph_token_virtual_distance = nn.Embedding(1, num_heads)

    def edge_bias(self, spatial_pos: Tensor, edge_input: Tensor) -> Tensor:
        """Multi-hop edge encoding ``[B, n, n, H]`` from ``spatial_pos`` and ``edge_input``."""
        b, n, _, d, fe = edge_input.shape
        h = self.num_heads
        if d == 0:
            return edge_input.new_zeros((b, n, n, h), dtype=self.edge_encoder.weight.dtype)
        w = self.edge_dis_encoder.weight.view(-1, h, h)[:d]  # [D, H, H]
        table = torch.einsum("vh,thk->tvk", self.edge_encoder.weight, w)  # [D, V, H]
        num_edges = table.shape[1]
        # Only real path hops contribute (padding rows of E are zero): gather their projected
        # rows and sum them per node pair, instead of touching every padded [D, F_e] slot.
        flat = edge_input.reshape(b * n * n, d * fe)  # [P, D*F_e]
        pair, slot = (flat > 0).nonzero(as_tuple=True)  # [M] each
        rows = flat[pair, slot] + torch.div(slot, fe, rounding_mode="floor") * num_edges
        vals = table.reshape(d * num_edges, h).index_select(0, rows)  # [M, H]
        out = vals.new_zeros(b * n * n, h).index_add_(0, pair, vals)
        out = out.view(b, n, n, h) / fe
        divisor = (spatial_pos - 1).clamp(min=1, max=self.multi_hop_max_dist)  # [B, n, n]
        return out / divisor.unsqueeze(-1).to(out.dtype)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        spatial_pos = batch.spatial_pos.clamp(max=self.spatial_pos_encoder.num_embeddings - 1)
        node_bias = self.spatial_pos_encoder(spatial_pos)  # [B, n, n, H]
        node_bias = node_bias + self.edge_bias(batch.spatial_pos, batch.edge_input)
        bias = batch.attn_bias.unsqueeze(1).repeat(1, self.num_heads, 1, 1)  # [B, H, n+1, n+1]
        bias[:, :, 1:, 1:] += node_bias.permute(0, 3, 1, 2)
        t = self.graph_token_virtual_distance.weight.view(1, self.num_heads, 1)
        bias[:, :, 1:, 0] += t
        bias[:, :, 0, :] += t
        return bias


class SpatialScale(nn.Module):
    r"""URPE's multiplicative matrix ``C`` indexed by shortest-path distance.

    .. math::
        C_{h,ij} = c_h[\min(\phi(i,j), K - 1)] \;(i, j \ge 1), \quad
        C_{h,0j} = r_h, \quad C_{h,i0} = s_h \;(i \ge 1), \quad C_{h,ij} = 0 \text{ on padded } j

    with :math:`\phi` the shifted shortest-path distance (self = 1, unreachable = 511).

    Args:
        num_heads: ``H``.
        num_buckets: ``K``, rows per table (distances beyond ``K - 2`` hops share the last row).
        num_tables: 1 (shared by all layers) or the number of layers.

    Shapes:
        ``spatial_pos`` ``[B, n, n]``, ``node_mask`` ``[B, n]`` → ``[B, H, n + 1, n + 1]``.
    """

    def __init__(self, num_heads: int, num_buckets: int, num_tables: int = 1) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.scale = nn.Parameter(torch.empty(num_tables, num_buckets, num_heads))
        self.graph_token_scale = nn.Parameter(torch.empty(2, num_heads))  # row 0, column 0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """All entries 1.0: at initialisation URPE attention equals plain RPE attention."""
        nn.init.ones_(self.scale)
        nn.init.ones_(self.graph_token_scale)

    def index(self, spatial_pos: Tensor, node_mask: Tensor) -> Tensor:
        """Row of every ``C`` entry in the extended table of :meth:`lookup`.

        Rows ``0..K-1`` are distance buckets, ``K`` the graph token's row, ``K + 1`` its
        column, ``K + 2`` a constant 0 for padded keys.

        Returns:
            ``[B, n + 1, n + 1]`` long.
        """
        b, n, _ = spatial_pos.shape
        k = self.num_buckets
        idx = spatial_pos.new_empty(b, n + 1, n + 1)
        idx[:, 1:, 1:] = spatial_pos.clamp(max=k - 1)
        idx[:, 1:, 0] = k + 1
        idx[:, 0, :] = k
        pad = torch.cat([node_mask.new_ones(b, 1), node_mask], dim=1)  # [B, n+1] real keys
        return idx.masked_fill_(~pad[:, None, :], k + 2)

    def lookup(self, index: Tensor, table: int = 0) -> Tensor:
        """``C`` of table ``table`` at ``index`` (from :meth:`index`): ``[B, H, n+1, n+1]``."""
        zero = self.graph_token_scale.new_zeros(1, self.num_heads)
        rows = torch.cat([self.scale[table], self.graph_token_scale, zero])  # [K + 3, H]
        return F.embedding(index, rows).permute(0, 3, 1, 2)

    def forward(self, spatial_pos: Tensor, node_mask: Tensor, table: int = 0) -> Tensor:
        return self.lookup(self.index(spatial_pos, node_mask), table)


class LayerSpatialScales:
    """Lazy per-layer ``C``: item ``i`` is layer ``i``'s ``[B, H, n + 1, n + 1]`` matrix.

    Built once per forward pass and handed to :class:`~graphormer_urpe.encoder.Encoder`, so
    that only one layer's ``C`` is alive at a time.
    """

    def __init__(
        self, module: SpatialScale, spatial_pos: Tensor, node_mask: Tensor, num_layers: int
    ):
        self.module = module
        self.index = module.index(spatial_pos, node_mask)  # [B, n+1, n+1], shared by layers
        self.num_layers = num_layers
        self._shared: Tensor | None = None

    def __len__(self) -> int:
        return self.num_layers

    def __getitem__(self, layer: int) -> Tensor:
        if self.module.scale.shape[0] == 1:
            if self._shared is None:
                self._shared = self.module.lookup(self.index, 0)
            return self._shared
        return self.module.lookup(self.index, layer)
