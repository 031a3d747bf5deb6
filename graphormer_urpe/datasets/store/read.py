"""Reading a store: the memory-mapped arrays (:class:`MoleculeStore`) and the dataset of a
split (:class:`StoreGraphDataset`), whose batches get their Graphormer features as they are
read (:mod:`~graphormer_urpe.datasets.store` describes the whole)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ...graph.batched_structure import batched_graph_structure, concat_ranges
from ...graph.flat_graphs import FlatGraphs
from ...utils.deprecation import renamed_attribute
from .format import (
    META_FILE,
    STORE_ARRAYS,
    STORE_FORMAT,
    MoleculeFailure,
    counts_to_pointer,
    folder_bytes,
    row_text,
    store_is_complete,
)

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = [
    "StoreGraphDataset",
    "MolFeatureSource",
    "MoleculeStore",
    "decode_graphs",
    "flat_graphs",
    "with_pointers",
]


# --------------------------------------------------------------------------------------
# Reading a store
# --------------------------------------------------------------------------------------


def with_pointers(chunk: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Chunk arrays (:func:`graph_arrays`) with the ``node_ptr`` / ``edge_ptr``
    offsets that :func:`decode_graphs` reads, as a finished store has them."""
    n = np.asarray(chunk["num_nodes"], dtype=np.int64)
    out = dict(chunk)
    out["node_ptr"] = counts_to_pointer(n)
    out["edge_ptr"] = counts_to_pointer(np.asarray(chunk["num_edges"], dtype=np.int64))
    return out


def gather_arrays(arrays: dict[str, np.ndarray], positions: np.ndarray) -> dict[str, np.ndarray]:
    """The molecules at ``positions`` of store arrays, concatenated in that order."""
    node_ptr, edge_ptr = arrays["node_ptr"], arrays["edge_ptr"]
    n0, e0 = node_ptr[positions], edge_ptr[positions]
    num_nodes = node_ptr[positions + 1] - n0
    num_edges = edge_ptr[positions + 1] - e0
    nodes, edges = concat_ranges(n0, num_nodes), concat_ranges(e0, num_edges)
    return {
        "num_nodes": num_nodes,
        "num_edges": num_edges,
        "x": np.take(arrays["x"], nodes, axis=0),
        "edge_index": np.take(arrays["edge_index"], edges, axis=1).astype(np.int64),
        "edge_attr": np.take(arrays["edge_attr"], edges, axis=0).astype(np.int64),
        "y": np.asarray(arrays["y"][positions], dtype=np.float32),
    }


def flat_graphs(
    arrays: dict[str, np.ndarray], indices: Sequence[int], multi_hop_max_dist: int = 5
) -> tuple[FlatGraphs, dict[str, np.ndarray]]:
    """The graphs at positions ``indices`` of store arrays with their Graphormer features,
    computed together from their bonds
    (:func:`~graphormer_urpe.graph.batched_structure.batched_graph_structure`).

    Args:
        arrays: a finished store's arrays, or chunk arrays through :func:`with_pointers`.
        indices: ``[B]`` positions of the graphs.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.

    Returns:
        ``(flat, raw)``: the :class:`~graphormer_urpe.graph.flat_graphs.FlatGraphs` (targets in
        ``y``), and the graphs' concatenated store arrays (``num_nodes``, ``num_edges``,
        ``x``, ``edge_index`` local to each graph, ``edge_attr`` ``[sum E, F_e]``, ``y``).
    """
    if multi_hop_max_dist < 1:
        raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
    raw = gather_arrays(arrays, np.asarray(indices, dtype=np.int64).reshape(-1))
    s = batched_graph_structure(
        raw["num_nodes"], raw["edge_index"], raw["num_edges"], raw["edge_attr"], multi_hop_max_dist
    )
    return FlatGraphs.from_structures(s, raw["x"], raw["y"]), raw


