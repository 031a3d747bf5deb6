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

**Every feature at once.** :func:`batched_graph_structure` computes everything
:class:`~graphormer_urpe.graph.features.GraphormerFeatures` stores (``spatial_pos``,
``edge_input``, ``degree``) for a whole collection, with no Python loop over graphs or pairs
(:func:`~graphormer_urpe.graph.features.add_graphormer_features` puts it on PyG graphs). It
rests on two properties of the reference's tie-breaking, proved in
:func:`next_hop_floyd_warshall` and checked against the plain reference in the tests:

* the ``k`` recorded for ``(i, j)`` is the smallest possible largest intermediate node over
  all shortest ``i -> j`` paths, so a Floyd–Warshall that keeps the *next* node instead
  (``nxt[i, j] = nxt[i, k]`` on each strict improvement) finds the second node of the
  reference's recursively expanded path;
* the expanded paths are suffix-consistent: the path of ``(i, j)`` is ``i`` followed by the
  path of ``(nxt[i, j], j)``.

Hop ``t`` of every pair is then one array lookup per step (``D`` steps for ``D`` stored hops)
instead of a recursive expansion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .features import FEATURE_OFFSET, UNREACHABLE, GraphStructure, path_edge_features

__all__ = [
    "BatchedStructures",
    "batched_graph_structure",
    "next_hop_floyd_warshall",
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
    # np.take along axis 0: a gather of whole rows, many times faster than table[row] here
    out[:, :, :, :t_max] = np.take(table, row, axis=0)
    return out, hops


# --------------------------------------------------------------------------------------
# Whole collections at once: next-hop Floyd–Warshall and path walks over flat arrays
# --------------------------------------------------------------------------------------


@dataclass
class BatchedStructures:
    r"""Structural features of ``M`` graphs as flat arrays with one block per graph.

    Graph ``g`` (``N_g`` nodes, ``D_g`` stored hops) owns the contiguous blocks

    * ``spatial_pos[pair_start[g] : pair_start[g] + N_g ** 2]``: row-major ``[N_g, N_g]``;
    * ``edge_input[row_start[g] : row_start[g] + N_g ** 2 * D_g]``: row-major
      ``[N_g, N_g, D_g, F_e]`` flattened to rows of ``F_e``;
    * ``degree[node_start[g] : node_start[g] + N_g]``.

    The blocks are laid out in the order that was fastest to compute, not necessarily graph
    order; :meth:`graph` reads one graph back, equal to what
    :func:`~graphormer_urpe.graph.features.graph_structure` returns.

    Attributes:
        num_nodes: ``[M]`` int64 ``N_g``.
        hops: ``[M]`` int64 ``D_g = min(max(spatial_pos_g), multi_hop_max_dist)``.
        spatial_pos: ``[sum N^2]`` int16 shortest-path hops, 510 = unreachable.
        edge_input: ``[sum N^2 D, F_e]`` path bond features (``raw + 2 + 512 f``, -1 = no
            hop); int16 when every bond feature fits, else int64.
        degree: ``[sum N]`` int64 number of distinct out-going edge targets per node.
        pair_start: ``[M]`` int64 block offsets into ``spatial_pos``.
        row_start: ``[M]`` int64 block offsets into ``edge_input``.
        node_start: ``[M]`` int64 block offsets into ``degree``.
    """

    num_nodes: np.ndarray
    hops: np.ndarray
    spatial_pos: np.ndarray
    edge_input: np.ndarray
    degree: np.ndarray
    pair_start: np.ndarray
    row_start: np.ndarray
    node_start: np.ndarray

    def __len__(self) -> int:
        return int(self.num_nodes.size)

    def graph(self, g: int) -> GraphStructure:
        """Graph ``g``'s features as int64 ``[N, N]``, ``[N, N, D, F_e]`` and ``[N]`` arrays."""
        n, d = int(self.num_nodes[g]), int(self.hops[g])
        p, r, v = int(self.pair_start[g]), int(self.row_start[g]), int(self.node_start[g])
        fe = self.edge_input.shape[1]
        return GraphStructure(
            self.spatial_pos[p : p + n * n].astype(np.int64).reshape(n, n),
            self.edge_input[r : r + n * n * d].astype(np.int64).reshape(n, n, d, fe),
            self.degree[v : v + n].astype(np.int64),
        )


def _offsets(sizes: np.ndarray) -> np.ndarray:
    """``[M + 1]`` int64 exclusive prefix sums of ``[M]`` ``sizes``."""
    ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return ptr


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[r], starts[r] + lengths[r])``: ``[sum lengths]`` int64."""
    shift = np.repeat(starts - _offsets(lengths)[:-1], lengths)
    return shift + np.arange(shift.size)


def _check_graph_arrays(
    num_nodes: np.ndarray, edge_index: np.ndarray, num_edges: np.ndarray, edge_attr: np.ndarray
) -> np.ndarray:
    """Validate concatenated graphs as ``graph_structure`` does one; returns ``[E]`` graph ids."""
    m, e = num_nodes.size, edge_index.shape[1]
    if num_edges.size != m or int(num_edges.sum()) != e:
        raise ValueError(
            f"num_edges ({num_edges.size} graphs, {int(num_edges.sum())} edges) does not match "
            f"{m} graphs and edge_index with {e} edges"
        )
    if (num_nodes < 0).any() or (num_edges < 0).any():
        raise ValueError("num_nodes and num_edges must be non-negative")
    if edge_attr.shape[0] != e:
        raise ValueError(f"edge_attr has {edge_attr.shape[0]} rows but edge_index has {e} edges")
    edge_graph = np.repeat(np.arange(m), num_edges)  # [E]
    if e:
        bad = (edge_index < 0).any(axis=0) | (edge_index >= num_nodes[edge_graph]).any(axis=0)
        if bad.any():
            g = int(edge_graph[np.flatnonzero(bad)[0]])
            raise ValueError(f"graph {g}: edge_index refers to nodes outside 0..{num_nodes[g] - 1}")
    if edge_attr.size and (edge_attr.min() < 0 or edge_attr.max() >= FEATURE_OFFSET - 2):
        bad = ((edge_attr < 0) | (edge_attr >= FEATURE_OFFSET - 2)).any(axis=1)
        g = int(edge_graph[np.flatnonzero(bad)[0]])
        mine = edge_attr[edge_graph == g]
        raise ValueError(
            f"graph {g}: edge features must be integers in [0, {FEATURE_OFFSET - 3}], got range "
            f"[{mine.min()}, {mine.max()}]"
        )
    return edge_graph


def next_hop_floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Floyd–Warshall on ``G`` same-size graphs, returning the first step of every path.

    The rounds are the reference's (``k`` ascending, update on a strict improvement), and an
    update of ``(i, j)`` through ``k`` sets ``nxt[i, j] = nxt[i, k]`` (``nxt = j`` for a direct
    edge). Write ``P(i, j)`` for the reference's recursively expanded path
    ``[i] + inner(i, k) + [k] + inner(k, j) + [j]``.

    * *The recorded k is a minimax.* After round ``k``, ``dist[i, j]`` is the shortest length
      over paths with intermediate nodes ``<= k``; the last strict improvement therefore comes
      at the smallest ``k`` such that some shortest path has no intermediate node above ``k``.
      So ``k`` is the largest intermediate node of ``P(i, j)`` and every other one is smaller.
    * *nxt is the second node of P.* ``(i, k)`` already has its true distance before round
      ``k`` (otherwise ``d(i, k) + d(k, j)`` would beat ``d(i, j)``) and never changes again,
      so round ``k`` copies its final ``nxt``; by induction on the distance that is the second
      node of ``P(i, k)``, hence of ``P(i, j)``.
    * *Suffix consistency:* ``P(i, j) = [i] + P(m, j)`` for ``m = nxt[i, j]``. If ``m = k``
      this is the definition. Otherwise ``m < k``, and the rest of ``P(i, j)`` is a shortest
      ``m -> j`` path whose largest intermediate node is ``k``; no shortest ``m -> j`` path
      stays below ``k`` (prefixed with ``i`` it would do so for ``(i, j)``), so ``(m, j)``
      records ``k`` too and ``P(m, j) = P(m, k) + P(k, j)``, where ``P(m, k)`` is the rest of
      ``P(i, k)`` by induction.

    This is what lets :func:`batched_graph_structure` walk every path one hop at a time.

    Args:
        adj: ``[G, n, n]`` boolean adjacency.

    Returns:
        ``(dist, nxt)``: ``[G, n, n]`` int16 distances (0 on the diagonal, 510 unreachable)
        and the next node, ``uint8`` up to 127 nodes else ``int32`` (``j`` itself on the
        diagonal and where unreachable).
    """
    adj = np.asarray(adj, dtype=bool)
    if adj.ndim != 3 or adj.shape[1] != adj.shape[2]:
        raise ValueError(f"adj must be [G, n, n], got shape {adj.shape}")
    if adj.shape[-1] <= _PACKED_MAX_NODES:
        return _packed_floyd_warshall(adj)
    return _wide_floyd_warshall(adj)


