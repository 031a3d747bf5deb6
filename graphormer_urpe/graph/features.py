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

:class:`GraphormerFeatures` (:mod:`graphormer_urpe.graph.transform`: the one part that needs
PyG) wraps this as a PyG ``BaseTransform`` storing flat tensors that
PyG's ``InMemoryDataset`` and ``Batch`` can concatenate; :mod:`graphormer_urpe.graph.batch`
turns them into dense padded batches. For a whole dataset, :func:`add_graphormer_features`
(or :meth:`GraphormerFeatures.apply_many`) stores the same tensors on a list of graphs several
times faster, through the batched code of :mod:`graphormer_urpe.graph.fast_features`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from .transform import GraphormerFeatures

__all__ = [
    "UNREACHABLE",
    "FEATURE_OFFSET",
    "GraphStructure",
    "floyd_warshall",
    "path_edge_features",
    "graph_structure",
    "GraphormerFeatures",
    "add_graphormer_features",
    "has_graphormer_features",
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


def _compact(a: np.ndarray) -> Tensor:
    """Store integer features as int16 when they fit (they always do for molecules)."""
    if a.size == 0 or (a.min() >= -(2**15) and a.max() < 2**15):
        return torch.from_numpy(a.astype(np.int16))
    return torch.from_numpy(a)


_KEYS = ("spatial_pos", "edge_input", "edge_input_hops", "degree")


def has_graphormer_features(data: Data) -> bool:
    """Whether ``data`` already carries the attributes stored by :class:`GraphormerFeatures`."""
    return all(getattr(data, key, None) is not None for key in _KEYS)


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


def _one_graph(transform: GraphormerFeatures, i: int, data: Data) -> Data:
    """``transform(data)``, naming graph ``i`` in a ``ValueError``."""
    try:
        return transform(data)
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
    :func:`~graphormer_urpe.graph.fast_features.batched_graph_structure`, and each graph then
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
    from .transform import GraphormerFeatures  # that module builds on this one

    transform = GraphormerFeatures(multi_hop_max_dist)
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
                out[start] = _one_graph(transform, start, graphs[start])
                end = start + 1
            else:  # a run of batchable graphs with the same number of bond features
                end, pairs = start, 0
                while end < m and columns[end] == columns[start] and pairs < pairs_per_chunk:
                    pairs += int(nodes[end]) ** 2
                    end += 1
                chunk = list(range(start, end))
                ready = [a for a in arrays[start:end] if a is not None]
                _features_for_chunk(graphs, chunk, nodes[start:end], ready, transform, out)
            bar.update(end - start)
            start = end
    return out


def _features_for_chunk(
    graphs: list[Data],
    chunk: list[int],
    nodes: np.ndarray,
    arrays: list[_GraphArrays],
    transform: GraphormerFeatures,
    out: list[Data],
) -> None:
    """Compute the graphs ``chunk`` together and store a featured copy of each in ``out``.

    Args:
        graphs: all graphs; ``chunk``: the positions computed here.
        nodes: ``[C]`` their node counts; ``arrays``: their ``(edge_index, edge_attr)``.
        transform: the per-graph transform (its ``multi_hop_max_dist``; its errors).
        out: the output list, written at the positions ``chunk``.
    """
    from .fast_features import batched_graph_structure  # that module builds on this one

    try:
        s = batched_graph_structure(
            nodes,
            torch.cat([a[0] for a in arrays], dim=1).long().numpy(),  # [2, sum E]
            np.array([a[0].shape[1] for a in arrays], dtype=np.int64),
            torch.cat([a[1] for a in arrays]).long().numpy(),  # [sum E, F_e]
            transform.multi_hop_max_dist,
        )
    except ValueError:  # name the first bad graph exactly as the transform would
        for i in chunk:
            _one_graph(transform, i, graphs[i])
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
        data.edge_input = block.clone() if narrow else _compact(block.numpy())
        data.edge_input_hops = torch.tensor([d], dtype=torch.long)
        data.degree = degree[v : v + n].clone()
        out[i] = data


def __getattr__(name: str) -> Any:
    """:class:`GraphormerFeatures`, a PyG ``BaseTransform``, from
    :mod:`graphormer_urpe.graph.transform` on first use: the structural features here need no
    ``torch_geometric``, the transform does."""
    if name == "GraphormerFeatures":
        from .transform import GraphormerFeatures

        return GraphormerFeatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
