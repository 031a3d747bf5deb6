r"""Dense, padded batches of graphs for Graphormer.

:func:`collate` turns a list of PyG ``Data`` objects carrying
:class:`~graphormer_urpe.graph.features.GraphormerFeatures` attributes into a
:class:`GraphormerBatch` of ``B`` graphs padded to ``n`` = the largest graph's node count.
Every index tensor is shifted so that **0 is padding**:

* ``x``: ``raw + 2 + 512 f`` for node-feature column ``f``
* ``in_degree`` / ``out_degree``: ``degree + 1``
* ``spatial_pos``: ``SPD + 1`` (diagonal 1, unreachable 511)
* ``edge_input``: ``raw + 3 + 512 f`` on path hops, 0 elsewhere

``attn_bias`` ``[B, n+1, n+1]`` (row/column 0 = graph token) is 0 where attention is allowed
and ``-inf`` on padded keys and on pairs whose raw distance is ``>= spatial_pos_max``; padded
*query* rows get 0 on the real keys so that no softmax row is entirely ``-inf``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from .features import FEATURE_OFFSET, GraphormerFeatures, has_graphormer_features

__all__ = ["GraphormerBatch", "collate", "GraphormerCollator"]


@dataclass
class GraphormerBatch:
    """A dense batch of ``B`` graphs padded to ``n`` nodes.

    Attributes:
        x: ``[B, n, F]`` long, shifted node features (0 = padding).
        in_degree: ``[B, n]`` long, degree + 1 (0 = padding).
        out_degree: ``[B, n]`` long, degree + 1 (equal to ``in_degree`` for undirected graphs).
        spatial_pos: ``[B, n, n]`` long, shortest-path distance + 1 (0 = padding).
        edge_input: ``[B, n, n, D, F_e]`` long, shifted path bond features (0 = none).
        attn_bias: ``[B, n + 1, n + 1]`` float32, 0 or ``-inf``.
        node_mask: ``[B, n]`` bool, ``True`` on real nodes.
        num_nodes: ``[B]`` long, nodes per graph.
        y: ``[B, T]`` float targets, or ``None``.
    """

    x: Tensor
    in_degree: Tensor
    out_degree: Tensor
    spatial_pos: Tensor
    edge_input: Tensor
    attn_bias: Tensor
    node_mask: Tensor
    num_nodes: Tensor
    y: Tensor | None = None

    @property
    def num_graphs(self) -> int:
        return int(self.x.shape[0])

    def __len__(self) -> int:
        return self.num_graphs

    def _apply(self, fn) -> GraphormerBatch:
        return GraphormerBatch(
            **{
                f.name: (None if (v := getattr(self, f.name)) is None else fn(v))
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
    data_list: Sequence[Data] | Batch,
    multi_hop_max_dist: int = 20,
    spatial_pos_max: int = 1024,
) -> GraphormerBatch:
    """Pad a list of graphs into one :class:`GraphormerBatch`.

    Graphs without :class:`GraphormerFeatures` attributes get them computed on the fly.

    Args:
        data_list: graphs (or a PyG ``Batch``), each with integer ``x`` ``[N]``/``[N, F]``.
        multi_hop_max_dist: keep at most this many hops of path bond features.
        spatial_pos_max: pairs at raw distance ``>= spatial_pos_max`` are masked (``-inf``).

    Returns:
        The dense batch.
    """
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
    sizes = [x.shape[0] for x in xs]
    b, n = len(graphs), max(sizes)
    f = max(x.shape[1] for x in xs)
    fe = max(d.edge_input.shape[1] for d in graphs)
    hops = [min(int(d.edge_input_hops), multi_hop_max_dist) for d in graphs]
    dmax = max(hops)

    x_out = torch.zeros(b, n, f, dtype=torch.long)
    deg = torch.zeros(b, n, dtype=torch.long)
    spatial = torch.zeros(b, n, n, dtype=torch.long)
    edge_input = torch.zeros(b, n, n, dmax, fe, dtype=torch.long)
    attn_bias = torch.full((b, n + 1, n + 1), float("-inf"))
    node_mask = torch.zeros(b, n, dtype=torch.bool)
    offsets = 2 + FEATURE_OFFSET * torch.arange(f)

    for g, (d, x) in enumerate(zip(graphs, xs, strict=True)):
        k = sizes[g]
        x_out[g, :k, : x.shape[1]] = x + offsets[: x.shape[1]]
        deg[g, :k] = d.degree + 1
        sp = d.spatial_pos.view(k, k).long()
        spatial[g, :k, :k] = sp + 1
        h_stored = int(d.edge_input_hops)
        ei = d.edge_input.view(k, k, h_stored, d.edge_input.shape[1])[:, :, : hops[g]]
        edge_input[g, :k, :k, : hops[g], : ei.shape[-1]] = ei.long() + 1
        attn_bias[g, : k + 1, : k + 1] = 0.0
        attn_bias[g, 1 : k + 1, 1 : k + 1].masked_fill_(sp >= spatial_pos_max, float("-inf"))
        attn_bias[g, k + 1 :, : k + 1] = 0.0  # padded query rows see the real keys
        node_mask[g, :k] = True

    y = None
    if all(getattr(d, "y", None) is not None for d in graphs):
        y = torch.cat([d.y.reshape(1, -1).float() for d in graphs], dim=0)  # [B, T]
    return GraphormerBatch(
        x=x_out,
        in_degree=deg,
        out_degree=deg,
        spatial_pos=spatial,
        edge_input=edge_input,
        attn_bias=attn_bias,
        node_mask=node_mask,
        num_nodes=torch.tensor(sizes, dtype=torch.long),
        y=y,
    )


class GraphormerCollator:
    """Picklable ``collate_fn`` for ``torch.utils.data.DataLoader`` over PyG datasets.

    Example::

        loader = DataLoader(dataset, batch_size=256, shuffle=True,
                            collate_fn=GraphormerCollator(multi_hop_max_dist=20))
    """

    def __init__(self, multi_hop_max_dist: int = 20, spatial_pos_max: int = 1024) -> None:
        self.multi_hop_max_dist = multi_hop_max_dist
        self.spatial_pos_max = spatial_pos_max

    def __call__(self, data_list: Sequence[Data]) -> GraphormerBatch:
        return collate(data_list, self.multi_hop_max_dist, self.spatial_pos_max)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(multi_hop_max_dist={self.multi_hop_max_dist}, "
            f"spatial_pos_max={self.spatial_pos_max})"
        )
