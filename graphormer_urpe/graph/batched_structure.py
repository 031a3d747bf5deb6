r"""Graphormer's structural features for many graphs at once (the batched fast path).

:func:`~graphormer_urpe.graph.structure.graph_structure` handles one graph per call, so on
millions of small molecules the Python and numpy call overhead per graph dominates.
:func:`batched_graph_structure` computes everything
:class:`~graphormer_urpe.graph.transform.GraphormerFeatures` stores (``spatial_pos``,
``edge_input``, ``degree``) for a whole collection, with no Python loop over graphs or pairs
(:func:`~graphormer_urpe.graph.add_features.add_graphormer_features` puts it on PyG graphs, the
molecule store computes every batch it reads with it). The graphs are grouped by node count
and each group runs one Floyd–Warshall over a stacked ``[G, n, n]`` array: ``n`` rounds of
whole-array updates serve ``G`` graphs, in small integer dtypes; a few graphs of nearby sizes
share one stack, padded with isolated nodes (:func:`size_buckets`). It rests on two properties
of the reference's tie-breaking (``k`` ascending, strict improvement), proved in
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

from .structure import FEATURE_OFFSET, UNREACHABLE, GraphStructure

__all__ = [
    "BatchedStructures",
    "batched_graph_structure",
    "next_hop_floyd_warshall",
    "index_dtype",
    "size_buckets",
    "prefix_offsets",
    "concat_ranges",
]


def index_dtype(max_value: int) -> np.dtype:
    """The narrowest unsigned dtype holding ``0..max_value`` (``uint8``, ``uint16``, ...)."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


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
    :func:`~graphormer_urpe.graph.structure.graph_structure` returns.

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


def prefix_offsets(sizes: np.ndarray) -> np.ndarray:
    """``[M + 1]`` int64 exclusive prefix sums of ``[M]`` ``sizes``."""
    ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return ptr


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[r], starts[r] + lengths[r])``: ``[sum lengths]`` int64."""
    shift = np.repeat(starts - prefix_offsets(lengths)[:-1], lengths)
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


FW_ROUND_COST = 13_000
"""The fixed cost of one Floyd–Warshall round (a handful of numpy calls), in pair updates:
stacking graphs of a few sizes into one padded stack pays while the padding costs fewer
updates than the rounds it saves (measured: docs/results/code-notes.md)."""

FW_STACK_COST = 100_000
"""The fixed cost of one stack beyond its rounds (building it, reading it back), in pair
updates."""


def size_buckets(sizes: list[int], counts: list[int]) -> list[tuple[int, int]]:
    """Which consecutive sizes share one Floyd–Warshall stack, padded to the largest of them.

    A stack of ``G`` graphs padded to ``S`` nodes costs about ``S`` rounds of
    :data:`FW_ROUND_COST` plus ``G S^2`` pair updates each, and :data:`FW_STACK_COST`; the
    buckets minimise the sum (dynamic programming over the ``K`` distinct sizes). Graphs of
    more than 63 nodes, which need the wider dtypes, are never padded.

    Args:
        sizes: ``[K]`` distinct node counts, ascending.
        counts: ``[K]`` graphs of each size.

    Returns:
        ``(a, b)`` ranges of ``sizes`` (``b`` exclusive), in order, covering them all.
    """
    k = len(sizes)
    best, cut = [0.0] * (k + 1), [0] * (k + 1)
    for b in range(1, k + 1):
        top = sizes[b - 1]
        graphs, best[b], cut[b] = 0, float("inf"), b - 1
        for a in range(b - 1, -1, -1):
            graphs += counts[a]
            cost = best[a] + top * (FW_ROUND_COST + graphs * top * top) + FW_STACK_COST
            if cost < best[b]:
                best[b], cut[b] = cost, a
            if top > _PACKED_MAX_NODES:
                break
    out, b = [], k
    while b:
        out.append((cut[b], b))
        b = cut[b]
    return out[::-1]


@dataclass
class _Stack:
    """Graphs ``b0 .. b1 - 1`` (in size order) stacked as ``[G, S, S]``, each padded with
    isolated nodes after its own up to ``top`` = ``S`` (the largest): those are never
    reached and never shorten a path, so every real pair gets what its graph alone would
    give. ``where``: the stack position of every real pair, ``None`` when all have ``S``
    nodes (then the stack is the pairs themselves)."""

    b0: int
    b1: int
    top: int
    where: np.ndarray | None  # [P_stack]
    node_where: np.ndarray | None  # [V_stack] the stack position of every real node

    def padded(self, values: np.ndarray, fill: int) -> np.ndarray:
        """``[P_stack]`` values of the real pairs as ``[G, S, S]``, ``fill`` elsewhere."""
        shape = (self.b1 - self.b0, self.top, self.top)
        if self.where is None:
            return values.reshape(shape)
        out = np.full(shape[0] * self.top * self.top, fill, dtype=values.dtype)
        out[self.where] = values
        return out.reshape(shape)

    def pairs(self, stacked: np.ndarray) -> np.ndarray:
        """``[G, S, S]`` → ``[P_stack]``, the real pairs in their graphs' order."""
        flat = stacked.reshape(-1)
        return flat if self.where is None else flat[self.where]

    def nodes(self, stacked: np.ndarray) -> np.ndarray:
        """``[G, S]`` → ``[V_stack]``, the real nodes in their graphs' order."""
        flat = stacked.reshape(-1)
        return flat if self.node_where is None else flat[self.node_where]

    def within(self, stacked: np.ndarray) -> np.ndarray:
        """``[G, S, S]`` with 0 on the padded pairs."""
        if self.where is None:
            return stacked
        return np.where(self.padded(np.ones(self.where.size, dtype=bool), False), stacked, 0)


