r"""Graphormer's per-graph structural features: shortest paths, path edge features, degrees.

For a graph with ``N`` nodes and ``E`` directed edges this computes, exactly as Microsoft's
Graphormer preprocessing does (``algos.pyx``: ``floyd_warshall`` and ``gen_edge_input``):

* ``spatial_pos`` ``[N, N]``: shortest-path distance (hops), 0 on the diagonal, **510** when
  unreachable. Floyd–Warshall with ``k`` outermost and ascending, updating only on a strict
  improvement and recording the intermediate node ``k`` (``-1`` = direct edge).
* ``edge_input`` ``[N, N, D, F_e]``: for each ordered reachable pair ``i != j``, the bond
  features of hop ``t`` of the path ``[i] + inner(i, j) + [j]``, where
  ``inner(i, j) = inner(i, k) + [k] + inner(k, j)`` for ``k = path[i, j]``; ``-1`` elsewhere.
  Bond feature ``f`` with raw value ``r`` is stored as ``r + 2 + 512 f`` (``0`` never occurs).
  ``D = min(max(spatial_pos), multi_hop_max_dist)``, i.e. the reference tensor truncated to
  ``multi_hop_max_dist`` hops (a disconnected graph has ``max = 510``).
* ``degree`` ``[N]``: the number of stored out-going edges of each node (row sums of the
  adjacency; both directions are stored for molecules, so this is the neighbour count).

Everything is vectorised numpy: Floyd–Warshall is ``N`` array updates, and the recursive path
expansion is replaced by a descent that locates the node at every hop position of every pair
at once (no Python loop over node pairs).

:func:`store_graphormer_features` puts them on a graph as the flat tensors that PyG's
``InMemoryDataset`` and ``Batch`` can concatenate (:class:`~.transform.GraphormerFeatures`
is that as a PyG transform; :func:`~.add_features.add_graphormer_features` does it for many
graphs at once through :mod:`~.batched_structure`). Everything here imports neither PyG nor any
other module of the library: the batched code, the transform and the public
:mod:`~.features` build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = [
    "UNREACHABLE",
    "FEATURE_OFFSET",
    "GraphStructure",
    "floyd_warshall",
    "path_edge_features",
    "graph_structure",
    "has_graphormer_features",
    "store_graphormer_features",
    "compact_ints",
]

UNREACHABLE = 510
"""Raw shortest-path distance (and path entry) of an unreachable pair."""

FEATURE_OFFSET = 512
"""Column ``f`` of a categorical feature matrix is shifted by ``512 f`` into one vocabulary."""


@dataclass
class GraphStructure:
    """Structural features of one graph (numpy, reference semantics).

    Attributes:
        spatial_pos: ``[N, N]`` int64 shortest-path hops, 510 = unreachable.
        edge_input: ``[N, N, D, F_e]`` int64 path bond features (``raw + 2 + 512 f``), -1 = none.
        degree: ``[N]`` int64 number of out-going stored edges.
    """

    spatial_pos: np.ndarray
    edge_input: np.ndarray
    degree: np.ndarray


def floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All-pairs shortest paths with Graphormer's exact tie-breaking.

    Args:
        adj: ``[N, N]`` (or stacked ``[G, N, N]``) boolean adjacency.

    Returns:
        ``(dist, path)``, both int64 of the same shape as ``adj``: hop distances (0 on the
        diagonal, 510 unreachable) and the recorded intermediate node (``-1`` when the best
        path is the direct edge or the diagonal, 510 when unreachable).
    """
    adj = np.asarray(adj, dtype=bool)
    n = adj.shape[-1]
    dist = np.where(adj, 1, UNREACHABLE).astype(np.int64)
    diag = np.arange(n)
    dist[..., diag, diag] = 0
    path = np.full(dist.shape, -1, dtype=np.int64)
    for k in range(n):
        # Within round k the row and column k cannot improve (dist[k, k] = 0), so updating
        # every (i, j) at once equals the reference's sequential in-place loop.
        cand = dist[..., :, k, None] + dist[..., None, k, :]
        better = cand < dist
        np.minimum(dist, cand, out=dist)
        path[better] = k
    unreachable = dist >= UNREACHABLE
    dist[unreachable] = UNREACHABLE
    path[unreachable] = UNREACHABLE
    return dist, path


