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
* :class:`GraphTokens`: where the graph tokens and nodes of a batch sit among its ``T`` real
  tokens, so that the encoder runs on ``[T, d]`` instead of the padded ``[B, n + 1, d]``.

``B`` and ``C`` are built directly in the head-major ``[B, H, n + 1, n + 1]`` layout of the
attention product, as gathers from small tables at a flat index computed once per batch
(:func:`head_major_index`); ``C``'s backward is a batched GEMM against the one-hot index.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.attn_scale import IndexedAttnScale
from ..attention.kernel_choice import fused_kernel_for
from ..attention.token_layout import TokenLayout, true_positions
from ..utils.compiler import compiler_disable
from .batch import GraphormerBatch, hop_positions, pair_hops, path_input_from_dense

__all__ = [
    "head_major_index",
    "GraphTokens",
    "NodeEmbedding",
    "AttentionBias",
    "SpatialScale",
    "LayerSpatialScales",
]


class GraphTokens:
    """The real tokens of a :class:`GraphormerBatch`: each graph's token, then its nodes.

    Tokens are ordered graph by graph (graph token first, then the nodes in their order), so
    the nodes among them are in PyG's flat order.

    A static batch fixes ``T`` (:attr:`~graphormer_urpe.graph.batch.GraphormerBatch.
    token_slots`): its tokens are the real ones and some padding positions, which act as nodes
    of their graph without features (zero embeddings). Their keys are masked, so they change
    nothing at the real tokens and receive no gradient; every size is then the batch shape's.

    Args:
        batch: the dense batch (``n`` nodes per graph, ``n + 1`` tokens with the graph token).

    Attributes:
        layout: the :class:`~graphormer_urpe.attention.token_layout.TokenLayout` of the
            ``[B, n + 1]`` token grid.
        graph_index: ``[B]`` long, position of every graph token among the ``T`` tokens.
        node_index: ``[T - B]`` long, position of every node (the real nodes, and a static
            batch's padding tokens) among the ``T`` tokens.
        node_flat: ``[T - B]`` long, position of every node in ``[B * n]``.
        source: ``[T]`` long, row of each token in ``cat([graph tokens [B], nodes])``.
    """

    @compiler_disable  # data-dependent sizes: built eagerly, used by compiled code
    def __init__(self, batch: GraphormerBatch) -> None:
        b, n = batch.node_mask.shape
        # sizes known on the host (from the collate function) spare reading them back
        if batch.token_slots is not None and batch.static_shape is not None:
            real, count = batch.token_slots, batch.static_shape[3]  # [B, n+1]
        else:
            real = batch.token_mask  # [B, n+1]
            count = None if batch.total_nodes is None else batch.total_nodes + b
        self.layout = TokenLayout(real, count, first_real=True)
        pos = self.layout.index  # [T] in [B * (n + 1)]
        is_graph = pos % (n + 1) == 0  # [T]
        self.graph_index = true_positions(is_graph, None if count is None else b)  # [B]
        self.node_index = true_positions(~is_graph, None if count is None else count - b)
        node_pos = pos.index_select(0, self.node_index)
        self.node_flat = node_pos - node_pos // (n + 1) - 1  # (g, i + 1) -> g * n + i
        rank_graph = torch.cumsum(is_graph, 0) - 1
        rank_node = torch.arange(pos.shape[0], device=pos.device) - rank_graph - 1 + b
        self.source = torch.where(is_graph, rank_graph, rank_node)  # [T]

    @property
    def num_tokens(self) -> int:
        """``T`` = graphs + real nodes."""
        return self.layout.num_tokens


