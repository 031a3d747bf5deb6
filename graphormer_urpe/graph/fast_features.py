r"""Graphormer's shortest paths for many graphs at once (the batched fast path).

:func:`~graphormer_urpe.graph.features.graph_structure` handles one graph per call, so on
millions of small molecules the Python and numpy call overhead per graph dominates. Here the
graphs of a collection are grouped by node count ``n`` and each group runs one Floyd–Warshall
over a stacked ``[G, n, n]`` array: ``n`` rounds of whole-array updates serve ``G`` graphs, in
small integer dtypes. The result is the same ``(dist, path)`` pair, with the same tie-breaking
(``k`` ascending, strict improvement, ``-1`` for a direct edge, 510 when unreachable), as
:func:`~graphormer_urpe.graph.features.floyd_warshall`; the tests check it on random graphs
and real molecules.

The path edge features (``edge_input``) follow from ``(dist, path)`` and the bond features
alone (:func:`~graphormer_urpe.graph.features.path_edge_features`), so a cache can keep the two
``[N, N]`` matrices instead of the ``[N, N, D, F_e]`` tensor and rebuild ``edge_input`` when a
graph is read (:func:`structure_from_paths`). :func:`encode_paths` / :func:`decode_paths` pack
both matrices into unsigned integers no wider than the node ids (``uint8`` for up to 256
nodes) without sentinel values that depend on the dtype:

* distance code: the hop count, and ``0`` off the diagonal for an unreachable pair (a real
  distance is 0 only on the diagonal);
* path code: the intermediate node ``k``, or the row's own index ``i`` when there is none
  (direct edge, diagonal or unreachable; ``k`` is never ``i`` itself).
"""

from __future__ import annotations

import numpy as np

from .features import FEATURE_OFFSET, UNREACHABLE, GraphStructure, path_edge_features

__all__ = [
    "batched_floyd_warshall",
    "batched_shortest_paths",
    "encode_paths",
    "decode_paths",
    "index_dtype",
    "edge_type_matrix",
    "structure_from_paths",
    "batched_path_edge_features",
]


def batched_floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Floyd–Warshall on ``G`` graphs of the same size, in ``int16``.

    Args:
        adj: ``[G, n, n]`` boolean adjacency (``adj[g, i, j]``: a stored edge ``i -> j``).

    Returns:
        ``(dist, path)``, both ``[G, n, n]`` int16 with the reference semantics of
        :func:`~graphormer_urpe.graph.features.floyd_warshall`.
    """
    adj = np.asarray(adj, dtype=bool)
    if adj.ndim != 3 or adj.shape[1] != adj.shape[2]:
        raise ValueError(f"adj must be [G, n, n], got shape {adj.shape}")
    n = adj.shape[-1]
    if n > 2**15 // 2 - UNREACHABLE:
        raise ValueError(f"graphs of {n} nodes are too large for the int16 fast path")
    dist = np.where(adj, np.int16(1), np.int16(UNREACHABLE))
    diag = np.arange(n)
    dist[:, diag, diag] = 0
    path = np.full(dist.shape, -1, dtype=np.int16)
    cand = np.empty_like(dist)
    better = np.empty(dist.shape, dtype=bool)
    for k in range(n):
        # Row and column k cannot improve in round k (dist[k, k] = 0), so a whole-array update
        # equals the reference's in-place loop over (i, j).
        np.add(dist[:, :, k, None], dist[:, None, k, :], out=cand)
        np.less(cand, dist, out=better)
        np.copyto(dist, cand, where=better)
        np.copyto(path, np.int16(k), where=better)
    unreachable = dist >= UNREACHABLE
    dist[unreachable] = UNREACHABLE
    path[unreachable] = UNREACHABLE
    return dist, path


def index_dtype(max_value: int) -> np.dtype:
    """The narrowest unsigned dtype holding ``0..max_value`` (``uint8``, ``uint16``, ...)."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


def encode_paths(dist: np.ndarray, path: np.ndarray, dtype: np.dtype | None = None):
    """Pack ``(dist, path)`` ``[..., n, n]`` into unsigned codes (see the module docstring).

    Returns:
        ``(dist_code, path_code)`` of the same shape, dtype ``dtype`` (default: the narrowest
        holding ``n - 1``).
    """
    n = dist.shape[-1]
    dt = index_dtype(max(n - 1, 0)) if dtype is None else np.dtype(dtype)
    rows = np.arange(n).reshape(n, 1)
    off_diag = ~np.eye(n, dtype=bool)
    unreachable = dist >= UNREACHABLE
    dcode = np.where(unreachable & off_diag, 0, dist).astype(dt)
    pcode = np.where((path < 0) | unreachable, rows, path).astype(dt)
    return dcode, pcode