def _stacks(sorted_n: np.ndarray, pair_ptr: np.ndarray) -> list[_Stack]:
    """The Floyd–Warshall stacks of graphs laid out by size (:func:`size_buckets`)."""
    sizes, starts, counts = np.unique(sorted_n, return_index=True, return_counts=True)
    if sizes.size and sizes[0] == 0:  # empty graphs have no pairs
        sizes, starts, counts = sizes[1:], starts[1:], counts[1:]
    ends = [*starts[1:].tolist(), sorted_n.size]
    out = []
    for a, b in size_buckets(sizes.tolist(), counts.tolist()):
        b0, b1, top = int(starts[a]), ends[b - 1], int(sizes[b - 1])
        where = node_where = None
        if a + 1 < b:  # several sizes: the real rows of each graph's [S, S] block
            n = sorted_n[b0:b1]
            graph_row = np.repeat(np.arange(b1 - b0) * top, n)  # [V_stack] row 0 of each graph
            node_where = graph_row + concat_ranges(np.zeros_like(n), n)
            where = concat_ranges(node_where * top, np.repeat(n, n))
        out.append(_Stack(b0, b1, top, where, node_where))
    return out


def batched_graph_structure(
    num_nodes: np.ndarray,
    edge_index: np.ndarray,
    num_edges: np.ndarray,
    edge_attr: np.ndarray | None = None,
    multi_hop_max_dist: int | None = None,
) -> BatchedStructures:
    r""":func:`~graphormer_urpe.graph.structure.graph_structure` for many graphs in one pass.

    Nothing loops over graphs or node pairs in Python:

    1. The graphs are laid out by size, and each size (or run of nearby sizes,
       :func:`size_buckets`) runs one stacked :func:`next_hop_floyd_warshall` (``n``
       whole-array rounds for all its graphs).
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
    pair_ptr, node_ptr = prefix_offsets(sorted_n * sorted_n), prefix_offsets(sorted_n)
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
    for stack in _stacks(sorted_n, pair_ptr):
        b0, b1, top = stack.b0, stack.b1, stack.top
        count, p0, p1 = b1 - b0, int(pair_ptr[b0]), int(pair_ptr[b1])
        adj = stack.padded(pair_edge[p0:p1], e) < e  # [G, S, S]
        degree[node_ptr[b0] : node_ptr[b1]] = stack.nodes(adj.sum(axis=2))
        d, nxt = next_hop_floyd_warshall(adj)  # [G, S, S]
        dist[p0:p1] = stack.pairs(d)
        reach = (d > 0) & (d < UNREACHABLE)  # ordered reachable pairs (i != j)
        max_dist[by_size[b0:b1]] = stack.within(d).reshape(count, -1).max(axis=1)
        longest[by_size[b0:b1]] = np.where(reach, d, 0).reshape(count, -1).max(axis=1)
        size = sorted_n[b0:b1].reshape(count, 1, 1)
        node = np.arange(top)
        base = pair_ptr[b0:b1].reshape(count, 1, 1)  # pair (0, 0)
        row, col = base + size * node.reshape(1, top, 1), node.reshape(1, 1, top)
        step = nxt.astype(np.int64)  # [G, S, S]
        # the edge i -> nxt (a pair not reached, padding included, reads pair p0 and drops it)
        hop0 = np.where(reach, pair_edge[np.where(reach, row + step, p0)], e)
        first[p0:p1] = stack.pairs(hop0)
        succ[p0:p1] = stack.pairs(base + size * np.where(reach, step, col) + col)  # (nxt, j)

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
        pairs = concat_ranges(pair_start[graphs], n[graphs] * n[graphs])  # [P_D]
        walk = min(d, int(longest[graphs].max()))
        ids = np.full((d, pairs.size), no_edge, dtype=first.dtype)  # [D, P_D]
        cur = pairs
        for t in range(walk):
            np.take(first, cur, out=ids[t])
            if t + 1 < walk:
                cur = succ[cur]
        row_start[graphs] = at + prefix_offsets(rows[graphs])[:-1]
        pair_major = ids.T.reshape(-1)  # [P_D * D]
        # np.take of whole rows: many times faster than torch.index_select on int16 here
        np.take(table, pair_major, axis=0, out=edge_input[at : at + ids.size])
        at += ids.size
    return edge_input, row_start