class NodeEmbedding(nn.Module):
    """Atom + degree embeddings and the graph token.

    Args:
        num_atoms: rows of the shared node-feature vocabulary (index 0 = padding).
        num_degree: rows of each degree table (index 0 = padding).
        hidden_dim: width ``d``.

    Shapes:
        ``batch.x`` ``[B, n, F]``, ``batch.in_degree`` ``[B, n]`` → ``[B, n + 1, d]``;
        :meth:`forward_tokens` → the real tokens ``[T, d]`` (see :class:`GraphTokens`).
    """

    def __init__(self, num_atoms: int, num_degree: int, hidden_dim: int) -> None:
        super().__init__()
        self.atom_encoder = nn.Embedding(num_atoms, hidden_dim, padding_idx=0)
        self.in_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.out_degree_encoder = nn.Embedding(num_degree, hidden_dim, padding_idx=0)
        self.graph_token = nn.Embedding(1, hidden_dim)

    def _nodes(self, x: Tensor, in_degree: Tensor, out_degree: Tensor) -> Tensor:
        """``x`` ``[M, F]``, degrees ``[M]`` → ``[M, d]``."""
        h = F.embedding_bag(x, self.atom_encoder.weight, mode="sum", padding_idx=0)  # [M, d]
        return h + self.in_degree_encoder(in_degree) + self.out_degree_encoder(out_degree)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        b, n, f = batch.x.shape
        h = self._nodes(
            batch.x.reshape(b * n, f), batch.in_degree.reshape(-1), batch.out_degree.reshape(-1)
        )
        token = self.graph_token.weight.expand(b, 1, -1)  # [B, 1, d]
        return torch.cat([token, h.view(b, n, -1)], dim=1)  # [B, n + 1, d]

    def forward_tokens(self, batch: GraphormerBatch, tokens: GraphTokens) -> Tensor:
        """Embeddings of the real tokens only: ``[T, d]`` in :class:`GraphTokens` order."""
        b, n, f = batch.x.shape
        rows = tokens.node_flat
        h = self._nodes(
            batch.x.reshape(b * n, f).index_select(0, rows),
            batch.in_degree.reshape(-1).index_select(0, rows),
            batch.out_degree.reshape(-1).index_select(0, rows),
        )  # [num_nodes, d]
        token = self.graph_token.weight.expand(b, -1)  # [B, d]
        return torch.cat([token, h]).index_select(0, tokens.source)  # [T, d]