def _path_nodes(dist: np.ndarray, path: np.ndarray, hops: int) -> np.ndarray:
    """Node at each position ``0..hops`` of the recursively expanded path of every pair.

    ``node(i, j, s)`` for ``s <= dist[i, j]`` follows the reference expansion
    ``[i] + inner(i, k) + [k] + inner(k, j) + [j]``: position ``s`` lies in the ``(i, k)``
    half when ``s <= dist[i, k]``, else at ``s - dist[i, k]`` in the ``(k, j)`` half. All
    queries descend together until they reach a direct edge.

    Returns:
        ``[N, N, hops + 1]`` int64 node ids, -1 where undefined.
    """
    n = dist.shape[0]
    valid = (dist > 0) & (dist < UNREACHABLE)  # ordered reachable pairs, i != j
    pos = np.arange(hops + 1)
    query = valid[:, :, None] & (pos[None, None, :] <= dist[:, :, None])
    qi, qj, qs = np.nonzero(query)
    a, b, s = qi.copy(), qj.copy(), qs.copy()
    result = np.empty_like(a)
    todo = np.arange(a.size)
    while todo.size:
        k = path[a, b]
        done = k < 0  # direct edge: position 0 is a, position 1 is b
        if done.any():
            result[todo[done]] = np.where(s[done] == 0, a[done], b[done])
            keep = ~done
            todo, a, b, s, k = todo[keep], a[keep], b[keep], s[keep], k[keep]
        left_len = dist[a, k]
        left = s <= left_len
        b = np.where(left, k, b)
        s = np.where(left, s, s - left_len)
        a = np.where(left, a, k)
    nodes = np.full((n, n, hops + 1), -1, dtype=np.int64)
    nodes[qi, qj, qs] = result
    return nodes


def path_edge_features(
    dist: np.ndarray, path: np.ndarray, edge_type: np.ndarray, max_hops: int | None = None
) -> np.ndarray:
    """Multi-hop edge input: bond features along every shortest path.

    Args:
        dist: ``[N, N]`` distances from :func:`floyd_warshall`.
        path: ``[N, N]`` intermediate nodes from :func:`floyd_warshall`.
        edge_type: ``[N, N, F_e]`` int64 bond features per directed node pair
            (``raw + 2 + 512 f`` on edges).
        max_hops: truncate to this many hops (``multi_hop_max_dist``); ``None`` keeps all.

    Returns:
        ``[N, N, D, F_e]`` int64 with ``D = min(max(dist), max_hops)``; -1 where a pair has no
        hop ``t`` (diagonal, unreachable, or ``t >= dist``).
    """
    n, _, fe = edge_type.shape
    max_dist = int(dist.max()) if n else 0
    hops = max_dist if max_hops is None else min(max_dist, max_hops)
    out = np.full((n, n, hops, fe), -1, dtype=np.int64)
    if hops == 0:
        return out
    real_hops = min(hops, int(dist[dist < UNREACHABLE].max()))
    if real_hops == 0:  # no reachable pair at all
        return out
    nodes = _path_nodes(dist, path, real_hops)
    t = np.arange(real_hops)
    valid = (dist > 0) & (dist < UNREACHABLE)
    hop_mask = valid[:, :, None] & (t[None, None, :] < dist[:, :, None])  # [N, N, T]
    src = nodes[:, :, :-1][hop_mask]
    dst = nodes[:, :, 1:][hop_mask]
    out[:, :, :real_hops][hop_mask] = edge_type[src, dst]
    return out


def _as_2d(a: np.ndarray) -> np.ndarray:
    if a.ndim == 1:
        return a[:, None]
    if a.ndim != 2:
        raise ValueError(f"edge_attr must be [E] or [E, F_e], got shape {a.shape}")
    return a