_PACKED_MAX_NODES = 63


def _packed_floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`next_hop_floyd_warshall` for up to 63 nodes, on one ``uint16`` per pair.

    The high byte holds ``2 * dist`` (126 = not reached yet, above any real distance) and the
    low byte ``nxt``, so one ``minimum`` updates both. A candidate through ``k`` carries
    ``2 * dist + 1``: it wins exactly when its distance is strictly shorter (a tie leaves the
    older entry in place, as the reference's strict comparison does), and clearing that bit
    after each round restores the format. ``126 + 126 + 1`` still fits in the high byte.
    """
    g, n = adj.shape[0], adj.shape[-1]
    node = np.arange(n, dtype=np.uint16)
    key = np.where(adj, np.uint16(2 << 8), np.uint16(126 << 8)) | node  # nxt = j
    key[:, node, node] = node  # distance 0 on the diagonal
    cand = np.empty_like(key)
    via_col = np.empty((g, n, 1), dtype=np.uint16)
    via_row = np.empty((g, 1, n), dtype=np.uint16)
    for k in range(n):
        # Row and column k cannot improve in round k (dist[k, k] = 0), so a whole-array update
        # equals the reference's in-place loop over (i, j).
        np.add(key[:, :, k, None], np.uint16(1 << 8), out=via_col)  # 2 d(i, k) + 1, nxt(i, k)
        np.bitwise_and(key[:, None, k, :], np.uint16(0xFF00), out=via_row)  # 2 d(k, j)
        np.add(via_col, via_row, out=cand)
        np.minimum(key, cand, out=key)
        np.bitwise_and(key, np.uint16(0xFEFF), out=key)
    dist = (key >> 9).astype(np.int16)
    dist[dist >= 63] = UNREACHABLE
    return dist, (key & 0xFF).astype(np.uint8)


def _wide_floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`next_hop_floyd_warshall` on separate distance and next-node arrays.

    Up to 127 nodes the distances run in ``uint8`` with 127 for "not reached yet" (real
    distances stay below it and ``127 + 127`` still fits), so the comparisons are exactly the
    reference's; larger graphs use ``int32`` and 510.
    """
    g, n = adj.shape[0], adj.shape[-1]
    dtype, unset = (np.uint8, 127) if n <= 127 else (np.int32, UNREACHABLE)
    dist = np.where(adj, dtype(1), dtype(unset))
    diag = np.arange(n)
    dist[:, diag, diag] = 0
    nxt = np.empty(dist.shape, dtype=dtype)
    nxt[...] = diag.astype(dtype)  # nxt[g, i, j] = j
    cand = np.empty_like(dist)
    better = np.empty(dist.shape, dtype=bool)
    col = np.empty((g, n, 1), dtype=dtype)
    for k in range(n):
        np.add(dist[:, :, k, None], dist[:, None, k, :], out=cand)
        np.less(cand, dist, out=better)
        np.minimum(dist, cand, out=dist)
        col[...] = nxt[:, :, k, None]
        np.copyto(nxt, col, where=better)
    out = dist.astype(np.int16) if dtype == np.uint8 else np.minimum(dist, UNREACHABLE)
    out[dist >= unset] = UNREACHABLE
    return out.astype(np.int16, copy=False), nxt


def batched_graph_structure(
    num_nodes: np.ndarray,
    edge_index: np.ndarray,
    num_edges: np.ndarray,
    edge_attr: np.ndarray | None = None,
    multi_hop_max_dist: int | None = None,
) -> BatchedStructures:
    r""":func:`~graphormer_urpe.graph.features.graph_structure` for many graphs in one pass.

    Nothing loops over graphs or node pairs in Python:

    1. The graphs are laid out by size, and each size runs one stacked
       :func:`next_hop_floyd_warshall` (``n`` whole-array rounds for all its graphs).
    2. Every ordered pair ``p = (i, j)`` gets its first hop's edge ``first[p]`` (the edge
       ``i -> nxt[i, j]``) and its successor ``succ[p] = (nxt[i, j], j)``; the diagonal and
       unreachable pairs have no edge and are their own successor.
    3. By suffix consistency, hop ``t`` of pair ``p`` is ``first[succ^t(p)]``: the graphs
       storing ``D`` hops walk all their pairs ``D`` steps together, and a last gather turns
       edge ids into bond features, already in the ``[N, N, D, F_e]`` layout.

    Args:
        num_nodes: ``[M]`` nodes per graph.
        edge_index: ``[2, sum E]`` directed edges of all graphs, node ids local to each graph.
        num_edges: ``[M]`` edges per graph.
        edge_attr: ``[sum E]`` or ``[sum E, F_e]`` non-negative integer bond features, or
            ``None`` (one feature of value 0 per edge).
        multi_hop_max_dist: truncate ``edge_input`` to this many hops (``None``: keep all).

    Returns:
        The graphs' :class:`BatchedStructures`; ``graph(g)`` equals ``graph_structure`` of
        graph ``g``.

    Raises:
        ValueError: inconsistent sizes, an edge outside its graph, or a bond feature outside
            ``[0, 509]``; the message names the graph.
    """
    n = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    ne = np.asarray(num_edges, dtype=np.int64).reshape(-1)
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    if edge_attr is None:
        ea = np.zeros((ei.shape[1], 1), dtype=np.int64)
    else:
        ea = np.asarray(edge_attr, dtype=np.int64)
        if ea.ndim == 1:
            ea = ea[:, None]
        elif ea.ndim != 2:
            raise ValueError(f"edge_attr must be [E] or [E, F_e], got shape {ea.shape}")
    if multi_hop_max_dist is not None and multi_hop_max_dist < 0:
        raise ValueError(f"multi_hop_max_dist must be >= 0 or None, got {multi_hop_max_dist}")
    edge_graph = _check_graph_arrays(n, ei, ne, ea)
    m, e = n.size, ei.shape[1]

    # blocks laid out by size, so that each size is one [G, n, n] stack
    by_size = np.argsort(n, kind="stable")  # [M] block position -> graph
    sorted_n = n[by_size]
    pair_ptr, node_ptr = _offsets(sorted_n * sorted_n), _offsets(sorted_n)
    pair_start, node_start = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    pair_start[by_size], node_start[by_size] = pair_ptr[:-1], node_ptr[:-1]
    num_pairs = int(pair_ptr[-1])

    # the edge of each ordered pair (e = none); a repeated (i, j) keeps its last edge, as the
    # reference's edge_type[i, j] assignment does
    edge_pair = pair_start[edge_graph] + ei[0] * n[edge_graph] + ei[1]  # [E]
    order = np.arange(e)
    pair_edge = np.full(num_pairs, e, dtype=np.int64)  # [P]
    pair_edge[edge_pair] = order
    if e and not np.array_equal(pair_edge[edge_pair], order):
        np.maximum.at(pair_edge, edge_pair, order)

    dist = np.empty(num_pairs, dtype=np.int16)  # [P] shortest-path hops
    first = np.empty(num_pairs, dtype=np.int32 if e < 2**31 else np.int64)  # [P] edge of hop 0
    succ = np.empty(num_pairs, dtype=np.int64)  # [P] the pair one hop further along
    degree = np.empty(int(node_ptr[-1]), dtype=np.int64)  # [V]
    max_dist = np.zeros(m, dtype=np.int64)  # [M] 510 when disconnected
    longest = np.zeros(m, dtype=np.int64)  # [M] longest shortest path
    sizes, starts = np.unique(sorted_n, return_index=True)
    ends = [*starts[1:].tolist(), m]
    for size, b0, b1 in zip(sizes.tolist(), starts.tolist(), ends, strict=True):
        if size == 0:
            continue
        count, p0, p1 = b1 - b0, int(pair_ptr[b0]), int(pair_ptr[b1])
        adj = (pair_edge[p0:p1] < e).reshape(count, size, size)
        degree[node_ptr[b0] : node_ptr[b1]] = adj.sum(axis=2).reshape(-1)
        d, nxt = next_hop_floyd_warshall(adj)  # [G, n, n]
        dist[p0:p1] = d.reshape(-1)
        reach = (d > 0) & (d < UNREACHABLE)  # ordered reachable pairs (i != j)
        max_dist[by_size[b0:b1]] = d.reshape(count, -1).max(axis=1)
        longest[by_size[b0:b1]] = np.where(reach, d, 0).reshape(count, -1).max(axis=1)
        node = np.arange(size)
        base = (p0 + size * size * np.arange(count)).reshape(count, 1, 1)  # pair (0, 0)
        row, col = base + size * node.reshape(1, size, 1), node.reshape(1, 1, size)
        step = nxt.astype(np.int64)  # [G, n, n]
        first[p0:p1] = np.where(reach, pair_edge[row + step], e).reshape(-1)  # edge i -> nxt
        succ[p0:p1] = (base + size * np.where(reach, step, col) + col).reshape(-1)  # (nxt, j)

    hops = max_dist if multi_hop_max_dist is None else np.minimum(max_dist, multi_hop_max_dist)
    edge_input, row_start = _walk_paths(n, hops, longest, pair_start, first, succ, e, ea)
    return BatchedStructures(n, hops, dist, edge_input, degree, pair_start, row_start, node_start)


def _walk_paths(
    n: np.ndarray,
    hops: np.ndarray,
    longest: np.ndarray,
    pair_start: np.ndarray,
    first: np.ndarray,
    succ: np.ndarray,
    no_edge: int,
    edge_attr: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``edge_input`` of every graph: hop ``t`` of pair ``p`` is the edge ``first[succ^t(p)]``.

    The graphs storing the same number of hops ``D`` walk all their pairs together, ``D``
    steps (fewer when no path is that long), into ``[D, P_D]`` edge ids; one gather from the
    shifted bond features then writes their ``[N, N, D, F_e]`` blocks one after the other.

    Args:
        n: ``[M]`` nodes per graph; ``hops``: ``[M]`` stored hops ``D_g``; ``longest``: ``[M]``
            longest shortest path of each graph.
        pair_start: ``[M]`` each graph's first pair in ``first`` / ``succ``.
        first: ``[P]`` edge of each pair's first hop (``no_edge`` on the diagonal or when
            unreachable); ``succ``: ``[P]`` the pair one hop further along (itself there).
        no_edge: the edge id meaning "no hop".
        edge_attr: ``[E, F_e]`` raw bond features.

    Returns:
        ``(edge_input [sum N^2 D, F_e], row_start [M])``.
    """
    fe = edge_attr.shape[1]
    shifted = edge_attr + 2 + FEATURE_OFFSET * np.arange(fe)  # [E, F_e]
    small = not shifted.size or int(shifted.max()) < 2**15
    table = np.concatenate([shifted, np.full((1, fe), -1, dtype=np.int64)])  # last row: none
    table = table.astype(np.int16 if small else np.int64)  # [E + 1, F_e]
    rows = n * n * hops  # [M]
    edge_input = np.empty((int(rows.sum()), fe), dtype=table.dtype)
    row_start = np.zeros(n.size, dtype=np.int64)
    at = 0
    for d in np.unique(hops[hops > 0]).tolist():
        graphs = np.flatnonzero(hops == d)
        pairs = _ranges(pair_start[graphs], n[graphs] * n[graphs])  # [P_D]
        walk = min(d, int(longest[graphs].max()))
        ids = np.full((d, pairs.size), no_edge, dtype=first.dtype)  # [D, P_D]
        cur = pairs
        for t in range(walk):
            np.take(first, cur, out=ids[t])
            if t + 1 < walk:
                cur = succ[cur]
        row_start[graphs] = at + _offsets(rows[graphs])[:-1]
        pair_major = ids.T.reshape(-1)  # [P_D * D]
        # np.take of whole rows: many times faster than torch.index_select on int16 here
        np.take(table, pair_major, axis=0, out=edge_input[at : at + ids.size])
        at += ids.size
    return edge_input, row_start