class AttentionBias(nn.Module):
    r"""Graphormer's attention bias ``B``: spatial + multi-hop edge encoding + graph token.

    The multi-hop sum :math:`\sum_t \bar e_t W_t` is computed from per-hop projected tables
    :math:`P_t = E W_t` (``[D, num_edges, H]``): the real path hops of every node pair (listed
    from the shortest-path distances) form one bag of table rows, summed by one
    ``embedding_bag`` (backward: one gather and one ``index_add``). This equals the
    reference's per-hop batched matrix product without materialising the
    ``[B, n, n, D, F_e, H]`` embeddings or touching padded hops.

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
        """Multi-hop edge encoding ``[B, n, n, H]`` from ``spatial_pos`` and a dense
        ``edge_input`` ``[B, n, n, D, F_e]``."""
        n, d = spatial_pos.shape[1], edge_input.shape[3]
        path_input = path_input_from_dense(spatial_pos, edge_input)
        return self._edge_sum(spatial_pos, path_input, d, n).permute(0, 2, 3, 1)

    def _edge_sum(
        self,
        spatial_pos: Tensor,
        path_input: Tensor,
        d: int,
        m: int,
        path_hop: Tensor | None = None,
    ) -> Tensor:
        """Multi-hop edge encoding on a ``[B, m, m]`` grid whose last ``n`` rows and columns
        are the nodes (``m = n``, or ``n + 1`` with the graph token first), from
        ``spatial_pos`` ``[B, n, n]`` and the ``[M, F_e]`` features of the ``d``-hop paths
        (see :class:`~graphormer_urpe.graph.batch.GraphormerBatch`), whose hop indices
        ``path_hop`` ``[M]`` a static batch gives.

        Returns:
            ``[B, H, m, m]`` (contiguous), 0 outside node pairs.
        """
        b, fe, h = spatial_pos.shape[0], path_input.shape[1], self.num_heads
        weight = self.edge_encoder.weight
        if d == 0 or fe == 0:
            return weight.new_zeros(b, h, m, m)
        w = self.edge_dis_encoder.weight.view(-1, h, h)[:d]  # [D, H, H]
        table = torch.einsum("vh,thk->tvk", weight, w)  # [D, V, H], P_t = E W_t
        v = table.shape[1]
        # feature 0 (none) reads a zero row at every hop
        table = torch.cat([table.new_zeros(d, 1, h), table[:, 1:]], dim=1).view(d * v, h)
        rows, offsets, inv = _path_hops(
            spatial_pos, path_input, d, m, v, self.multi_hop_max_dist, table.dtype, path_hop
        )
        out = _HopSum.apply(table, rows, offsets, inv, b)  # [B, H, m*m]
        return out.view(b, h, m, m)

    def forward(self, batch: GraphormerBatch) -> Tensor:
        b, n = batch.spatial_pos.shape[:2]
        m, h = n + 1, self.num_heads
        s = self.spatial_pos_encoder.num_embeddings
        # One gather from [spatial rows; graph-token distance t; -inf; 0] for the whole grid.
        sp = batch.spatial_pos
        idx = sp.new_full((b, m, m), s)  # graph-token row and column -> t
        # padded pairs (0) read a constant zero row, so the padding row gets no gradient
        idx[:, 1:, 1:] = sp.clamp(max=s - 1).masked_fill_(sp == 0, s + 2)
        idx.masked_fill_(torch.isneginf(batch.attn_bias), s + 1)  # forbidden pairs -> -inf
        w = self.spatial_pos_encoder.weight
        table = torch.cat(
            [
                w,
                self.graph_token_virtual_distance.weight,
                w.new_full((1, h), float("-inf")),
                w.new_zeros(1, h),
            ]
        )  # [S + 3, H]
        bias = table.view(-1).index_select(0, head_major_index(idx, h)).view(b, h, m, m)
        edge = self._edge_sum(
            batch.spatial_pos, batch.path_input, batch.max_hops, m, batch.path_hop
        )
        return bias + edge  # [B, H, m, m]


@compiler_disable  # data-dependent sizes: built eagerly, used by compiled code
def _path_hops(
    spatial_pos: Tensor,
    path_input: Tensor,
    d: int,
    m: int,
    num_edges: int,
    max_dist: int,
    dtype: torch.dtype,
    path_hop: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The path hops of a batch as bags of table rows, one bag per grid cell.

    Args:
        spatial_pos: ``[B, n, n]`` shifted distances (0 = padding).
        path_input: ``[M, F_e]`` shifted bond features of the hops (0 = none), in
            :func:`~graphormer_urpe.graph.batch.hop_positions` order; ``M`` is known on the
            host, so nothing is read back from the device.
        d: ``D``, hops kept per pair.
        m: side of the output grid (node ``i`` at row ``i + m - n``).
        num_edges: ``V``, rows per hop in the table (row ``t * V + e`` = hop ``t``,
            feature ``e``; rows ``t * V`` are zero).
        max_dist: ``D_max``, the divisor cap.
        dtype: dtype of the returned scales.
        path_hop: ``[M]`` the hop index of every row (a static batch's, whose rows past the
            real hops are feature 0 at hop 0 and fall into the last cell's bag, adding zero
            rows); ``None``: derived from ``spatial_pos``.

    Returns:
        ``(rows [M * F_e], offsets [B*m*m], inv [B*m*m])``: table rows, start of each
        cell's bag, and each cell's ``1 / (F_e min(max(s, 1), D_max))``.
    """
    b, n, _ = spatial_pos.shape
    fe = path_input.shape[1]
    device = spatial_pos.device
    if path_hop is None:
        hops, _, hop = hop_positions(spatial_pos, d, path_input.shape[0])  # [P], [M]
    else:  # nothing sized by the data: a captured step replays it for any batch of its shape
        hops, hop = pair_hops(spatial_pos.reshape(-1), d), path_hop
    rows = path_input + (hop * num_edges).unsqueeze(1)  # [M, F_e]
    cell = torch.arange(b * m * m, device=device).view(b, m, m)[:, m - n :, m - n :]
    cell = cell.reshape(-1)  # [P], grid cell of each node pair
    count = torch.zeros(b * m * m, dtype=torch.long, device=device)
    count[cell] = hops * fe
    offsets = torch.cumsum(count, 0) - count  # [B*m*m], start of each cell's bag
    divisor = (spatial_pos.reshape(-1) - 1).clamp(min=1, max=max_dist)  # [P]
    inv = torch.ones(b * m * m, dtype=dtype, device=device)
    # in float32 and then cast: CUDA autocast runs reciprocal in float32 whatever its input
    inv[cell] = (1.0 / (fe * divisor).float()).to(dtype)  # mean over F_e, / min(max(s,1), D_max)
    return rows.reshape(-1), offsets, inv


