"""What molecules are made of, read from their graphs: atoms, connected pieces, and each
atom's element and formal charge (:func:`graph_facts`), for the applicability domain
(:mod:`.domain`)."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

__all__ = ["OTHER_CHARGE", "GraphFacts", "fragment_counts", "graph_facts", "species_key"]

OTHER_CHARGE = 99
"""The charge of an atom whose formal charge the featuriser does not encode (OGB's "misc":
beyond ±5)."""


class GraphFacts(NamedTuple):
    """What ``G`` molecules are made of, read from their graphs.

    Attributes:
        atoms: ``[G]`` int64 heavy atoms (graph nodes).
        fragments: ``[G]`` int64 connected pieces.
        atomic_number: ``[sum atoms]`` int64 each atom's element (0: a dummy atom ``*``).
        charge: ``[sum atoms]`` int64 each atom's formal charge (:data:`OTHER_CHARGE`: one
            the featuriser does not encode).
    """

    atoms: np.ndarray
    fragments: np.ndarray
    atomic_number: np.ndarray
    charge: np.ndarray

    @property
    def keys(self) -> np.ndarray:
        """``[sum atoms]`` int64 one number per (element, charge) pair (:func:`species_key`)."""
        return species_key(self.atomic_number, self.charge)


def species_key(atomic_number: np.ndarray, charge: np.ndarray) -> np.ndarray:
    """``atomic number * 1000 + charge + 500``: charges lie in -5..5 or are
    :data:`OTHER_CHARGE`, so ``key // 1000`` and ``key % 1000 - 500`` give the pair back."""
    return np.asarray(atomic_number, dtype=np.int64) * 1000 + np.asarray(charge) + 500


def graph_facts(arrays: dict[str, np.ndarray], featurizer: str) -> GraphFacts:
    """What the graphs of chunk or store arrays are made of.

    Args:
        arrays: ``x`` ``[sum N, F]`` (or ``[sum N]``) atom features, ``edge_index``
            ``[2, sum E]`` (each graph's own node numbers), ``num_nodes`` ``[G]`` and
            ``num_edges`` ``[G]`` (:func:`~.store.featurize_chunk`'s arrays, or a store's
            gathered through :func:`~.store._gather`).
        featurizer: ``"ogb"`` (column 0: atomic number - 1, column 3: formal charge + 5) or
            ``"zinc"`` (column 0: the ZINC atom type).
    """
    num_nodes = np.asarray(arrays["num_nodes"], dtype=np.int64)
    x = np.asarray(arrays["x"])
    x = x.reshape(x.shape[0], -1)
    if featurizer == "ogb":
        code = x[:, 0].astype(np.int64)
        atomic_number = np.where(code < 118, code + 1, 0)  # 118: OGB's "misc"
        code = x[:, 3].astype(np.int64)
        charge = np.where(code < 11, code - 5, OTHER_CHARGE)  # 11: "misc"
    elif featurizer == "zinc":
        numbers, charges = zinc_type_table()
        atomic_number, charge = numbers[x[:, 0]], charges[x[:, 0]]
    else:
        raise ValueError(f"unknown featurizer {featurizer!r}")
    fragments = fragment_counts(num_nodes, arrays["edge_index"], arrays["num_edges"])
    return GraphFacts(num_nodes, fragments, atomic_number, charge)


@lru_cache(maxsize=1)
def zinc_type_table() -> tuple[np.ndarray, np.ndarray]:
    """``([28] atomic numbers, [28] charges)`` of the ZINC atom types."""
    from rdkit import Chem

    from .featurizers.zinc_atoms import ZINC_ATOM_TYPES

    table = Chem.GetPeriodicTable()
    names = [t.split() for t in ZINC_ATOM_TYPES]
    numbers = [table.GetAtomicNumber(n[0]) for n in names]
    charges = [{"+": 1, "-": -1}.get(n[-1], 0) for n in names]
    return np.array(numbers, dtype=np.int64), np.array(charges, dtype=np.int64)


def fragment_counts(
    num_nodes: np.ndarray, edge_index: np.ndarray, num_edges: np.ndarray
) -> np.ndarray:
    """``[G]`` int64 connected pieces of each of ``G`` graphs.

    Union-find on all the graphs at once in numpy: every round joins the two roots of each
    edge whose ends have different roots (the smaller root wins), then follows the pointers
    until every node points at its root; a few rounds for molecules.

    Args:
        num_nodes: ``[G]`` nodes per graph.
        edge_index: ``[2, sum E]`` edges, each graph's own node numbers.
        num_edges: ``[G]`` edges per graph.
    """
    num_nodes = np.asarray(num_nodes, dtype=np.int64)
    ptr = np.zeros(num_nodes.size + 1, dtype=np.int64)
    np.cumsum(num_nodes, out=ptr[1:])
    shift = np.repeat(ptr[:-1], np.asarray(num_edges, dtype=np.int64))
    src = np.asarray(edge_index[0], dtype=np.int64) + shift
    dst = np.asarray(edge_index[1], dtype=np.int64) + shift
    parent = np.arange(ptr[-1], dtype=np.int64)
    while True:
        a, b = parent[src], parent[dst]
        apart = a != b
        if not apart.any():
            break
        a, b = a[apart], b[apart]
        np.minimum.at(parent, np.maximum(a, b), np.minimum(a, b))
        while True:  # pointer jumping: every node to its root
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
    graph = np.repeat(np.arange(num_nodes.size), num_nodes)
    roots = parent == np.arange(parent.size)
    return np.bincount(graph[roots], minlength=num_nodes.size).astype(np.int64)