def decode_graphs(
    arrays: dict[str, np.ndarray],
    indices: Sequence[int],
    multi_hop_max_dist: int = 5,
    edge_attr_1d: bool = False,
) -> list[Data]:
    """The graphs at positions ``indices`` of store arrays, with Graphormer features.

    Each ``Data`` has ``x`` ``[N, F]`` long, ``edge_index`` ``[2, E]`` long, ``edge_attr``
    ``[E, F_e]`` long (``[E]`` with ``edge_attr_1d``), ``y`` ``[1, T]`` float32 and exactly
    the attributes of :class:`~graphormer_urpe.graph.transform.GraphormerFeatures`
    (``spatial_pos`` ``[N * N]`` int16, ``edge_input`` ``[N * N * D, F_e]`` int16,
    ``edge_input_hops`` ``[1]``, ``degree`` ``[N]`` long), computed for all the graphs at
    once (:func:`flat_graphs`).

    Args:
        arrays: a finished store's arrays, or chunk arrays through :func:`with_pointers`.
        indices: positions of the graphs.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        edge_attr_1d: the source's bond features are ``[E]`` (ZINC), not ``[E, F_e]``.
    """
    if len(indices) == 0:
        if multi_hop_max_dist < 1:
            raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
        return []
    from torch_geometric.data import Data  # the graphs are PyG's; the stores need no PyG

    flat, raw = flat_graphs(arrays, indices, multi_hop_max_dist)
    edge_ptr = np.concatenate([[0], np.cumsum(raw["num_edges"])])
    x = torch.from_numpy(raw["x"].astype(np.int64))
    edge_index = torch.from_numpy(raw["edge_index"])
    edge_attr = torch.from_numpy(raw["edge_attr"])
    out = []
    for g in range(len(flat)):
        n0, n1 = int(flat.node_ptr[g]), int(flat.node_ptr[g + 1])
        e0, e1 = int(edge_ptr[g]), int(edge_ptr[g + 1])
        p0, p1 = int(flat.pair_ptr[g]), int(flat.pair_ptr[g + 1])
        r0, r1 = int(flat.row_ptr[g]), int(flat.row_ptr[g + 1])
        ea = edge_attr[e0:e1].clone()
        out.append(
            Data(
                x=x[n0:n1].clone(),
                edge_index=edge_index[:, e0:e1].clone(),
                edge_attr=ea.view(-1) if edge_attr_1d else ea,
                y=torch.from_numpy(flat.y[g : g + 1].copy()),
                spatial_pos=torch.from_numpy(flat.spatial_pos[p0:p1].copy()),
                edge_input=torch.from_numpy(flat.edge_input[r0:r1].copy()),
                edge_input_hops=torch.tensor([int(flat.hops[g])], dtype=torch.long),
                degree=torch.from_numpy(flat.degree[n0:n1].copy()),
            )
        )
    return out