def head_major_index(index: Tensor, num_heads: int) -> Tensor:
    """Flat positions in a row-major ``[R, H]`` table of ``table[index[b, i, j], h]``.

    Gathering a flattened table at these positions yields ``[B, H, m, m]`` directly (no
    permute of a ``[B, m, m, H]`` lookup); the backward is a single 1-D ``index_add``.

    Args:
        index: ``[B, m, m]`` row of every entry.
        num_heads: ``H``.

    Returns:
        ``[B * H * m * m]`` int32 (halves the memory traffic of the gather and its backward).
    """
    heads = torch.arange(num_heads, device=index.device, dtype=torch.int32).view(1, -1, 1, 1)
    return (index.to(torch.int32).unsqueeze(1) * num_heads + heads).reshape(-1)


class _HopSum(torch.autograd.Function):
    """Per-cell sums of table rows, scaled, in head-major layout.

    ``out[g, :, c] = inv[q] * sum(table[rows[e]] for e in bag q)`` with ``q = g * C + c``
    (bag ``q`` = ``rows[offsets[q] : offsets[q + 1]]``): a sum ``embedding_bag`` whose
    backward is one gather and one ``index_add`` (no sort).

    Shapes:
        ``table`` ``[R, H]``; ``rows`` ``[E]``; ``offsets`` / ``inv`` ``[B * C]`` →
        ``[B, H, C]`` contiguous.
    """

    @staticmethod
    def forward(ctx, table: Tensor, rows: Tensor, offsets: Tensor, inv: Tensor, b: int) -> Tensor:
        ctx.save_for_backward(rows, offsets, inv)
        ctx.table_shape = table.shape
        out = F.embedding_bag(rows, table, offsets, mode="sum").mul_(inv.unsqueeze(1))
        return out.view(b, -1, table.shape[1]).transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, offsets, inv = ctx.saved_tensors
        h, e = ctx.table_shape[1], rows.shape[0]
        sizes = torch.diff(offsets, append=offsets.new_full((1,), e))  # [B*C] rows per bag
        cells = torch.arange(offsets.shape[0], device=offsets.device)
        bag = torch.repeat_interleave(cells, sizes, output_size=e)  # [E], cell of each row
        per_cell = grad.transpose(1, 2).reshape(-1, h) * inv.unsqueeze(1)  # [B*C, H]
        per_row = per_cell.index_select(0, bag)  # [E, H]
        d_table = grad.new_zeros(ctx.table_shape).index_add_(0, rows, per_row)
        return d_table, None, None, None, None


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

    def head_index(self, index: Tensor) -> Tensor:
        """Flat positions in the ``[K + 3, H]`` extended table of every ``C`` entry.

        Args:
            index: ``[B, n + 1, n + 1]`` from :meth:`index`.

        Returns:
            ``[B * H * (n + 1)^2]`` int32, in ``[B, H, n + 1, n + 1]`` order.
        """
        return head_major_index(index, self.num_heads)

    def rows(self, table: int = 0) -> Tensor:
        """``[K + 3, H]``: table ``table``'s buckets, the graph token's row and column
        scalars, and a zero row (the extended table that :meth:`index` points into)."""
        zero = self.graph_token_scale.new_zeros(1, self.num_heads)
        return torch.cat([self.scale[table], self.graph_token_scale, zero])

    def _gather(
        self, flat: Tensor, table: int, b: int, m: int, onehot: Tensor | None = None
    ) -> Tensor:
        rows = self.rows(table)  # [K + 3, H]
        if onehot is None:
            return rows.view(-1).index_select(0, flat).view(b, self.num_heads, m, m)
        return _ScaleGather.apply(rows, flat, onehot).view(b, self.num_heads, m, m)

    def lookup(self, index: Tensor, table: int = 0) -> Tensor:
        """``C`` of table ``table`` at ``index`` (from :meth:`index`): ``[B, H, n+1, n+1]``."""
        b, m, _ = index.shape
        return self._gather(self.head_index(index), table, b, m)

    def forward(self, spatial_pos: Tensor, node_mask: Tensor, table: int = 0) -> Tensor:
        return self.lookup(self.index(spatial_pos, node_mask), table)


