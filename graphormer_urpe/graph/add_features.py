r"""Graphormer's structural features on many PyG graphs at once: :func:`add_graphormer_features`.

The graphs go in chunks through :func:`~.batched_structure.batched_graph_structure` and each gets
the tensors :class:`~.transform.GraphormerFeatures` would store, several times faster; a graph
the batched code does not take goes through :func:`~.structure.store_graphormer_features`.
Needs no ``torch_geometric`` (the graphs only need PyG's ``Data`` attributes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from .batched_structure import batched_graph_structure
from .structure import compact_ints, store_graphormer_features

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = ["add_graphormer_features"]


_PAIR_HOPS_PER_CHUNK = 1 << 23
"""Node pairs times ``multi_hop_max_dist`` computed together (bounds the working memory)."""

_PAIRS_PER_CHUNK = 1 << 21
"""At most this many node pairs computed together (about 4,000 molecules)."""

_GraphArrays = tuple[Tensor, Tensor]  # edge_index [2, E], edge_attr [E, F_e]


def _batchable(data: Data) -> _GraphArrays | None:
    """``(edge_index [2, E], edge_attr [E, F_e])`` of a graph the batched path takes.

    A missing ``edge_attr`` becomes one zero column, as in :func:`graph_structure`. ``None``
    for anything unusual (missing or non-integer arrays, tensors off the CPU, odd shapes):
    such a graph goes through :class:`GraphormerFeatures` itself, with its usual errors.
    """
    ei = getattr(data, "edge_index", None)
    ea = getattr(data, "edge_attr", None)
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.shape[0] != 2 or not ei.is_cpu:
        return None
    if ei.is_floating_point() or ei.is_complex():
        return None
    if ea is None:
        return ei, torch.zeros((ei.shape[1], 1), dtype=torch.long)
    if not isinstance(ea, Tensor) or ea.dim() not in (1, 2) or not ea.is_cpu:
        return None
    if ea.is_floating_point() or ea.is_complex() or ea.shape[0] != ei.shape[1]:
        return None
    return ei, ea.view(-1, 1) if ea.dim() == 1 else ea


def _one_graph(hops: int, i: int, data: Data) -> Data:
    """A featured shallow copy of ``data``, as ``GraphormerFeatures(hops)(data)`` gives,
    naming graph ``i`` in a ``ValueError``."""
    try:
        return store_graphormer_features(copy.copy(data), hops)
    except ValueError as exc:
        raise ValueError(f"graph {i}: {exc}") from exc


def add_graphormer_features(
    data_list: Iterable[Data],
    multi_hop_max_dist: int = 20,
    *,
    progress: bool | None = False,
    desc: str = "Graphormer features",
) -> list[Data]:
    r"""Store :class:`GraphormerFeatures` on many graphs at once, through the batched path.

    The graphs go in chunks (a few thousand molecules) through
    :func:`~graphormer_urpe.graph.batched_structure.batched_graph_structure`, and each graph then
    gets its own ``spatial_pos`` ``[N * N]``, ``edge_input`` ``[N * N * D, F_e]``,
    ``edge_input_hops`` ``[1]`` and ``degree`` ``[N]``: the same values, shapes and dtypes as
    ``GraphormerFeatures(multi_hop_max_dist)(data)``, several times faster. Like the transform
    it returns shallow copies and leaves the input graphs as they are. A graph the batched
    code does not take (e.g. float bond features) goes through the transform itself.

    Args:
        data_list: graphs with ``edge_index`` ``[2, E]``, optional integer ``edge_attr``
            ``[E]`` / ``[E, F_e]`` and a known ``num_nodes``.
        multi_hop_max_dist: the longest path, in hops, whose bond features are kept.
        progress: show a ``tqdm`` progress bar (graphs done); ``None``: only on a terminal.
        desc: the progress bar's label.

    Returns:
        The graphs with their features, in the same order.

    Raises:
        ValueError: a graph without a node count, an edge outside its graph or a bond
            feature outside ``[0, 509]``; the message names the graph's position.
    """
    if multi_hop_max_dist < 1:
        raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
    graphs = list(data_list)
    m = len(graphs)
    nodes = np.zeros(m, dtype=np.int64)  # [M]
    arrays: list[_GraphArrays | None] = []
    columns = np.full(m, -1, dtype=np.int64)  # [M] F_e, -1 = not batchable
    for i, data in enumerate(graphs):
        n = data.num_nodes
        if n is None:
            raise ValueError(f"graph {i}: GraphormerFeatures needs data.num_nodes (or data.x)")
        nodes[i] = n
        arrays.append(_batchable(data))
        if (a := arrays[i]) is not None:
            columns[i] = a[1].shape[1]
    pairs_per_chunk = max(1, min(_PAIRS_PER_CHUNK, _PAIR_HOPS_PER_CHUNK // multi_hop_max_dist))

    out = list(graphs)
    disable = None if progress is None else not progress
    with tqdm(total=m, desc=desc, disable=disable, leave=False) as bar:
        start = 0
        while start < m:
            if columns[start] < 0:
                out[start] = _one_graph(multi_hop_max_dist, start, graphs[start])
                end = start + 1
            else:  # a run of batchable graphs with the same number of bond features
                end, pairs = start, 0
                while end < m and columns[end] == columns[start] and pairs < pairs_per_chunk:
                    pairs += int(nodes[end]) ** 2
                    end += 1
                chunk = list(range(start, end))
                ready = [a for a in arrays[start:end] if a is not None]
                _features_for_chunk(graphs, chunk, nodes[start:end], ready, multi_hop_max_dist, out)
            bar.update(end - start)
            start = end
    return out


def _features_for_chunk(
    graphs: list[Data],
    chunk: list[int],
    nodes: np.ndarray,
    arrays: list[_GraphArrays],
    hops: int,
    out: list[Data],
) -> None:
    """Compute the graphs ``chunk`` together and store a featured copy of each in ``out``.

    Args:
        graphs: all graphs; ``chunk``: the positions computed here.
        nodes: ``[C]`` their node counts; ``arrays``: their ``(edge_index, edge_attr)``.
        hops: ``multi_hop_max_dist``.
        out: the output list, written at the positions ``chunk``.
    """
    try:
        s = batched_graph_structure(
            nodes,
            torch.cat([a[0] for a in arrays], dim=1).long().numpy(),  # [2, sum E]
            np.array([a[0].shape[1] for a in arrays], dtype=np.int64),
            torch.cat([a[1] for a in arrays]).long().numpy(),  # [sum E, F_e]
            hops,
        )
    except ValueError:  # name the first bad graph exactly as the transform would
        for i in chunk:
            _one_graph(hops, i, graphs[i])
        raise
    spatial_pos = torch.from_numpy(s.spatial_pos)  # [sum N^2] int16
    edge_input = torch.from_numpy(s.edge_input)  # [sum N^2 D, F_e]
    degree = torch.from_numpy(s.degree)  # [sum N] int64
    narrow = edge_input.dtype == torch.int16
    blocks = zip(
        chunk,
        s.num_nodes.tolist(),
        s.hops.tolist(),
        s.pair_start.tolist(),
        s.row_start.tolist(),
        s.node_start.tolist(),
        strict=True,
    )
    for i, n, d, p, r, v in blocks:
        # each graph owns its tensors (a view would keep, and save, the whole chunk)
        data = copy.copy(graphs[i])
        block = edge_input[r : r + n * n * d]
        data.spatial_pos = spatial_pos[p : p + n * n].clone()
        data.edge_input = block.clone() if narrow else compact_ints(block.numpy())
        data.edge_input_hops = torch.tensor([d], dtype=torch.long)
        data.degree = degree[v : v + n].clone()
        out[i] = data