def decode_paths(dist_code: np.ndarray, path_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_paths`: int64 ``(dist, path)`` with the reference semantics."""
    n = dist_code.shape[-1]
    dist = dist_code.astype(np.int64)
    path = path_code.astype(np.int64)
    off_diag = ~np.eye(n, dtype=bool)
    unreachable = (dist == 0) & off_diag
    dist[unreachable] = UNREACHABLE
    path[path == np.arange(n).reshape(n, 1)] = -1
    path[unreachable] = UNREACHABLE
    return dist, path


def batched_shortest_paths(
    num_nodes: np.ndarray,
    edge_index: np.ndarray,
    num_edges: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encoded shortest paths of many graphs, grouped by size for speed.

    Args:
        num_nodes: ``[M]`` nodes per graph.
        edge_index: ``[2, sum(num_edges)]`` the graphs' directed edges, concatenated, with
            node ids local to each graph (``0..num_nodes[g] - 1``).
        num_edges: ``[M]`` edges per graph.

    Returns:
        ``(dist_code, path_code, pair_ptr)``: flat ``[sum(num_nodes ** 2)]`` arrays holding each
        graph's row-major ``[n, n]`` codes (:func:`encode_paths`, dtype from the largest graph)
        and ``[M + 1]`` int64 offsets of each graph's block.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    num_edges = np.asarray(num_edges, dtype=np.int64)
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    m = num_nodes.size
    if num_edges.size != m or int(num_edges.sum()) != edge_index.shape[1]:
        raise ValueError(
            f"num_edges ({num_edges.size} graphs, {int(num_edges.sum())} edges) does not match "
            f"{m} graphs and edge_index with {edge_index.shape[1]} edges"
        )
    pair_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(num_nodes * num_nodes, out=pair_ptr[1:])
    dt = index_dtype(max(int(num_nodes.max()) - 1, 0) if m else 0)
    dcode = np.zeros(int(pair_ptr[-1]), dtype=dt)
    pcode = np.zeros(int(pair_ptr[-1]), dtype=dt)
    edge_graph = np.repeat(np.arange(m), num_edges)  # [E] graph of each edge
    if edge_index.size:
        limit = num_nodes[edge_graph]
        bad = (edge_index < 0).any(axis=0) | (edge_index >= limit).any(axis=0)
        if bad.any():
            g = int(edge_graph[np.flatnonzero(bad)[0]])
            raise ValueError(f"graph {g}: edge_index refers to nodes outside 0..{num_nodes[g] - 1}")
    slot = np.full(m, -1, dtype=np.int64)  # position of each graph inside its size group
    for n in np.unique(num_nodes):
        n = int(n)
        graphs = np.flatnonzero(num_nodes == n)
        if n == 0:
            continue
        slot[graphs] = np.arange(graphs.size)
        adj = np.zeros((graphs.size, n, n), dtype=bool)
        mine = num_nodes[edge_graph] == n
        adj[slot[edge_graph[mine]], edge_index[0, mine], edge_index[1, mine]] = True
        dist, path = batched_floyd_warshall(adj)
        dc, pc = encode_paths(dist, path, dt)
        where = pair_ptr[graphs, None] + np.arange(n * n)  # [G, n*n]
        dcode[where] = dc.reshape(graphs.size, n * n)
        pcode[where] = pc.reshape(graphs.size, n * n)
    return dcode, pcode, pair_ptr


def edge_type_matrix(edge_index: np.ndarray, edge_attr: np.ndarray, num_nodes: int) -> np.ndarray:
    """Shifted bond features per directed node pair, as ``graph_structure`` builds them.

    Args:
        edge_index: ``[2, E]`` local edges.
        edge_attr: ``[E, F_e]`` non-negative integer bond features.
        num_nodes: ``N``.

    Returns:
        ``[N, N, F_e]`` int64: ``raw + 2 + 512 f`` on edges, 0 elsewhere.
    """
    ea = np.asarray(edge_attr, dtype=np.int64)
    if ea.ndim == 1:
        ea = ea[:, None]
    fe = ea.shape[1]
    out = np.zeros((num_nodes, num_nodes, fe), dtype=np.int64)
    out[edge_index[0], edge_index[1]] = ea + 2 + FEATURE_OFFSET * np.arange(fe)
    return out


def structure_from_paths(
    dist_code: np.ndarray,
    path_code: np.ndarray,
    edge_index: np.ndarray,
    edge_attr: np.ndarray,
    num_nodes: int,
    multi_hop_max_dist: int | None = None,
) -> GraphStructure:
    """Rebuild one graph's :class:`~graphormer_urpe.graph.features.GraphStructure`.

    Args:
        dist_code: ``[N * N]`` or ``[N, N]`` distance codes (:func:`encode_paths`).
        path_code: same shape, path codes.
        edge_index: ``[2, E]`` local edges.
        edge_attr: ``[E, F_e]`` bond features.
        num_nodes: ``N``.
        multi_hop_max_dist: truncate ``edge_input`` to this many hops.

    Returns:
        Exactly what :func:`~graphormer_urpe.graph.features.graph_structure` returns for the
        same graph.
    """
    n = int(num_nodes)
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    dist, path = decode_paths(
        np.asarray(dist_code).reshape(n, n), np.asarray(path_code).reshape(n, n)
    )
    edge_type = edge_type_matrix(ei, edge_attr, n)
    edge_input = path_edge_features(dist, path, edge_type, multi_hop_max_dist)
    adj = np.zeros((n, n), dtype=bool)
    adj[ei[0], ei[1]] = True
    return GraphStructure(dist, edge_input, adj.sum(axis=1).astype(np.int64))


def batched_path_edge_features(
    dist: np.ndarray,
    path: np.ndarray,
    edge_type: np.ndarray,
    max_hops: int | None = None,
    dtype: np.dtype | type = np.int64,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~graphormer_urpe.graph.features.path_edge_features` for ``G`` same-size graphs.

    Instead of descending the recursive expansion once per (pair, hop position), the node at
    every position of every pair is filled in by increasing distance: a pair ``(i, j)`` with
    intermediate node ``k`` and ``L = dist[i, k]`` takes position ``s`` from ``(i, k)`` when
    ``s <= L`` and from position ``s - L`` of ``(k, j)`` otherwise, both shorter pairs (Floyd–
    Warshall keeps ``dist[i, j] = dist[i, k] + dist[k, j]``). One array step per distance
    value serves all ``G`` graphs.

    Args:
        dist: ``[G, n, n]`` distances (reference semantics, 510 unreachable).
        path: ``[G, n, n]`` intermediate nodes (-1 direct, 510 unreachable).
        edge_type: ``[G, n, n, F_e]`` shifted bond features per directed pair.
        max_hops: ``multi_hop_max_dist`` (``None``: keep all hops).
        dtype: dtype of ``edge_input`` (e.g. ``int16`` to store it directly).

    Returns:
        ``(edge_input, hops)``: ``[G, n, n, H, F_e]`` of ``dtype`` and ``[G]`` int64, where graph
        ``g``'s ``edge_input[g, :, :, :hops[g]]`` equals ``path_edge_features`` of that graph
        (``H = max(hops)``; the extra hop slots hold -1).
    """
    dist = np.asarray(dist, dtype=np.int64)
    path = np.asarray(path, dtype=np.int64)
    g_count, n = dist.shape[0], dist.shape[-1]
    fe = edge_type.shape[-1]
    if n == 0 or g_count == 0:
        return np.full((g_count, n, n, 0, fe), -1, dtype=dtype), np.zeros(g_count, np.int64)
    max_dist = dist.reshape(g_count, -1).max(axis=1)
    hops = max_dist if max_hops is None else np.minimum(max_dist, max_hops)
    out = np.full((g_count, n, n, int(hops.max()), fe), -1, dtype=dtype)
    valid = (dist > 0) & (dist < UNREACHABLE)  # [G, n, n] ordered reachable pairs
    real = np.where(valid, dist, 0).reshape(g_count, -1).max(axis=1)
    t_max = int(np.minimum(real, hops).max())
    if t_max == 0:
        return out, hops
    width = t_max + 1
    nn = n * n
    flat_dist = dist.reshape(-1)
    flat_path = path.reshape(-1)
    nodes = np.full((g_count * nn, width), -1, dtype=np.int64)  # [pairs, T + 1] hop nodes
    pairs = np.flatnonzero(valid.reshape(-1))  # flat ids g * n * n + i * n + j
    pairs = pairs[np.argsort(flat_dist[pairs], kind="stable")]
    bounds = np.searchsorted(flat_dist[pairs], np.arange(1, int(real.max()) + 2))
    s = np.arange(width)
    first = pairs[: bounds[1] - bounds[0]]  # distance 1: [i, j]
    nodes[first, 0] = (first // n) % n
    nodes[first, 1] = first % n
    for d in range(2, int(real.max()) + 1):
        sel = pairs[bounds[d - 1] : bounds[d]]
        if sel.size == 0:
            continue
        j = sel % n
        k = flat_path[sel]
        left = sel - j + k  # (g, i, k)
        right = sel - j - ((sel // n) % n) * n + k * n + j  # (g, k, j)
        left_len = flat_dist[left][:, None]  # [P, 1]
        right_s = np.clip(s - left_len, 0, t_max)  # [P, T + 1]
        right_nodes = np.take(nodes, right[:, None] * width + right_s)
        vals = np.where(s <= left_len, nodes[left], right_nodes)
        vals[:, s > d] = -1
        nodes[sel] = vals
    t = np.arange(t_max)
    hop_mask = valid[..., None] & (t < dist[..., None])  # [G, n, n, T]
    nodes = nodes.reshape(g_count, n, n, width)
    base = (np.arange(g_count) * nn).reshape(g_count, 1, 1, 1)
    row = base + nodes[..., :-1] * n + nodes[..., 1:]  # [G, n, n, T] pair of each hop
    row = np.where(hop_mask, row, g_count * nn)  # the last table row is all -1
    table = np.concatenate(
        [edge_type.reshape(g_count * nn, fe).astype(dtype), np.full((1, fe), -1, dtype=dtype)]
    )
    out[:, :, :, :t_max] = table[row]
    return out, hops