class LayerSpatialScales:
    """Lazy per-layer ``C``: item ``i`` is layer ``i``'s ``[B, H, n + 1, n + 1]`` matrix, or,
    where the fused attention kernel runs (see
    :func:`~graphormer_urpe.attention.kernel_choice.attention_kernel`), its
    :class:`~graphormer_urpe.attention.attn_scale.IndexedAttnScale`: the ``[K + 3, H]`` table
    and the ``[B, n + 1, n + 1]`` index, never materialised.

    Built once per forward pass and handed to :class:`~graphormer_urpe.encoder.Encoder`, so
    that only one layer's ``C`` is alive at a time; the gather index is shared by the layers.
    """

    def __init__(
        self, module: SpatialScale, spatial_pos: Tensor, node_mask: Tensor, num_layers: int
    ):
        self.module = module
        self.index = module.index(spatial_pos, node_mask)  # [B, n+1, n+1], shared by layers
        self.num_layers = num_layers
        self.fused = fused_kernel_for(self.index.device)
        self._shared: Tensor | None = None
        if self.fused:
            self.index = self.index.to(torch.int32)
            return
        self.flat = module.head_index(self.index)  # [B * H * (n+1)^2]
        b, m, _ = self.index.shape
        rows = module.num_buckets + 3
        dtype = module.scale.dtype
        self.onehot = torch.zeros(b, m * m, rows, dtype=dtype, device=self.index.device)
        self.onehot.scatter_(2, self.index.view(b, m * m, 1), 1.0)  # [B, (n+1)^2, K + 3]

    def __len__(self) -> int:
        return self.num_layers

    def __getitem__(self, layer: int) -> Tensor | IndexedAttnScale:
        b, m, _ = self.index.shape
        if self.fused:
            table = min(layer, self.module.scale.shape[0] - 1)  # 0 when shared by all layers
            return IndexedAttnScale(self.module.rows(table), self.index)
        if self.module.scale.shape[0] == 1:
            if self._shared is None:
                self._shared = self.module._gather(self.flat, 0, b, m, self.onehot)
            return self._shared
        return self.module._gather(self.flat, layer, b, m, self.onehot)


class _ScaleGather(torch.autograd.Function):
    """``C = rows[index]`` in head-major layout, with a batched GEMM against the one-hot
    index as backward (a scatter-add of every ``C`` entry into ``K + 3`` rows would be
    serial on CPUs).

    Shapes:
        ``rows`` ``[R, H]``; ``flat`` ``[B * H * M]`` (:func:`head_major_index`);
        ``onehot`` ``[B, M, R]`` float → ``[B * H * M]``.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, flat: Tensor, onehot: Tensor) -> Tensor:
        ctx.save_for_backward(onehot)
        return rows.reshape(-1).index_select(0, flat)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (onehot,) = ctx.saved_tensors
        b, mm, _ = onehot.shape
        per_graph = torch.bmm(grad.reshape(b, -1, mm).to(onehot.dtype), onehot)  # [B, H, R]
        return per_graph.sum(0).t(), None, None
