"""The store's format: its file names and arrays, what a build reports, whether a store is
complete (:mod:`~graphormer_urpe.datasets.store` describes the whole)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STORE_FORMAT", "StoreReport", "ChunkResult", "MoleculeFailure", "store_is_complete"]


STORE_FORMAT = "graphormer-urpe-mmap/2"
SPLIT_NAMES: tuple[str, str, str] = ("train", "valid", "test")
"""Split codes stored with the graphs: ``0`` train, ``1`` valid, ``2`` test (``-1``: none)."""
FEATURIZER_NAMES: tuple[str, ...] = ("ogb", "zinc")
META_FILE = "meta.json"
PLAN_FILE = "plan.json"
CHUNKS_DIR = "chunks"
DEFAULT_CHUNK_SIZE = 20_000
MAX_LOGGED_FAILURES = 20
CHUNK_ARRAYS = (
    "x",
    "edge_index",
    "edge_attr",
    "y",
    "num_nodes",
    "num_edges",
    "source_index",
)
OPTIONAL_CHUNK_ARRAYS = ("smiles_bytes", "smiles_len", "split", "descriptors")
STORE_ARRAYS = (
    "x",
    "edge_index",
    "edge_attr",
    "y",
    "node_ptr",
    "edge_ptr",
    "source_index",
)


@dataclass
class MoleculeFailure:
    """A source row that produced no graph (``split``: the row's split code, see
    :data:`SPLIT_NAMES`; -1 when the source labels no splits)."""

    index: int
    smiles: str
    reason: str
    split: int = -1


@dataclass
class ChunkResult:
    """What building one chunk produced (returned by the worker processes)."""

    chunk: int
    rows: int
    graphs: int
    failures: list[MoleculeFailure]
    seconds: dict[str, float]


@dataclass
class StoreReport:
    """Outcome of :func:`build_molecule_store`.

    Attributes:
        folder: the store's folder.
        molecules: source rows.
        graphs: stored graphs (``molecules - len(failures)``).
        failures: the rows that produced no graph.
        built: whether this call computed anything (``False``: the store was complete).
        chunks: chunks in the plan; ``chunks_computed`` of them were computed by this call.
        workers: processes used.
        seconds: wall time of this call (chunks + merge); ``process_seconds`` of the chunks.
        molecules_per_second: rows processed by this call / ``process_seconds``.
        stage_seconds: time summed over chunks (all workers) in ``featurize`` (SMILES → graph),
            ``arrays`` (graphs → compact arrays), ``write``; plus ``merge`` (wall).
        store_bytes: size of the finished store on disk.
        load_seconds: time to open the finished store (memory-map every array).
    """

    folder: str
    molecules: int
    graphs: int
    failures: list[MoleculeFailure]
    built: bool
    chunks: int
    chunks_computed: int
    workers: int
    seconds: float
    process_seconds: float
    molecules_per_second: float | None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    store_bytes: int = 0
    load_seconds: float = 0.0

    def to_dict(self, max_failures: int = 100) -> dict[str, Any]:
        """JSON-friendly dict (at most ``max_failures`` failures listed, all counted; the
        fields' previous names, :data:`PREVIOUS_REPORT_KEYS`, hold the same values)."""
        d = asdict(self)
        d["failures"] = [asdict(f) for f in self.failures[:max_failures]]
        d["num_failures"] = len(self.failures)
        for name, previous in PREVIOUS_REPORT_KEYS.items():
            d[previous] = d[name]
        return d


PREVIOUS_REPORT_KEYS = {"folder": "cache_dir", "store_bytes": "cache_bytes"}
""":class:`StoreReport` fields → the keys the report's JSON (``graphormer-urpe preprocess``)
had before the store was called a store; written too until the next minor release."""


def store_is_complete(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a finished store of this format."""
    meta = Path(folder) / META_FILE
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("format") == STORE_FORMAT
    except (OSError, json.JSONDecodeError):
        return False


def counts_to_pointer(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def row_text(row: int, line_offset: int | None) -> str:
    return f"row {row}" if line_offset is None else f"row {row} (line {row + line_offset})"