def graph_structure(
    edge_index: np.ndarray | Tensor,
    num_nodes: int,
    edge_attr: np.ndarray | Tensor | None = None,
    multi_hop_max_dist: int | None = None,
) -> GraphStructure:
    """Compute :class:`GraphStructure` for one graph.

    Args:
        edge_index: ``[2, E]`` directed edges (store both directions for undirected graphs).
        num_nodes: ``N``.
        edge_attr: ``[E]`` or ``[E, F_e]`` non-negative integer bond features, or ``None``
            (then every edge has one feature of value 0).
        multi_hop_max_dist: truncate ``edge_input`` to this many hops (``None``: keep all).

    Returns:
        The graph's :class:`GraphStructure`.
    """
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    e = ei.shape[1]
    if edge_attr is None:
        ea = np.zeros((e, 1), dtype=np.int64)
    else:
        ea = _as_2d(np.asarray(edge_attr, dtype=np.int64))
    if ea.shape[0] != e:
        raise ValueError(f"edge_attr has {ea.shape[0]} rows but edge_index has {e} edges")
    if e and (ei.min() < 0 or ei.max() >= num_nodes):
        raise ValueError(f"edge_index refers to nodes outside 0..{num_nodes - 1}")
    if ea.size and (ea.min() < 0 or ea.max() >= FEATURE_OFFSET - 2):
        raise ValueError(
            f"edge features must be integers in [0, {FEATURE_OFFSET - 3}], got range "
            f"[{ea.min()}, {ea.max()}]"
        )
    fe = ea.shape[1]
    adj = np.zeros((num_nodes, num_nodes), dtype=bool)
    adj[ei[0], ei[1]] = True
    edge_type = np.zeros((num_nodes, num_nodes, fe), dtype=np.int64)
    edge_type[ei[0], ei[1]] = ea + 2 + FEATURE_OFFSET * np.arange(fe)
    dist, path = floyd_warshall(adj)
    edge_input = path_edge_features(dist, path, edge_type, multi_hop_max_dist)
    return GraphStructure(dist, edge_input, adj.sum(axis=1).astype(np.int64))


def compact_ints(a: np.ndarray) -> Tensor:
    """Store integer features as int16 when they fit (they always do for molecules)."""
    if a.size == 0 or (a.min() >= -(2**15) and a.max() < 2**15):
        return torch.from_numpy(a.astype(np.int16))
    return torch.from_numpy(a)


_KEYS = ("spatial_pos", "edge_input", "edge_input_hops", "degree")


def has_graphormer_features(data: Data) -> bool:
    """Whether ``data`` already carries the attributes stored by :class:`GraphormerFeatures`."""
    return all(getattr(data, key, None) is not None for key in _KEYS)


def store_graphormer_features(data: Data, multi_hop_max_dist: int) -> Data:
    """Store Graphormer's features on ``data`` itself (what
    :class:`~.transform.GraphormerFeatures` does to its copy): ``spatial_pos`` ``[N * N]``,
    ``edge_input`` ``[N * N * D, F_e]``, ``edge_input_hops`` ``[1]``, ``degree`` ``[N]``.

    Raises:
        ValueError: no node count, an edge outside the graph or a bond feature out of range.
    """
    n = data.num_nodes
    if n is None:
        raise ValueError("GraphormerFeatures needs data.num_nodes (or data.x)")
    s = graph_structure(data.edge_index, n, getattr(data, "edge_attr", None), multi_hop_max_dist)
    hops = s.edge_input.shape[2]
    data.spatial_pos = compact_ints(s.spatial_pos.reshape(-1))
    data.edge_input = compact_ints(s.edge_input.reshape(n * n * hops, s.edge_input.shape[3]))
    data.edge_input_hops = torch.tensor([hops], dtype=torch.long)
    data.degree = torch.from_numpy(s.degree)
    return data
