r"""Dense, padded batches of graphs for Graphormer.

:func:`collate` turns a list of PyG ``Data`` objects carrying
:class:`~graphormer_urpe.graph.transform.GraphormerFeatures` attributes into a
:class:`GraphormerBatch` of ``B`` graphs padded to ``n`` = the largest graph's node count.
Every index tensor is shifted so that **0 is padding**:

* ``x``: ``raw + 2 + 512 f`` for node-feature column ``f``
* ``in_degree`` / ``out_degree``: ``degree + 1``
* ``spatial_pos``: ``SPD + 1`` (diagonal 1, unreachable 511)
* ``path_input``: ``raw + 3 + 512 f`` for the bond features of every path hop (0 = none);
  :attr:`GraphormerBatch.edge_input` lays them out densely as ``[B, n, n, D, F_e]``

``attn_bias`` ``[B, n+1, n+1]`` (row/column 0 = graph token) is 0 where attention is allowed
and ``-inf`` on padded keys and on pairs whose raw distance is ``>= spatial_pos_max``; padded
*query* rows get 0 on the real keys so that no softmax row is entirely ``-inf``.

``pad_to_multiple=m`` pads further so that the attention length ``n + 1`` (graph token
included) is a multiple of ``m`` (e.g. 8 for GPU tensor cores); the extra positions are padding
like any other (masked keys, ``node_mask`` ``False``).

``static=StaticShapes(...)`` gives the batch one of a few fixed shapes (see
:mod:`~graphormer_urpe.graph.static_shapes`): ``B`` graphs (empty ones added), ``n + 1`` and the
path-hop rows rounded up to buckets, ``D`` fixed. Such a batch also carries the hop index of
every path row (:attr:`GraphormerBatch.path_hop`) and the ``T`` token positions its encoder
runs on (:attr:`GraphormerBatch.token_slots`: the real tokens and enough padding positions to
reach a bucketed count), so that the model computes nothing whose size depends on the data:
what a captured GPU step needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .flat_graphs import FlatGraphs
from .static_shapes import StaticShapes
from .structure import FEATURE_OFFSET, UNREACHABLE, has_graphormer_features

if TYPE_CHECKING:  # PyG is imported where PyG graphs are handled (batches of FlatGraphs need none)
    from torch_geometric.data import Batch, Data

    from .transform import GraphormerFeatures

__all__ = [
    "GraphormerBatch",
    "attention_length",
    "collate",
    "GraphormerCollator",
    "pair_hops",
    "hop_positions",
    "dense_edge_input",
    "path_input_from_dense",
]


def pair_hops(spatial_pos: Tensor, max_hops: int) -> Tensor:
    """Path hops stored per node pair: ``min(s, max_hops)`` for a pair at distance ``s``, 0 for
    padding, the diagonal and unreachable pairs.

    Args:
        spatial_pos: ``[*]`` shifted distances (distance + 1; 0 = padding).
        max_hops: ``D``, hops kept per pair (``edge_input.shape[3]``).

    Returns:
        ``[*]`` long.
    """
    hops = (spatial_pos - 1).clamp(min=0, max=max_hops)
    return hops.masked_fill_(spatial_pos > UNREACHABLE, 0)


def hop_positions(
    spatial_pos: Tensor, max_hops: int, total: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Every path hop of a batch: its node pair and its index on the pair's path.

    Hops are listed pair after pair (row-major over ``spatial_pos``), each pair's
    :func:`pair_hops` hops in path order: the order of the rows of
    :attr:`GraphormerBatch.path_input`.

    Args:
        spatial_pos: ``[*]`` shifted distances (distance + 1; 0 = padding).
        max_hops: ``D``.
        total: ``M`` = the number of hops when known on the host (no device read-back).

    Returns:
        ``(hops [P], pair [M], hop [M])``: hops per pair (``P = spatial_pos.numel()``), the
        flat pair of each hop and its index ``0..D-1``.
    """
    hops = pair_hops(spatial_pos.reshape(-1), max_hops)  # [P]
    device = hops.device
    pair = torch.repeat_interleave(
        torch.arange(hops.shape[0], device=device), hops, output_size=total
    )  # [M]
    first = torch.cumsum(hops, 0) - hops  # [P], first hop of each pair
    hop = torch.arange(pair.shape[0], device=device) - first.index_select(0, pair)  # [M]
    return hops, pair, hop


