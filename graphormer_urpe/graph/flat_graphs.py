r"""Many graphs' Graphormer features as a few flat arrays, in graph order.

:func:`~graphormer_urpe.graph.batch.collate` pads graphs into a dense batch; what it reads of
each graph is its node features and its
:class:`~graphormer_urpe.graph.transform.GraphormerFeatures` attributes. :class:`FlatGraphs`
holds exactly that for ``B`` graphs, concatenated graph after graph:

==================  ========================  ==========================================
array               shape                     content
==================  ========================  ==========================================
``num_nodes``       ``[B]`` int64             ``N_g``
``hops``            ``[B]`` int64             stored path hops ``D_g``
``x``               ``[sum N, F]`` integer    raw node features
``degree``          ``[sum N]`` integer       node degrees
``spatial_pos``     ``[sum N^2]`` int16       row-major ``[N_g, N_g]`` shortest-path hops
``edge_input``      ``[sum N^2 D, F_e]``      row-major ``[N_g, N_g, D_g, F_e]`` path bond
                                              features (``raw + 2 + 512 f``, -1 = no hop)
``y``               ``[B, T]`` float32        targets, or ``None``
``mol_x``           ``[B, K]`` float32        per-molecule features (e.g. normalised
                                              descriptors), or ``None``
``tree_x``          ``[B, F]`` float32        per-molecule inputs of a model beside the
                                              network (raw descriptors and Morgan counts
                                              of a trees head), or ``None``
==================  ========================  ==========================================

So the graphs ``a..b`` are one contiguous slice of every array (:meth:`FlatGraphs.slice`),
and consecutive runs join with :meth:`FlatGraphs.concat`. Computed for many molecules at once
(:meth:`FlatGraphs.from_structures`) and collated without building a PyG ``Data`` per graph,
they are what streaming prediction passes from its featurising processes to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .batched_structure import BatchedStructures, concat_ranges, prefix_offsets

__all__ = ["FlatGraphs"]


@dataclass
class FlatGraphs:
    """``B`` graphs with Graphormer features, as flat numpy arrays in graph order (see the
    module's table). Picklable; slices are views."""

    num_nodes: np.ndarray
    hops: np.ndarray
    x: np.ndarray
    degree: np.ndarray
    spatial_pos: np.ndarray
    edge_input: np.ndarray
    y: np.ndarray | None = None
    mol_x: np.ndarray | None = None
    tree_x: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.num_nodes.size)

    @cached_property
    def node_ptr(self) -> np.ndarray:
        """``[B + 1]`` offsets into ``x`` and ``degree``."""
        return prefix_offsets(self.num_nodes)

    @cached_property
    def pair_ptr(self) -> np.ndarray:
        """``[B + 1]`` offsets into ``spatial_pos``."""
        return prefix_offsets(self.num_nodes * self.num_nodes)

    @cached_property
    def row_ptr(self) -> np.ndarray:
        """``[B + 1]`` offsets into ``edge_input``."""
        return prefix_offsets(self.num_nodes * self.num_nodes * self.hops)

    def slice(self, start: int, stop: int) -> FlatGraphs:
        """Graphs ``start..stop - 1`` (views of these arrays)."""
        n0, n1 = int(self.node_ptr[start]), int(self.node_ptr[stop])
        p0, p1 = int(self.pair_ptr[start]), int(self.pair_ptr[stop])
        r0, r1 = int(self.row_ptr[start]), int(self.row_ptr[stop])
        return FlatGraphs(
            self.num_nodes[start:stop],
            self.hops[start:stop],
            self.x[n0:n1],
            self.degree[n0:n1],
            self.spatial_pos[p0:p1],
            self.edge_input[r0:r1],
            _rows(self.y, slice(start, stop)),
            _rows(self.mol_x, slice(start, stop)),
            _rows(self.tree_x, slice(start, stop)),
        )

    def take(self, indices: np.ndarray) -> FlatGraphs:
        """The graphs ``indices`` (``[K]`` ints, any order), in that order (copies)."""
        g = np.asarray(indices, dtype=np.int64)
        n = self.num_nodes[g]
        nodes = concat_ranges(self.node_ptr[g], n)
        rows = concat_ranges(self.row_ptr[g], n * n * self.hops[g])
        return FlatGraphs(
            n,
            self.hops[g],
            np.take(self.x, nodes, axis=0),
            self.degree[nodes],
            self.spatial_pos[concat_ranges(self.pair_ptr[g], n * n)],
            np.take(self.edge_input, rows, axis=0),
            _rows(self.y, g),
            _rows(self.mol_x, g),
            _rows(self.tree_x, g),
        )

    @classmethod
    def concat(cls, parts: Sequence[FlatGraphs]) -> FlatGraphs:
        """The graphs of ``parts``, one after the other (``parts`` itself when only one)."""
        if len(parts) == 1:
            return parts[0]
        fe = max(p.edge_input.shape[1] for p in parts)
        edges = [_pad_columns(p.edge_input, fe, -1) for p in parts]
        f = max(p.x.shape[1] for p in parts)
        return cls(
            np.concatenate([p.num_nodes for p in parts]),
            np.concatenate([p.hops for p in parts]),
            np.concatenate([_pad_columns(p.x, f, 0) for p in parts]),
            np.concatenate([p.degree for p in parts]),
            np.concatenate([p.spatial_pos for p in parts]),
            np.concatenate(edges),
            _joined([p.y for p in parts]),
            _joined([p.mol_x for p in parts]),
            _joined([p.tree_x for p in parts]),
        )

    @classmethod
    def from_structures(
        cls, s: BatchedStructures, x: np.ndarray, y: np.ndarray | None = None
    ) -> FlatGraphs:
        """Graphs whose features :func:`~graphormer_urpe.graph.batched_structure.
        batched_graph_structure` computed (blocks in any order), put in graph order.

        Args:
            s: the structures of ``B`` graphs.
            x: ``[sum N, F]`` their node features, in graph order.
            y: ``[B, T]`` targets, or ``None``.
        """
        n = s.num_nodes
        pairs, rows = n * n, n * n * s.hops
        spatial_pos, edge_input, degree = s.spatial_pos, s.edge_input, s.degree
        if not _contiguous(s.pair_start, pairs):
            spatial_pos = spatial_pos[concat_ranges(s.pair_start, pairs)]
        if not _contiguous(s.row_start, rows):
            edge_input = np.take(edge_input, concat_ranges(s.row_start, rows), axis=0)
        if not _contiguous(s.node_start, n):
            degree = degree[concat_ranges(s.node_start, n)]
        x = np.asarray(x).reshape(int(n.sum()), -1)
        return cls(n, s.hops, x, degree, spatial_pos, edge_input, y)


def _rows(a: np.ndarray | None, sel: slice | np.ndarray) -> np.ndarray | None:
    """The per-graph rows ``sel`` of an optional ``[B, *]`` array."""
    return None if a is None else a[sel]


def _joined(parts: list[np.ndarray | None]) -> np.ndarray | None:
    """Optional per-graph arrays of consecutive parts, joined (``None`` if any is missing)."""
    if any(a is None for a in parts):
        return None
    return np.concatenate(parts)  # type: ignore[arg-type]


def _contiguous(starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether the blocks ``starts[g] : starts[g] + lengths[g]`` follow each other from 0."""
    return bool(np.array_equal(starts, prefix_offsets(lengths)[:-1]))


def _pad_columns(a: np.ndarray, width: int, value: int) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=value)