class MoleculeStore:
    """Read access to a finished store; arrays are memory-mapped on first use.

    Safe to hand to ``DataLoader`` worker processes: the memory maps are not pickled, each
    process opens its own (the operating system shares the pages).

    Args:
        folder: a folder written by :func:`build_molecule_store`.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        if not store_is_complete(self.folder):
            raise FileNotFoundError(
                f"{self.folder} is not a finished molecule store (no {META_FILE} of format "
                f"{STORE_FORMAT}); build it with build_molecule_store or graphormer-urpe "
                "preprocess"
            )
        self.meta: dict[str, Any] = json.loads(
            (self.folder / META_FILE).read_text(encoding="utf-8")
        )
        self._arrays: dict[str, np.ndarray] | None = None

    def open(self) -> dict[str, np.ndarray]:
        """Memory-map every array (idempotent) and return them by name."""
        if self._arrays is None:
            arrays = {}
            for name in self.meta.get("arrays", STORE_ARRAYS):
                path = self.folder / f"{name}.npy"
                try:
                    # a plain ndarray view of the map: slicing np.memmap is slower
                    # (docs/results/code-notes.md)
                    arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
                except (OSError, ValueError) as exc:
                    raise ValueError(f"store array {path} cannot be read: {exc}") from exc
            if arrays["node_ptr"].size != self.meta["graphs"] + 1:
                raise ValueError(
                    f"{self.folder}: node_ptr has {arrays['node_ptr'].size} entries for "
                    f"{self.meta['graphs']} graphs; the store is damaged, remove it to rebuild"
                )
            self._arrays = arrays
        return self._arrays

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = None  # re-mapped lazily in the receiving process
        return state

    def __len__(self) -> int:
        return int(self.meta["graphs"])

    @property
    def target_names(self) -> list[str]:
        return list(self.meta["target_names"])

    @property
    def featurizer(self) -> str:
        """The featuriser the graphs were built with (``"ogb"`` or ``"zinc"``)."""
        return str(self.meta.get("featurizer", "ogb"))

    @property
    def failures(self) -> list[MoleculeFailure]:
        """Source rows that are not in the store."""
        return [MoleculeFailure(**f) for f in self.meta["failures"]]

    @property
    def source_index(self) -> np.ndarray:
        """``[M]`` source row of each stored graph."""
        return self.open()["source_index"]

    @property
    def targets(self) -> np.ndarray:
        """``[M, T]`` float32 targets (memory-mapped)."""
        return self.open()["y"]

    @property
    def split_codes(self) -> np.ndarray | None:
        """``[M]`` int8 split of each graph (index into :data:`SPLIT_NAMES`, ``-1``: none), or
        ``None`` when the source gives no split."""
        return self.open().get("split")

    def describe_row(self, row: int) -> str:
        """Where source row ``row`` is, for messages (``"row r (line l)"`` for text files)."""
        return row_text(row, self.meta.get("line_offset"))

    def smiles(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        """The SMILES of the graphs at ``positions`` (the store must keep them)."""
        a = self.open()
        if "smiles_ptr" not in a:
            raise ValueError(f"{self.folder} keeps no SMILES (its source has none)")
        ptr, raw = a["smiles_ptr"], a["smiles_bytes"]
        return [bytes(raw[ptr[p] : ptr[p + 1]]).decode("utf-8") for p in np.asarray(positions)]

    @property
    def has_descriptors(self) -> bool:
        """Whether the store was built with ``descriptors=True``."""
        return "descriptors" in self.meta

    @property
    def descriptor_names(self) -> list[str]:
        """``[K]`` names of the stored descriptors (empty without them)."""
        return list(self.meta.get("descriptors", {}).get("names", []))

    @property
    def descriptors(self) -> np.ndarray:
        """``[M, K]`` float32 raw RDKit 2D descriptors (memory-mapped; ``NaN`` = failed)."""
        if not self.has_descriptors:
            raise ValueError(f"{self.folder} was built without descriptors")
        return self.open()["descriptors"]

    @property
    def has_smiles(self) -> bool:
        return "smiles_ptr" in self.meta.get("arrays", ())

    @property
    def nbytes(self) -> int:
        """Size of the store on disk."""
        return folder_bytes(self.folder)

    def graphs(self, indices: Sequence[int], multi_hop_max_dist: int = 5) -> list[Data]:
        """The graphs at store positions ``indices`` (see :func:`decode_graphs`)."""
        size = len(self)
        positions = []
        for i in indices:
            i = int(i)
            if not -size <= i < size:
                raise IndexError(f"graph {i} out of range for a store of {size} graphs")
            positions.append(i % size)
        edge_1d = bool(self.meta.get("edge_attr_1d", False))
        return decode_graphs(self.open(), positions, multi_hop_max_dist, edge_1d)

    def graph(self, i: int, multi_hop_max_dist: int = 5) -> Data:
        """One graph (see :meth:`graphs`)."""
        return self.graphs([i], multi_hop_max_dist)[0]

    def __repr__(self) -> str:
        return f"MoleculeStore({str(self.folder)!r}, graphs={len(self)})"

    cache_dir = renamed_attribute("MoleculeStore", "cache_dir", "folder")


class MolFeatureSource(Protocol):
    """What a split needs of its molecule features (:class:`~..mol_features.MolFeatureMaker`)."""

    def check(self, store: MoleculeStore) -> None:
        """``ValueError`` unless ``store`` holds what the features are computed from."""

    def of_store(self, store: MoleculeStore, positions: Sequence[int]) -> np.ndarray:
        """``[n, K]`` float32 features of the graphs at store ``positions``."""


class StoreGraphDataset(Dataset):
    """A split of a :class:`MoleculeStore` as a map-style dataset of PyG ``Data``.

    ``DataLoader`` fetches whole batches through :meth:`__getitems__`, so the path features of
    a batch are rebuilt together.

    Args:
        store: the store.
        positions: ``[N]`` store positions of this split's graphs, in order.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        name: the split's name, for messages.
        mol_features: a fitted :class:`~..mol_features.MolFeatureMaker`: each ``Data`` then
            carries ``mol_x`` ``[1, K]`` float32, its molecule features (the model joins
            them to the graph token); ``None``: none.
    """

    def __init__(
        self,
        store: MoleculeStore,
        positions: np.ndarray,
        multi_hop_max_dist: int = 5,
        name: str = "",
        *,
        mol_features: MolFeatureSource | None = None,
    ) -> None:
        self.store = store
        self.positions = np.asarray(positions, dtype=np.int64)
        self.multi_hop_max_dist = int(multi_hop_max_dist)
        self.name = name
        if mol_features is not None:
            mol_features.check(store)
        self.mol_features = mol_features

    def __len__(self) -> int:
        return int(self.positions.size)

    def with_positions(self, positions: np.ndarray) -> StoreGraphDataset:
        """The same kind of split over other store ``positions`` ``[n]``."""
        return StoreGraphDataset(
            self.store,
            positions,
            self.multi_hop_max_dist,
            self.name,
            mol_features=self.mol_features,
        )

    def _pos(self, idx: int) -> int:
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for {self.name or 'split'} of {n} graphs")
        return int(self.positions[idx])

    def __getitem__(self, idx: int) -> Data:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Data]:
        pos = [self._pos(int(i)) for i in indices]
        graphs = self.store.graphs(pos, self.multi_hop_max_dist)
        if self.mol_features is not None:
            mol_x = torch.from_numpy(self.mol_features.of_store(self.store, pos))  # [n, K]
            for g, row in zip(graphs, mol_x, strict=True):
                g.mol_x = row.view(1, -1)
        return graphs

    def target_matrix(self) -> Tensor:
        """``[N, T]`` float targets of the split, read without building any graph."""
        return torch.from_numpy(np.asarray(self.store.targets[self.positions], dtype=np.float32))

    @property
    def source_index(self) -> np.ndarray:
        """``[N]`` source row of each graph."""
        return np.asarray(self.store.source_index[self.positions])

    def smiles(self) -> list[str]:
        """``[N]`` SMILES of the split's graphs (stores of SMILES sources only)."""
        return self.store.smiles(self.positions)

    def describe(self, idx: Sequence[int] | np.ndarray) -> list[str]:
        """Where the graphs at split positions ``idx`` come from: source row (and SMILES)."""
        pos = self.positions[np.asarray(idx, dtype=np.int64)]
        rows = [self.store.describe_row(int(r)) for r in self.store.source_index[pos]]
        if not self.store.has_smiles:
            return rows
        return [f"{r} {s!r}" for r, s in zip(rows, self.store.smiles(pos), strict=True)]

    def __repr__(self) -> str:
        return f"StoreGraphDataset({self.name!r}, {len(self)} graphs)"

    cache = renamed_attribute("StoreGraphDataset", "cache", "store")