def dense_edge_input(spatial_pos: Tensor, path_input: Tensor, max_hops: int) -> Tensor:
    """Path bond features laid out densely.

    Args:
        spatial_pos: ``[B, n, n]`` shifted distances.
        path_input: ``[M, F_e]`` the batch's hops' features (see :class:`GraphormerBatch`).
        max_hops: ``D``.

    Returns:
        ``[B, n, n, D, F_e]`` long, 0 where a pair has no such hop.
    """
    b, n, _ = spatial_pos.shape
    fe = path_input.shape[1]
    _, pair, hop = hop_positions(spatial_pos, max_hops, path_input.shape[0])
    out = path_input.new_zeros(b * n * n * max_hops, fe)
    out[pair * max_hops + hop] = path_input
    return out.view(b, n, n, max_hops, fe)


def path_input_from_dense(spatial_pos: Tensor, edge_input: Tensor) -> Tensor:
    """The inverse of :func:`dense_edge_input`: ``[B, n, n, D, F_e]`` to ``[M, F_e]``."""
    d, fe = edge_input.shape[3], edge_input.shape[4]
    _, pair, hop = hop_positions(spatial_pos, d)
    return edge_input.reshape(-1, fe).index_select(0, pair * d + hop)


@dataclass
class GraphormerBatch:
    """A dense batch of ``B`` graphs padded to ``n`` nodes.

    Attributes:
        x: ``[B, n, F]`` long, shifted node features (0 = padding).
        in_degree: ``[B, n]`` long, degree + 1 (0 = padding).
        out_degree: ``[B, n]`` long, degree + 1 (equal to ``in_degree`` for undirected graphs).
        spatial_pos: ``[B, n, n]`` long, shortest-path distance + 1 (0 = padding).
        path_input: ``[M, F_e]`` long, shifted bond features (0 = none) of every path hop:
            a pair at distance ``s`` has ``min(s, D)`` hops (none when unreachable), listed
            pair after pair in row-major ``[B, n, n]`` order, hops in path order (see
            :func:`hop_positions`). Compact where a dense ``[B, n, n, D, F_e]`` layout is
            mostly zeros; :attr:`edge_input` gives that layout.
        max_hops: ``D``, path hops kept per pair.
        attn_bias: ``[B, n + 1, n + 1]`` float32, 0 or ``-inf``.
        node_mask: ``[B, n]`` bool, ``True`` on real nodes.
        num_nodes: ``[B]`` long, nodes per graph.
        y: ``[B, T]`` float targets, or ``None``.
        mol_features: ``[B, K]`` float32 per-molecule features joined to the graph
            representation before the head (``data.mol_x`` of each graph), or ``None``.
        total_nodes: ``num_nodes.sum()`` as a Python int, known where the batch was collated
            (on the host), so that the model sizes its real-token index without reading it
            back from the device; ``None`` when unknown (then it is counted on the device).
        path_hop: ``[M]`` long, the hop index (``0..D-1``) of every row of :attr:`path_input`
            (rows past the real hops: feature 0 at hop 0), in static batches; ``None``: the
            model derives it from ``spatial_pos``.
        token_slots: ``[B, n + 1]`` bool, in static batches: the ``T`` token positions the
            encoder computes, the real tokens (every graph token, the real nodes) and the
            first padding positions (row-major) up to ``T``; ``None``: the real tokens.
        static_shape: ``(B, n, M, T)`` of a static batch (see :class:`~graphormer_urpe.graph.
            shapes.StaticShapes`), whose first :attr:`num_graphs` graphs are real and the rest
            empty; ``None`` for a batch sized to its graphs.
        real_graphs: the real graphs of a static batch (``None``: all ``B``).
    """

    x: Tensor
    in_degree: Tensor
    out_degree: Tensor
    spatial_pos: Tensor
    path_input: Tensor
    max_hops: int
    attn_bias: Tensor
    node_mask: Tensor
    num_nodes: Tensor
    y: Tensor | None = None
    mol_features: Tensor | None = None
    total_nodes: int | None = None
    path_hop: Tensor | None = None
    token_slots: Tensor | None = None
    static_shape: tuple[int, int, int, int] | None = None
    real_graphs: int | None = None

    @property
    def num_graphs(self) -> int:
        """Real graphs (the first ones of a static batch, whose tensors hold ``B``)."""
        return int(self.x.shape[0]) if self.real_graphs is None else self.real_graphs

    @property
    def path_hops(self) -> int:
        """``M``, the number of path hops (rows of :attr:`path_input`)."""
        return int(self.path_input.shape[0])

    @property
    def edge_input(self) -> Tensor:
        """``[B, n, n, D, F_e]`` long: :attr:`path_input` laid out densely (0 = no hop), as
        Graphormer's reference code batches it; built on each access."""
        path = self.path_input
        if self.path_hop is not None:  # a static batch: its real rows only
            path = path[: int(pair_hops(self.spatial_pos, self.max_hops).sum())]
        return dense_edge_input(self.spatial_pos, path, self.max_hops)

    @property
    def token_mask(self) -> Tensor:
        """``[B, n + 1]`` bool, ``True`` on the graph token (position 0) and the real nodes."""
        b = self.node_mask.shape[0]
        return torch.cat([self.node_mask.new_ones(b, 1), self.node_mask], dim=1)

    def __len__(self) -> int:
        return self.num_graphs

    def _apply(self, fn) -> GraphormerBatch:
        return GraphormerBatch(
            **{
                f.name: (fn(v) if isinstance(v := getattr(self, f.name), Tensor) else v)
                for f in fields(self)
            }
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphormerBatch:
        """Move every tensor to ``device``."""
        return self._apply(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> GraphormerBatch:
        """Pin every tensor (used by ``DataLoader(pin_memory=True)``)."""
        return self._apply(lambda t: t.pin_memory())


def _node_features(data: Data, i: int) -> Tensor:
    x = getattr(data, "x", None)
    if x is None:
        raise ValueError(f"graph {i} has no node features (data.x)")
    if x.is_floating_point():
        raise TypeError(
            f"graph {i}: Graphormer embeds categorical node features; data.x must be an integer "
            f"tensor, got {x.dtype}"
        )
    return x.view(-1, 1) if x.dim() == 1 else x


def collate(
    data_list: Sequence[Data] | Batch | FlatGraphs,
    multi_hop_max_dist: int = 20,
    spatial_pos_max: int = 1024,
    pad_to_multiple: int = 1,
    static: StaticShapes | None = None,
) -> GraphormerBatch:
    """Pad a list of graphs into one :class:`GraphormerBatch`.

    Graphs without :class:`GraphormerFeatures` attributes get them computed on the fly.

    Args:
        data_list: graphs (or a PyG ``Batch``), each with integer ``x`` ``[N]``/``[N, F]``; or
            :class:`~graphormer_urpe.graph.flat_graphs.FlatGraphs`, the same features already flat.
        multi_hop_max_dist: keep at most this many hops of path bond features.
        spatial_pos_max: pairs at raw distance ``>= spatial_pos_max`` are masked (``-inf``).
        pad_to_multiple: pad the attention length ``n + 1`` (graph token included) up to a
            multiple of this (1 = to the largest graph only).
        static: give the batch one of a few fixed shapes (see
            :class:`~graphormer_urpe.graph.static_shapes.StaticShapes`, whose ``max_hops`` must be
            ``multi_hop_max_dist``); ``pad_to_multiple`` is then ignored.

    Returns:
        The dense batch.
    """
    if pad_to_multiple < 1:
        raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
    if static is not None and static.max_hops != multi_hop_max_dist:
        raise ValueError(
            f"static shapes keep {static.max_hops} path hops, the batch {multi_hop_max_dist}"
        )
    flat = (
        data_list if isinstance(data_list, FlatGraphs) else _flatten(data_list, multi_hop_max_dist)
    )
    if len(flat) == 0:
        raise ValueError("cannot collate an empty list of graphs")
    return _pad(flat, multi_hop_max_dist, spatial_pos_max, pad_to_multiple, static)


def _flatten(data_list: Sequence[Data] | Batch, multi_hop_max_dist: int) -> FlatGraphs:
    """The graphs' features, concatenated (feature columns padded to the widest graph)."""
    from torch_geometric.data import Batch

    from .transform import GraphormerFeatures

    if isinstance(data_list, Batch):
        data_list = data_list.to_data_list()
    if len(data_list) == 0:
        raise ValueError("cannot collate an empty list of graphs")
    transform: GraphormerFeatures | None = None
    graphs = []
    for d in data_list:
        if not has_graphormer_features(d):
            transform = transform or GraphormerFeatures(multi_hop_max_dist)
            d = transform(d.clone())
        graphs.append(d)

    xs = [_node_features(d, i) for i, d in enumerate(graphs)]
    f = max(x.shape[1] for x in xs)
    fe = max(d.edge_input.shape[1] for d in graphs)
    if any(x.shape[1] != f for x in xs):
        xs = [F.pad(x, (0, f - x.shape[1])) for x in xs]
    edge_flat = [d.edge_input for d in graphs]
    if any(e.shape[1] != fe for e in edge_flat):
        edge_flat = [F.pad(e, (0, fe - e.shape[1]), value=-1) for e in edge_flat]
    y = None
    if all(getattr(d, "y", None) is not None for d in graphs):
        y = torch.cat([d.y.reshape(1, -1).float() for d in graphs], dim=0).numpy()  # [B, T]
    mol_x = None
    if all(getattr(d, "mol_x", None) is not None for d in graphs):
        mol_x = torch.cat([d.mol_x.reshape(1, -1).float() for d in graphs]).numpy()  # [B, K]
    return FlatGraphs(
        num_nodes=np.array([x.shape[0] for x in xs], dtype=np.int64),
        hops=torch.cat([d.edge_input_hops.view(-1) for d in graphs]).long().numpy(),
        x=torch.cat(xs).numpy(),
        degree=torch.cat([d.degree for d in graphs]).numpy(),
        spatial_pos=torch.cat([d.spatial_pos for d in graphs]).numpy(),
        edge_input=torch.cat(edge_flat).numpy(),
        y=y,
        mol_x=mol_x,
    )


def _path_input(flat: FlatGraphs, dmax: int) -> tuple[Tensor, np.ndarray]:
    """``[M, F_e]`` the shifted features of every path hop with at most ``dmax`` hops per
    pair, in :attr:`GraphormerBatch.path_input` order (what :func:`path_input_from_dense`
    gives for the dense layout), and ``[M]`` the hop index of each."""
    sp = flat.spatial_pos.astype(np.int64)  # [P] raw distances
    hops = np.where(sp < UNREACHABLE, np.minimum(sp, dmax), 0)  # [P]
    pairs = flat.num_nodes * flat.num_nodes  # [B]
    stride = np.repeat(flat.hops, pairs)  # [P], stored hops of each pair's graph
    # row of hop 0 of each pair in flat.edge_input: a [N_g, N_g, D_g] block per graph
    base = np.repeat(flat.row_ptr[:-1] - flat.pair_ptr[:-1] * flat.hops, pairs)
    row0 = base + np.arange(sp.size) * stride  # [P]
    pair = np.repeat(np.arange(sp.size), hops)  # [M]
    hop = np.arange(pair.size) - np.repeat(np.cumsum(hops) - hops, hops)  # [M]
    rows = row0[pair] + hop  # [M]
    stored = hop < stride[pair]  # False only where a graph stored fewer hops than dmax
    if stored.all():
        out = np.take(flat.edge_input, rows, axis=0).astype(np.int64)
    else:
        out = np.full((pair.size, flat.edge_input.shape[1]), -1, dtype=np.int64)
        out[stored] = np.take(flat.edge_input, rows[stored], axis=0)
    out += 1  # raw + 2 + 512 f -> raw + 3 + 512 f; -1 (no feature) -> 0
    return torch.from_numpy(out), hop


def _pad(
    flat: FlatGraphs,
    multi_hop_max_dist: int,
    spatial_pos_max: int,
    pad_to_multiple: int,
    static: StaticShapes | None = None,
) -> GraphormerBatch:
    """The dense batch of ``flat``: vectorised over the whole batch, one scatter per tensor.
    With ``static``, empty graphs follow the real ones up to ``static.graphs_for(n + 1)``."""
    real = len(flat)
    ks = flat.num_nodes.tolist()
    n = attention_length(max(ks), pad_to_multiple, static) - 1
    if static is not None:
        graphs = static.graphs_for(n + 1)
        if real > graphs:
            raise ValueError(
                f"{real} graphs do not fit a static batch of {graphs} "
                f"(attention length {n + 1}{_budget(static)})"
            )
        ks += [0] * (graphs - real)
        dmax = static.max_hops
    else:
        dmax = int(min(int(flat.hops.max(initial=0)), multi_hop_max_dist))
    b = len(ks)
    sizes = torch.tensor(ks, dtype=torch.long)  # [B]
    x_all = torch.from_numpy(flat.x).long()
    f = x_all.shape[1]

    node_lin = _scatter_index([1] * b, ks, 1, n)  # [sum N] into [B, n] (a [1, 1, N] block)
    offsets = 2 + FEATURE_OFFSET * torch.arange(f)
    x_out = torch.zeros(b * n, f, dtype=torch.long)
    x_out[node_lin] = x_all + offsets
    x_out = x_out.view(b, n, f)
    deg = torch.zeros(b * n, dtype=torch.long)
    deg[node_lin] = torch.from_numpy(flat.degree).long() + 1
    deg = deg.view(b, n)
    node_mask = torch.arange(n)[None, :] < sizes[:, None]  # [B, n]

    pair_lin = _scatter_index(ks, [1] * b, n, 1)  # [sum N^2] into [B, n, n]
    sp = torch.from_numpy(flat.spatial_pos).long()  # [sum N^2]
    spatial = torch.zeros(b * n * n, dtype=torch.long)
    spatial[pair_lin] = sp + 1
    spatial = spatial.view(b, n, n)

    # 0 on every real key column (graph token + nodes), for real and padded query rows alike.
    real_key = torch.arange(n + 1)[None, :] <= sizes[:, None]  # [B, n+1]
    attn_bias = torch.full((b, n + 1, n + 1), float("-inf"))
    attn_bias.masked_fill_(real_key[:, None, :].expand(b, n + 1, n + 1), 0.0)
    far = sp >= spatial_pos_max
    if bool(far.any()):
        lin = pair_lin[far]  # (g, i, j) in [B, n, n] -> (g, i + 1, j + 1) in [B, n+1, n+1]
        g, rest = lin // (n * n), lin % (n * n)
        attn_bias[g, rest // n + 1, rest % n + 1] = float("-inf")

    path_input, hop = _path_input(flat, dmax)
    y = None if flat.y is None else torch.from_numpy(flat.y).float()
    mol_x = None if flat.mol_x is None else torch.from_numpy(flat.mol_x).float()
    batch = GraphormerBatch(
        x=x_out,
        in_degree=deg,
        out_degree=deg,
        spatial_pos=spatial,
        path_input=path_input,
        max_hops=dmax,
        attn_bias=attn_bias,
        node_mask=node_mask,
        num_nodes=sizes,
        y=y,
        mol_features=mol_x,
        total_nodes=int(sizes.sum()),
    )
    if static is None:
        return batch
    rows = static.path_rows(len(hop))
    batch.path_input = F.pad(path_input, (0, 0, 0, rows - len(hop)))  # feature 0: no bond
    batch.path_hop = F.pad(torch.from_numpy(hop).long(), (0, rows - len(hop)))
    if y is not None:  # the empty graphs' targets are missing: no loss, no metric
        batch.y = F.pad(y, (0, 0, 0, b - real), value=float("nan"))
    if mol_x is not None:
        batch.mol_features = F.pad(mol_x, (0, 0, 0, b - real))
    tokens = static.token_rows(int(sizes.sum()) + b, b * (n + 1))
    batch.token_slots = _token_slots(batch.token_mask, tokens)
    batch.static_shape, batch.real_graphs = (b, n, rows, tokens), real
    return batch


def _token_slots(real: Tensor, tokens: int) -> Tensor:
    """``[B, n + 1]`` bool: the real tokens ``real`` and the first padding positions (in
    row-major order) up to ``tokens`` in all."""
    pad = ~real.reshape(-1)  # [B * (n + 1)]
    fill = pad & (torch.cumsum(pad, 0) <= tokens - int(real.sum()))
    return real | fill.view(real.shape)


def attention_length(
    atoms: int, pad_to_multiple: int = 1, static: StaticShapes | None = None
) -> int:
    """The attention length ``n + 1`` of a batch whose largest graph has ``atoms`` atoms:
    ``atoms + 1`` (graph token) rounded up to a multiple of ``pad_to_multiple``, or with
    ``static`` to its bucket."""
    if static is not None:
        return static.attention_length(atoms + 1)
    return -(-(atoms + 1) // pad_to_multiple) * pad_to_multiple


def _budget(static: StaticShapes) -> str:
    return "" if static.max_tokens is None else f", budget {static.max_tokens} tokens"


@lru_cache(maxsize=8192)
def _block_index(k: int, h: int, n: int, d: int) -> Tensor:
    """Flat positions of a row-major ``[k, k, h]`` block inside a row-major ``[n, n, d]`` one."""
    i = torch.arange(k).view(k, 1, 1)
    j = torch.arange(k).view(1, k, 1)
    t = torch.arange(h).view(1, 1, h)
    return ((i * n + j) * d + t).reshape(-1)


def _scatter_index(sizes: list[int], hops: list[int], n: int, d: int) -> Tensor:
    """Flat positions in ``[B, n, n, d]`` of the concatenated ``[N_g, N_g, D_g]`` blocks."""
    blocks = [_block_index(k, h, n, d) for k, h in zip(sizes, hops, strict=True)]
    counts = torch.tensor([blk.numel() for blk in blocks])
    base = torch.arange(len(blocks)) * (n * n * d)
    return torch.cat(blocks) + torch.repeat_interleave(base, counts)


class GraphormerCollator:
    """Picklable ``collate_fn`` for ``torch.utils.data.DataLoader`` over PyG datasets.

    Example::

        loader = DataLoader(dataset, batch_size=256, shuffle=True,
                            collate_fn=GraphormerCollator(multi_hop_max_dist=20))

    Args:
        multi_hop_max_dist: see :func:`collate`.
        spatial_pos_max: see :func:`collate`.
        pad_to_multiple: see :func:`collate` (e.g. 8 on GPUs with tensor cores).
        static: see :func:`collate` (static shapes for a captured GPU step).
    """

    def __init__(
        self,
        multi_hop_max_dist: int = 20,
        spatial_pos_max: int = 1024,
        pad_to_multiple: int = 1,
        static: StaticShapes | None = None,
    ) -> None:
        if pad_to_multiple < 1:
            raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
        self.multi_hop_max_dist = multi_hop_max_dist
        self.spatial_pos_max = spatial_pos_max
        self.pad_to_multiple = pad_to_multiple
        self.static = static

    def __call__(self, data_list: Sequence[Data] | FlatGraphs) -> GraphormerBatch:
        return collate(
            data_list,
            self.multi_hop_max_dist,
            self.spatial_pos_max,
            self.pad_to_multiple,
            self.static,
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(multi_hop_max_dist={self.multi_hop_max_dist}, "
            f"spatial_pos_max={self.spatial_pos_max}, pad_to_multiple={self.pad_to_multiple}, "
            f"static={self.static})"
        )
