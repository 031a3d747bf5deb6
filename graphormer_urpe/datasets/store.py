r"""The store behind every dataset: memory-mapped molecules, built in parallel chunks, read lazily.

A store (a "cache" in the names below) is a folder of flat numpy arrays (``.npy``, opened
with ``mmap_mode="r"``) plus ``meta.json``. For ``M`` molecules with ``N_m`` atoms and ``E_m``
directed bonds:

================  ===================  ======================================================
array             shape                content
================  ===================  ======================================================
``x``             ``[sum N, F]``       atom features (OGB: ``F = 9``), narrowest integer dtype
``edge_index``    ``[2, sum E]``       directed bonds, node ids local to each molecule
``edge_attr``     ``[sum E, F_e]``     bond features (OGB: ``F_e = 3``)
``y``             ``[M, T]`` float32   targets, ``NaN`` = missing (e.g. the test splits)
``node_ptr``      ``[M + 1]`` int64    offsets into ``x``; likewise ``edge_ptr``
``source_index``  ``[M]`` int64        the source row of each cached molecule
``smiles_bytes``  ``[sum len]`` uint8  SMILES (UTF-8) of SMILES sources; ``smiles_ptr``
                                       ``[M + 1]`` their offsets
``split``         ``[M]`` int8         split codes (0 train, 1 valid, 2 test) when the
                                       source labels its splits
``descriptors``   ``[M, K]`` float32   RDKit 2D descriptors (:mod:`.descriptors`), only in
                                       stores built with ``descriptors=True``; ``NaN`` =
                                       the descriptor failed or was not finite
================  ===================  ======================================================

No pairwise data is stored: about 560 bytes per drug-like molecule, against the 30 bytes
*per atom pair* of an ``int16`` ``[N, N, D, F_e]`` ``edge_input`` tensor (``D = 5``,
``F_e = 3``), which would also tie the store to one ``multi_hop_max_dist``. The Graphormer
features are computed when graphs are read, for a whole batch at once when the
``DataLoader`` asks through ``__getitems__``, from the bonds
(:func:`~graphormer_urpe.graph.fast_features.batched_graph_structure`); the graph that comes
out is identical to what :class:`~graphormer_urpe.graph.features.GraphormerFeatures` stores.
(Format 1 also kept two ``[N, N]`` shortest-path matrices per molecule, 2 bytes per atom
pair that reading never used; its stores are left alone and rebuilt under format 2.)

**Building** (:func:`build_molecule_cache`) splits the source rows into fixed chunks (the chunk
size is recorded in ``plan.json`` on the first run). Each chunk is featurised (OGB's features,
:mod:`~graphormer_urpe.datasets.ogb_graph`, or the ZINC featuriser; sources of ready graphs
such as ZINC's pickles and OGB's raw files skip this step) and written to ``chunks/<id>/``
atomically (a temporary folder renamed into place), by ``workers`` processes.
An interrupted build resumes with the chunks that are missing; finished chunks are never
recomputed. When all are there they are concatenated into the final arrays (again through
temporary files), ``meta.json`` is written last, and the chunks are removed.

**Descriptors** (``descriptors=True``, SMILES sources only): each chunk also computes the
RDKit 2D descriptors of its molecules (:func:`~.descriptors.compute_descriptors`, in the same
worker processes, from the same SMILES), raw and unnormalised; ``meta.json["descriptors"]``
records the descriptor set and RDKit version (:func:`~.descriptors.descriptor_set_id`), the
names and how many values per descriptor were not finite. The option is part of the build
plan, and sources put it in their store's key (:func:`~.source.store_dir`), so a store built
without descriptors is never reused for a request with them: that builds its own store. They
cost about 4-6 ms per molecule on one core, several times the featurisation.

**Failures.** A SMILES that RDKit cannot parse, or a molecule without atoms, is left out:
it is recorded (source row, SMILES, reason) in ``meta.json["failures"]``, counted and logged.
Consumers decide what a missing molecule means (training skips it with a logged count;
a submission refuses).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from ..graph.fast_features import _ranges, batched_graph_structure, index_dtype
from ..graph.flat import FlatGraphs

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from .descriptors import DescriptorNormalizer

__all__ = [
    "CACHE_FORMAT",
    "MoleculeFailure",
    "CacheReport",
    "ChunkResult",
    "featurize_chunk",
    "build_molecule_cache",
    "existing_cache_report",
    "cache_is_complete",
    "MoleculeCache",
    "CachedGraphDataset",
]

logger = logging.getLogger(__name__)

CACHE_FORMAT = "graphormer-urpe-mmap/2"
SPLIT_NAMES: tuple[str, str, str] = ("train", "valid", "test")
"""Split codes stored with the graphs: ``0`` train, ``1`` valid, ``2`` test (``-1``: none)."""
FEATURIZER_NAMES: tuple[str, ...] = ("ogb", "zinc")
META_FILE = "meta.json"
PLAN_FILE = "plan.json"
CHUNKS_DIR = "chunks"
DEFAULT_CHUNK_SIZE = 20_000
_MAX_LOGGED_FAILURES = 20
_CHUNK_ARRAYS = (
    "x",
    "edge_index",
    "edge_attr",
    "y",
    "num_nodes",
    "num_edges",
    "source_index",
)
_OPTIONAL_CHUNK_ARRAYS = ("smiles_bytes", "smiles_len", "split", "descriptors")
_CACHE_ARRAYS = (
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
class CacheReport:
    """Outcome of :func:`build_molecule_cache`.

    Attributes:
        cache_dir: the cache folder.
        molecules: source rows.
        graphs: cached graphs (``molecules - len(failures)``).
        failures: the rows that produced no graph.
        built: whether this call computed anything (``False``: the cache was complete).
        chunks: chunks in the plan; ``chunks_computed`` of them were computed by this call.
        workers: processes used.
        seconds: wall time of this call (chunks + merge); ``process_seconds`` of the chunks.
        molecules_per_second: rows processed by this call / ``process_seconds``.
        stage_seconds: time summed over chunks (all workers) in ``featurize`` (SMILES → graph),
            ``arrays`` (graphs → compact arrays), ``write``; plus ``merge`` (wall).
        cache_bytes: size of the finished cache on disk.
        load_seconds: time to open the finished cache (memory-map every array).
    """

    cache_dir: str
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
    cache_bytes: int = 0
    load_seconds: float = 0.0

    def to_dict(self, max_failures: int = 100) -> dict[str, Any]:
        """JSON-friendly dict (at most ``max_failures`` failures listed, all counted)."""
        d = asdict(self)
        d["failures"] = [asdict(f) for f in self.failures[:max_failures]]
        d["num_failures"] = len(self.failures)
        return d


# --------------------------------------------------------------------------------------
# Featurising one chunk
# --------------------------------------------------------------------------------------


def _failure_reason(smiles: str, exc: BaseException | None, featurizer: str = "ogb") -> str:
    from .featurize import InvalidMoleculeError, parse_smiles

    if isinstance(exc, InvalidMoleculeError):
        return str(exc)
    try:
        parse_smiles(smiles)
    except InvalidMoleculeError as err:
        return str(err)
    except Exception as err:  # pragma: no cover - parse_smiles raises its own error
        return f"{type(err).__name__}: {err}"
    if exc is None or str(exc) == "no atoms":
        return f"SMILES {smiles!r}: molecule has no atoms"
    return f"SMILES {smiles!r}: {type(exc).__name__}: {exc}"


GraphDict = dict[str, Any]
"""One molecule's graph as OGB's ``smiles2graph`` returns it: ``node_feat`` ``[N, F]``,
``edge_index`` ``[2, E]``, ``edge_feat`` ``[E, F_e]`` (or ``[E]``), ``num_nodes``."""

Graphs = dict[str, np.ndarray]
"""``G`` molecules' graphs concatenated: ``node_feat`` ``[sum N, F]``, ``edge_index``
``[2, sum E]`` (each graph's own node numbers), ``edge_feat`` ``[sum E, F_e]``, ``num_nodes``
``[G]`` and ``num_edges`` ``[G]``."""


def concat_graphs(graphs: Sequence[GraphDict]) -> Graphs:
    """One :data:`Graphs` of a list of :data:`GraphDict` (``[E]`` bond features become
    ``[E, 1]``)."""
    if not graphs:
        return {
            "node_feat": np.zeros((0, 9), dtype=np.int64),
            "edge_index": np.zeros((2, 0), dtype=np.int64),
            "edge_feat": np.zeros((0, 3), dtype=np.int64),
            "num_nodes": np.zeros(0, dtype=np.int64),
            "num_edges": np.zeros(0, dtype=np.int64),
        }
    return {
        "node_feat": np.concatenate([_as_2d(g["node_feat"]) for g in graphs]),
        "edge_index": np.concatenate([np.asarray(g["edge_index"]) for g in graphs], axis=1),
        "edge_feat": np.concatenate([_as_2d(g["edge_feat"]) for g in graphs]),
        "num_nodes": np.array([int(g["num_nodes"]) for g in graphs], dtype=np.int64),
        "num_edges": np.array([np.shape(g["edge_index"])[1] for g in graphs], dtype=np.int64),
    }


def _featurize_one(text: str, featurizer: str) -> GraphDict:
    """One SMILES through a per-molecule ``featurizer`` (not ``"ogb"``); raises on failure."""
    from .featurize import featurize_smiles

    data = featurize_smiles(text, featurizer)
    return {
        "node_feat": data.x.numpy(),
        "edge_index": data.edge_index.numpy(),
        "edge_feat": data.edge_attr.numpy(),
        "num_nodes": int(data.num_nodes),
    }


def featurize_smiles_list(
    smiles: Sequence[str],
    rows: Sequence[int],
    featurizer: str = "ogb",
    *,
    mols: list | None = None,
) -> tuple[list[int], Graphs, list[MoleculeFailure]]:
    """Featurise every SMILES; failures are returned (with their source row), not raised.

    ``mols``: a list that the RDKit molecules of the kept SMILES are appended to, in
    ``kept`` order (for what else is computed from them, without parsing again).

    Returns:
        ``(kept, graphs, failures)``: positions in ``smiles`` that gave a graph, and their
        graphs in that order.
    """
    from rdkit import rdBase

    if featurizer not in FEATURIZER_NAMES:
        raise ValueError(f"unknown featurizer {featurizer!r}; choose one of {FEATURIZER_NAMES}")
    texts = [smi if isinstance(smi, str) else "" for smi in smiles]
    errors: dict[int, BaseException | None] = {}
    with rdBase.BlockLogs():
        if featurizer == "ogb":
            kept, graphs = _parsed_ogb_graphs(texts, errors, mols)
        else:
            kept, one_by_one = [], []
            for offset, text in enumerate(texts):
                try:
                    one_by_one.append(_featurize_one(text, featurizer))
                    kept.append(offset)
                except Exception as err:  # RDKit returns None for bad SMILES; OGB then fails
                    errors[offset] = err
            graphs = concat_graphs(one_by_one)
            if mols is not None:
                from .featurize import parse_smiles

                mols.extend(parse_smiles(texts[k]) for k in kept)
        failures = [
            MoleculeFailure(
                int(rows[k]), str(smiles[k]), _failure_reason(texts[k], errors[k], featurizer)
            )
            for k in sorted(errors)
        ]
    return kept, graphs, failures


def _parsed_ogb_graphs(
    texts: list[str], errors: dict[int, BaseException | None], out_mols: list | None = None
) -> tuple[list[int], Graphs]:
    """OGB's graphs of the SMILES that give one (positions, graphs); why the others do not
    goes into ``errors`` (position -> exception); the kept molecules are appended to
    ``out_mols``."""
    from rdkit import Chem

    from .ogb_graph import BAD_STEREO, ogb_graphs

    kept, mols = [], []
    for offset, text in enumerate(texts):
        mol = Chem.MolFromSmiles(text.strip())
        if mol is None:
            errors[offset] = ValueError(f"RDKit cannot parse SMILES {text.strip()!r}")
        elif mol.GetNumAtoms() == 0:
            errors[offset] = ValueError("no atoms")
        else:
            kept.append(offset)
            mols.append(mol)
    graphs, bad = ogb_graphs(mols)
    if bad.any():  # rare: featurise the others again rather than cut every array
        for k in np.flatnonzero(bad):
            errors[kept[k]] = ValueError(BAD_STEREO)
        kept = [k for k, b in zip(kept, bad.tolist(), strict=True) if not b]
        mols = [m for m, b in zip(mols, bad.tolist(), strict=True) if not b]
        graphs, _ = ogb_graphs(mols)
    if out_mols is not None:
        out_mols.extend(mols)
    return kept, graphs


def _narrow(a: np.ndarray, what: str) -> np.ndarray:
    """Integer array in the narrowest dtype that holds its values."""
    if a.size == 0:
        return a.astype(np.uint8)
    lo, hi = int(a.min()), int(a.max())
    if lo >= 0:
        return a.astype(index_dtype(hi))
    for dt in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt)
    raise ValueError(f"{what} values out of the int64 range")  # pragma: no cover


def _as_2d(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.reshape(-1, 1) if a.ndim == 1 else a


def graph_arrays(
    graphs: Graphs,
    rows: Sequence[int],
    targets: np.ndarray,
    *,
    smiles: Sequence[str] | None = None,
    split: Sequence[int] | None = None,
) -> dict[str, np.ndarray]:
    """The chunk arrays of featurised graphs: features, targets, extras.

    Args:
        graphs: ``G`` graphs (:data:`Graphs`).
        rows: ``[G]`` source row of each graph.
        targets: ``[G, T]`` targets (``NaN`` = missing).
        smiles: ``[G]`` SMILES to keep with the graphs (``None``: none kept).
        split: ``[G]`` split codes (index into :data:`SPLIT_NAMES`; ``-1`` = none).

    Returns:
        ``x``, ``edge_index``, ``edge_attr`` (always ``[E, F_e]``), ``y``, ``num_nodes``,
        ``num_edges``, ``source_index`` and, when given,
        ``smiles_bytes`` / ``smiles_len`` and ``split``.
    """
    num_nodes, num_edges = graphs["num_nodes"], graphs["num_edges"]
    x, edge_index, edge_attr = graphs["node_feat"], graphs["edge_index"], graphs["edge_feat"]
    arrays = {
        "x": _narrow(x, "atom feature"),
        "edge_index": edge_index.astype(index_dtype(max(int(num_nodes.max(initial=1)) - 1, 0))),
        "edge_attr": _narrow(edge_attr, "bond feature"),
        "y": np.asarray(targets, dtype=np.float32).reshape(num_nodes.size, np.shape(targets)[-1]),
        "num_nodes": num_nodes.astype(np.int32),
        "num_edges": num_edges.astype(np.int32),
        "source_index": np.asarray(rows, dtype=np.int64).reshape(-1),
    }
    if smiles is not None:
        encoded = [str(t).encode("utf-8") for t in smiles]
        arrays["smiles_bytes"] = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        arrays["smiles_len"] = np.array([len(e) for e in encoded], dtype=np.int64)
    if split is not None:
        arrays["split"] = np.asarray(split, dtype=np.int8).reshape(-1)
    return arrays


def featurize_chunk(
    smiles: Sequence[str],
    targets: np.ndarray,
    first_index: int = 0,
    featurizer: str = "ogb",
    *,
    rows: Sequence[int] | None = None,
    split: Sequence[int] | None = None,
    keep_smiles: bool = False,
    descriptors: bool = False,
    mols: list | None = None,
) -> tuple[dict[str, np.ndarray], list[MoleculeFailure], dict[str, float]]:
    """The compact graph arrays of a list of SMILES.

    Args:
        smiles: ``[R]`` SMILES strings.
        targets: ``[R, T]`` targets (``NaN`` = missing).
        first_index: source row of ``smiles[0]`` when ``rows`` is not given (rows are then
            numbered consecutively).
        featurizer: ``"ogb"`` or ``"zinc"``.
        rows: ``[R]`` source rows (default ``first_index, first_index + 1, ...``).
        split: ``[R]`` split codes kept with the graphs.
        keep_smiles: store the SMILES of the cached graphs too.
        descriptors: add ``descriptors`` ``[G, K]`` float32, the RDKit 2D descriptors of the
            cached graphs (:func:`~.descriptors.compute_descriptors`).
        mols: a list that the ``G`` RDKit molecules of the graphs are appended to, in order.

    Returns:
        ``(arrays, failures, seconds)``: the chunk arrays (see :func:`graph_arrays`), the rows
        that failed, and the time spent per stage.
    """
    rows = np.arange(first_index, first_index + len(smiles)) if rows is None else np.asarray(rows)
    targets = np.asarray(targets, dtype=np.float64).reshape(len(smiles), -1)
    t0 = time.perf_counter()
    kept, graphs, failures = featurize_smiles_list(smiles, rows, featurizer, mols=mols)
    if split is not None and failures:
        codes, offset = np.asarray(split), {int(r): k for k, r in enumerate(rows)}
        for f in failures:
            f.split = int(codes[offset[f.index]])
    t1 = time.perf_counter()
    arrays = graph_arrays(
        graphs,
        rows[kept],
        targets[kept],
        smiles=[smiles[k] for k in kept] if keep_smiles else None,
        split=None if split is None else np.asarray(split)[kept],
    )
    t2 = time.perf_counter()
    seconds = {"featurize": t1 - t0, "arrays": t2 - t1}
    if descriptors:
        from .descriptors import compute_descriptors

        arrays["descriptors"] = compute_descriptors([smiles[k] for k in kept])
        seconds["descriptors"] = time.perf_counter() - t2
    return arrays, failures, seconds


def write_chunk(chunk_dir: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write one chunk atomically: a temporary folder, then a rename to ``chunk_dir``."""
    tmp = chunk_dir.with_name(f".{chunk_dir.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr)
        (tmp / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
        os.rename(tmp, chunk_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


@dataclass
class ChunkTask:
    """One chunk of source rows to featurise and write (sent to a worker process)."""

    chunk_dir: str
    chunk: int
    featurizer: str
    rows: np.ndarray
    targets: np.ndarray
    smiles: list[str] | None = None
    graphs: list[GraphDict] | None = None
    split: np.ndarray | None = None
    keep_smiles: bool = False
    descriptors: bool = False


def _build_chunk(task: ChunkTask) -> ChunkResult:
    """Featurise and write one chunk (runs in a worker process)."""
    if task.graphs is not None:  # a source of ready graphs (ZINC, ogbg-mol*)
        t0 = time.perf_counter()
        smiles = task.smiles if task.keep_smiles else None
        graphs = concat_graphs(task.graphs)
        arrays = graph_arrays(graphs, task.rows, task.targets, smiles=smiles, split=task.split)
        failures: list[MoleculeFailure] = []
        seconds = {"featurize": 0.0, "arrays": time.perf_counter() - t0}
    else:
        assert task.smiles is not None
        arrays, failures, seconds = featurize_chunk(
            task.smiles,
            task.targets,
            featurizer=task.featurizer,
            rows=task.rows,
            split=task.split,
            keep_smiles=task.keep_smiles,
            descriptors=task.descriptors,
        )
    t0 = time.perf_counter()
    rows = int(task.rows.size)
    graphs = int(arrays["num_nodes"].size)
    meta = {
        "chunk": task.chunk,
        "rows": rows,
        "graphs": graphs,
        "failures": [asdict(f) for f in failures],
    }
    if "descriptors" in arrays:
        meta["descriptor_nonfinite"] = np.isnan(arrays["descriptors"]).sum(axis=0).tolist()
    write_chunk(Path(task.chunk_dir), arrays, meta)
    seconds["write"] = time.perf_counter() - t0
    return ChunkResult(task.chunk, rows, graphs, failures, seconds)


# --------------------------------------------------------------------------------------
# Building a cache
# --------------------------------------------------------------------------------------


def _atomic_write_json(path: Path, obj: Any) -> None:
    from ..io import write_atomic

    write_atomic(path, json.dumps(obj))


def cache_is_complete(cache_dir: str | os.PathLike[str]) -> bool:
    """Whether ``cache_dir`` holds a finished cache of this format."""
    meta = Path(cache_dir) / META_FILE
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("format") == CACHE_FORMAT
    except (OSError, json.JSONDecodeError):
        return False


def _cache_bytes(cache_dir: Path) -> int:
    return sum(p.stat().st_size for p in cache_dir.iterdir() if p.is_file())


def _mp_context() -> multiprocessing.context.BaseContext:
    # fork (the DataLoader's default on Linux) starts workers in milliseconds; elsewhere spawn.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")  # pragma: no cover


def _read_plan(
    cache_dir: Path, rows: int, targets: int, chunk_size: int, descriptors: bool = False
) -> int:
    """The chunk size of an existing build plan, or a new plan with ``chunk_size``."""
    plan_path = cache_dir / PLAN_FILE
    if plan_path.is_file():
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
        if (
            plan.get("format") == CACHE_FORMAT
            and plan["rows"] == rows
            and plan["targets"] == targets
            and plan.get("descriptors", False) == descriptors
        ):
            if plan["chunk_size"] != chunk_size:
                logger.info(
                    "%s: resuming a build planned with chunk size %d (not %d)",
                    cache_dir,
                    plan["chunk_size"],
                    chunk_size,
                )
            return int(plan["chunk_size"])
        logger.warning("%s: discarding an unfinished build of different data", cache_dir)
        shutil.rmtree(cache_dir / CHUNKS_DIR, ignore_errors=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    plan = {
        "format": CACHE_FORMAT,
        "rows": rows,
        "targets": targets,
        "chunk_size": chunk_size,
        "descriptors": descriptors,
    }
    _atomic_write_json(plan_path, plan)
    return chunk_size


def _concat_into(path: Path, arrays: list[np.ndarray], axis: int) -> None:
    """Concatenate ``arrays`` along ``axis`` into the ``.npy`` file ``path`` (memory-mapped)."""
    dtype = np.result_type(*arrays)
    shape = list(arrays[0].shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = np.lib.format.open_memmap(path, "w+", dtype, tuple(shape))
    start = 0
    for a in arrays:
        stop = start + a.shape[axis]
        if axis == 0:
            out[start:stop] = a
        else:
            out[:, start:stop] = a
        start = stop
    out.flush()
    del out


def _pointer(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _merge_chunks(cache_dir: Path, num_chunks: int, meta: dict[str, Any]) -> None:
    """Concatenate the chunks into the final arrays (through temporary files)."""
    chunk_dirs = [cache_dir / CHUNKS_DIR / f"{c:06d}" for c in range(num_chunks)]
    present = {p.stem for p in chunk_dirs[0].glob("*.npy")}
    names = [n for n in _CHUNK_ARRAYS + _OPTIONAL_CHUNK_ARRAYS if n in present]
    parts = {n: [np.load(d / f"{n}.npy", mmap_mode="r") for d in chunk_dirs] for n in names}
    counts = {
        n: np.concatenate([np.asarray(a, dtype=np.int64) for a in parts[n]])
        for n in ("num_nodes", "num_edges") + (("smiles_len",) if "smiles_len" in parts else ())
    }
    ptrs = {
        "node_ptr": _pointer(counts["num_nodes"]),
        "edge_ptr": _pointer(counts["num_edges"]),
    }
    if "smiles_len" in counts:
        ptrs["smiles_ptr"] = _pointer(counts["smiles_len"])
    tmp = cache_dir / f".merge.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        concatenated = [n for n in names if n not in ("num_nodes", "num_edges", "smiles_len")]
        for name in concatenated:
            _concat_into(tmp / f"{name}.npy", parts[name], 1 if name == "edge_index" else 0)
        for name, ptr in ptrs.items():
            np.save(tmp / f"{name}.npy", ptr)
        for name in concatenated + list(ptrs):
            os.replace(tmp / f"{name}.npy", cache_dir / f"{name}.npy")
        meta["arrays"] = sorted(concatenated + list(ptrs))
        _atomic_write_json(cache_dir / META_FILE, meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def existing_cache_report(cache_dir: str | os.PathLike[str], workers: int = 1) -> CacheReport:
    """The :class:`CacheReport` of a finished cache (nothing built; open time measured)."""
    t0 = time.perf_counter()
    cache = MoleculeCache(cache_dir)
    cache.open()
    load = time.perf_counter() - t0
    return CacheReport(
        str(cache_dir),
        int(cache.meta["rows"]),
        len(cache),
        cache.failures,
        False,
        0,
        0,
        workers,
        0.0,
        0.0,
        None,
        {},
        cache.nbytes,
        load,
    )


def _chunk_tasks(
    chunks_root: Path,
    todo: list[int],
    chunk_size: int,
    featurizer: str,
    keep_smiles: bool,
    descriptors: bool,
    rows: np.ndarray,
    targets: np.ndarray,
    smiles: Sequence[str] | None,
    graphs: Sequence[GraphDict] | None,
    split: np.ndarray | None,
) -> list[ChunkTask]:
    """The :class:`ChunkTask` of every chunk in ``todo``."""
    tasks = []
    for c in todo:
        part = slice(c * chunk_size, (c + 1) * chunk_size)
        tasks.append(
            ChunkTask(
                str(chunks_root / f"{c:06d}"),
                c,
                featurizer,
                rows[part],
                targets[part],
                None if smiles is None else list(smiles[part]),
                None if graphs is None else list(graphs[part]),
                None if split is None else split[part],
                keep_smiles,
                descriptors,
            )
        )
    return tasks


def _run_tasks(tasks: list[ChunkTask], workers: int, bar: tqdm) -> dict[str, float]:
    """Build every chunk, in ``workers`` processes; the summed time per stage."""
    stage = {"featurize": 0.0, "arrays": 0.0, "write": 0.0}
    try:
        if workers == 1 or len(tasks) <= 1:
            for task in tasks:
                _account(_build_chunk(task), stage, bar)
        else:
            with _mp_context().Pool(min(workers, len(tasks))) as pool:
                for r in pool.imap_unordered(_build_chunk, tasks):
                    _account(r, stage, bar)
    finally:
        bar.close()
    return stage


def _reuse(
    cache_dir: Path, rows: int, workers: int, description: str, descriptors: bool = False
) -> CacheReport:
    report = existing_cache_report(cache_dir, workers)
    if descriptors and not MoleculeCache(cache_dir).has_descriptors:
        raise ValueError(
            f"{cache_dir} holds a store without descriptors; a store with them needs its own "
            "folder (put the option in the store's key) or remove this one to rebuild it"
        )
    if report.molecules != rows:
        raise ValueError(
            f"{cache_dir} caches {report.molecules} rows, but {description} has {rows}; "
            "remove the folder to rebuild it"
        )
    # leftovers of a build interrupted between meta.json and the clean-up
    shutil.rmtree(cache_dir / CHUNKS_DIR, ignore_errors=True)
    (cache_dir / PLAN_FILE).unlink(missing_ok=True)
    logger.info("%s: reusing the cache in %s (%d graphs)", description, cache_dir, report.graphs)
    return report


def build_molecule_cache(
    cache_dir: str | os.PathLike[str],
    smiles: Sequence[str] | None,
    targets: np.ndarray,
    *,
    target_names: Sequence[str] = ("y",),
    featurizer: str = "ogb",
    rows: Sequence[int] | None = None,
    graphs: Sequence[GraphDict] | None = None,
    split: Sequence[int] | None = None,
    keep_smiles: bool = False,
    descriptors: bool = False,
    skipped: Sequence[MoleculeFailure] = (),
    workers: int = 1,
    chunk_size: int | None = None,
    progress: bool | None = True,
    description: str = "molecules",
    extra_meta: dict[str, Any] | None = None,
) -> CacheReport:
    """Build (or resume, or reuse) the memory-mapped cache of ``smiles`` (or ``graphs``).

    Args:
        cache_dir: the cache folder (created).
        smiles: ``[R]`` SMILES, featurised with ``featurizer``; ``None`` with ``graphs``.
        targets: ``[R]`` or ``[R, T]`` targets, ``NaN`` = missing.
        target_names: ``[T]`` names, stored in ``meta.json``.
        featurizer: ``"ogb"`` or ``"zinc"`` for SMILES; recorded as given for ``graphs``.
        rows: ``[R]`` source row of each record (default ``0 .. R-1``).
        graphs: ``[R]`` ready graphs (:data:`GraphDict`) instead of SMILES.
        split: ``[R]`` split codes (index into :data:`SPLIT_NAMES`) stored with the graphs.
        keep_smiles: store the SMILES of the cached graphs (scaffold splits, messages).
        descriptors: also store the RDKit 2D descriptors of every graph (SMILES only).
        skipped: rows the source already rejected; recorded among the failures.
        workers: processes featurising chunks in parallel (1: in this process).
        chunk_size: rows per chunk for a new build (default :data:`DEFAULT_CHUNK_SIZE`; a
            resumed build keeps its own).
        progress: show a tqdm bar (molecules); ``None``: only when stderr is a terminal.
        description: name of the source in messages.
        extra_meta: more entries for ``meta.json`` (e.g. the source file's digest).

    Returns:
        The :class:`CacheReport` (also logged).
    """
    cache_dir = Path(cache_dir)
    if (smiles is None) == (graphs is None):
        raise ValueError("give either smiles or graphs")
    if descriptors and smiles is None:
        raise ValueError("descriptors are computed from SMILES; this source gives graphs")
    records = len(smiles if smiles is not None else graphs)  # type: ignore[arg-type]
    row_ids = np.arange(records) if rows is None else np.asarray(rows, dtype=np.int64)
    total_rows = records + len(skipped)
    targets = np.asarray(targets, dtype=np.float64).reshape(records, -1)
    if len(target_names) != targets.shape[1]:
        raise ValueError(f"{len(target_names)} target names for {targets.shape[1]} target columns")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    chunk_size = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if cache_is_complete(cache_dir):
        return _reuse(cache_dir, total_rows, workers, description, descriptors)
    wall = time.perf_counter()
    chunk_size = _read_plan(cache_dir, total_rows, targets.shape[1], chunk_size, descriptors)
    num_chunks = max(1, -(-records // chunk_size))
    chunks_root = cache_dir / CHUNKS_DIR
    chunks_root.mkdir(parents=True, exist_ok=True)
    for stale in chunks_root.glob(".*.tmp-*"):  # left by an interrupted writer
        shutil.rmtree(stale, ignore_errors=True)
    done = {int(p.name) for p in chunks_root.iterdir() if p.is_dir() and p.name.isdigit()}
    todo = [c for c in range(num_chunks) if c not in done]
    done_rows = sum(min(chunk_size, records - c * chunk_size) for c in done)
    if done:
        logger.info(
            "%s: resuming: %d of %d chunks already built (%d molecules)",
            description,
            len(done),
            num_chunks,
            done_rows,
        )
    split_codes = None if split is None else np.asarray(split, dtype=np.int8)
    tasks = _chunk_tasks(
        chunks_root,
        todo,
        chunk_size,
        featurizer,
        keep_smiles,
        descriptors,
        row_ids,
        targets,
        smiles,
        graphs,
        split_codes,
    )
    bar = tqdm(
        total=records,
        initial=done_rows,
        unit="mol",
        desc=f"preprocessing {description}",
        disable=None if progress is None else not progress,  # None: only on a terminal
        dynamic_ncols=True,
    )
    t_process = time.perf_counter()
    stage = _run_tasks(tasks, workers, bar)
    process_seconds = time.perf_counter() - t_process
    processed = sum(int(t.rows.size) for t in tasks)

    failures: list[MoleculeFailure] = list(skipped)
    num_graphs = 0
    nonfinite = None
    for c in range(num_chunks):
        chunk_meta = json.loads((chunks_root / f"{c:06d}" / META_FILE).read_text("utf-8"))
        num_graphs += chunk_meta["graphs"]
        failures.extend(MoleculeFailure(**f) for f in chunk_meta["failures"])
        if descriptors:
            counts = np.asarray(chunk_meta["descriptor_nonfinite"], dtype=np.int64)
            nonfinite = counts if nonfinite is None else nonfinite + counts
    failures.sort(key=lambda f: f.index)
    edge_dims = {np.ndim(g["edge_feat"]) for g in graphs or []}
    meta = {
        "format": CACHE_FORMAT,
        "source": description,
        "rows": total_rows,
        "graphs": num_graphs,
        "target_names": list(target_names),
        "featurizer": featurizer,
        "edge_attr_1d": featurizer == "zinc" or edge_dims == {1},
        "chunk_size": chunk_size,
        "failures": [asdict(f) for f in failures],
        **(extra_meta or {}),
    }
    if descriptors:
        meta["descriptors"] = _descriptor_meta(nonfinite)
    t_merge = time.perf_counter()
    _merge_chunks(cache_dir, num_chunks, meta)
    stage["merge"] = time.perf_counter() - t_merge
    shutil.rmtree(chunks_root, ignore_errors=True)
    (cache_dir / PLAN_FILE).unlink(missing_ok=True)

    _log_failures(description, failures, total_rows, meta.get("line_offset"))
    t0 = time.perf_counter()
    cache = MoleculeCache(cache_dir)
    cache.open()
    load = time.perf_counter() - t0
    report = CacheReport(
        str(cache_dir),
        total_rows,
        num_graphs,
        failures,
        True,
        num_chunks,
        len(tasks),
        workers,
        time.perf_counter() - wall,
        process_seconds,
        processed / process_seconds if processed and process_seconds > 0 else None,
        {k: round(v, 3) for k, v in stage.items()},
        cache.nbytes,
        load,
    )
    logger.info(
        "%s: cached %d graphs in %s (%.1f MB, %d failures); %d molecules in %.1f s "
        "(%.0f molecules/s, %d workers); opens in %.3f s",
        description,
        num_graphs,
        cache_dir,
        report.cache_bytes / 1e6,
        len(failures),
        processed,
        process_seconds,
        report.molecules_per_second or 0.0,
        workers,
        load,
    )
    return report


def _descriptor_meta(nonfinite: np.ndarray | None) -> dict[str, Any]:
    """``meta.json["descriptors"]``: set, names, and per descriptor the non-finite values."""
    from .descriptors import DESCRIPTOR_NAMES, descriptor_set_id

    counts = np.zeros(len(DESCRIPTOR_NAMES), np.int64) if nonfinite is None else nonfinite
    return {
        "set": descriptor_set_id(),
        "names": list(DESCRIPTOR_NAMES),
        "nonfinite": {n: int(c) for n, c in zip(DESCRIPTOR_NAMES, counts, strict=True) if c},
    }


def _account(result: ChunkResult, stage: dict[str, float], bar: tqdm) -> None:
    for k, v in result.seconds.items():
        stage[k] = stage.get(k, 0.0) + v
    bar.update(result.rows)


def _row_text(row: int, line_offset: int | None) -> str:
    return f"row {row}" if line_offset is None else f"row {row} (line {row + line_offset})"


def _log_failures(
    description: str, failures: list[MoleculeFailure], rows: int, line_offset: int | None
) -> None:
    for n, f in enumerate(failures):
        level = logging.WARNING if n < _MAX_LOGGED_FAILURES else logging.DEBUG
        where = _row_text(f.index, line_offset)
        logger.log(level, "%s: %s %r left out: %s", description, where, f.smiles, f.reason)
    if failures:
        logger.warning(
            "%s: %d of %d molecules could not be featurised (listed in meta.json); "
            "they are excluded from every split",
            description,
            len(failures),
            rows,
        )


# --------------------------------------------------------------------------------------
# Reading a cache
# --------------------------------------------------------------------------------------


def with_pointers(chunk: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Chunk arrays (:func:`graph_arrays`) with the ``node_ptr`` / ``edge_ptr``
    offsets that :func:`decode_graphs` reads, as a finished store has them."""
    n = np.asarray(chunk["num_nodes"], dtype=np.int64)
    out = dict(chunk)
    out["node_ptr"] = _pointer(n)
    out["edge_ptr"] = _pointer(np.asarray(chunk["num_edges"], dtype=np.int64))
    return out


def _gather(arrays: dict[str, np.ndarray], positions: np.ndarray) -> dict[str, np.ndarray]:
    """The molecules at ``positions`` of store arrays, concatenated in that order."""
    node_ptr, edge_ptr = arrays["node_ptr"], arrays["edge_ptr"]
    n0, e0 = node_ptr[positions], edge_ptr[positions]
    num_nodes = node_ptr[positions + 1] - n0
    num_edges = edge_ptr[positions + 1] - e0
    nodes, edges = _ranges(n0, num_nodes), _ranges(e0, num_edges)
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
    (:func:`~graphormer_urpe.graph.fast_features.batched_graph_structure`).

    Args:
        arrays: a finished store's arrays, or chunk arrays through :func:`with_pointers`.
        indices: ``[B]`` positions of the graphs.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.

    Returns:
        ``(flat, raw)``: the :class:`~graphormer_urpe.graph.flat.FlatGraphs` (targets in
        ``y``), and the graphs' concatenated store arrays (``num_nodes``, ``num_edges``,
        ``x``, ``edge_index`` local to each graph, ``edge_attr`` ``[sum E, F_e]``, ``y``).
    """
    if multi_hop_max_dist < 1:
        raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
    raw = _gather(arrays, np.asarray(indices, dtype=np.int64).reshape(-1))
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
    the attributes of :class:`~graphormer_urpe.graph.features.GraphormerFeatures`
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


class MoleculeCache:
    """Read access to a finished store; arrays are memory-mapped on first use.

    Safe to hand to ``DataLoader`` worker processes: the memory maps are not pickled, each
    process opens its own (the operating system shares the pages).

    Args:
        cache_dir: a folder written by :func:`build_molecule_cache`.
    """

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.cache_dir = Path(cache_dir)
        if not cache_is_complete(self.cache_dir):
            raise FileNotFoundError(
                f"{self.cache_dir} is not a finished molecule cache (no {META_FILE} of format "
                f"{CACHE_FORMAT}); build it with build_molecule_cache or graphormer-urpe "
                "preprocess"
            )
        self.meta: dict[str, Any] = json.loads(
            (self.cache_dir / META_FILE).read_text(encoding="utf-8")
        )
        self._arrays: dict[str, np.ndarray] | None = None

    def open(self) -> dict[str, np.ndarray]:
        """Memory-map every array (idempotent) and return them by name."""
        if self._arrays is None:
            arrays = {}
            for name in self.meta.get("arrays", _CACHE_ARRAYS):
                path = self.cache_dir / f"{name}.npy"
                try:
                    # a plain ndarray view of the map: slicing np.memmap costs ~1 us per call
                    arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
                except (OSError, ValueError) as exc:
                    raise ValueError(f"cache array {path} cannot be read: {exc}") from exc
            if arrays["node_ptr"].size != self.meta["graphs"] + 1:
                raise ValueError(
                    f"{self.cache_dir}: node_ptr has {arrays['node_ptr'].size} entries for "
                    f"{self.meta['graphs']} graphs; the cache is damaged, remove it to rebuild"
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
        """Source rows that are not in the cache."""
        return [MoleculeFailure(**f) for f in self.meta["failures"]]

    @property
    def source_index(self) -> np.ndarray:
        """``[M]`` source row of each cached graph."""
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
        return _row_text(row, self.meta.get("line_offset"))

    def smiles(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        """The SMILES of the graphs at ``positions`` (the store must keep them)."""
        a = self.open()
        if "smiles_ptr" not in a:
            raise ValueError(f"{self.cache_dir} keeps no SMILES (its source has none)")
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
            raise ValueError(f"{self.cache_dir} was built without descriptors")
        return self.open()["descriptors"]

    @property
    def has_smiles(self) -> bool:
        return "smiles_ptr" in self.meta.get("arrays", ())

    @property
    def nbytes(self) -> int:
        """Size of the cache on disk."""
        return _cache_bytes(self.cache_dir)

    def graphs(self, indices: Sequence[int], multi_hop_max_dist: int = 5) -> list[Data]:
        """The graphs at cache positions ``indices`` (see :func:`decode_graphs`)."""
        size = len(self)
        positions = []
        for i in indices:
            i = int(i)
            if not -size <= i < size:
                raise IndexError(f"graph {i} out of range for a cache of {size} graphs")
            positions.append(i % size)
        edge_1d = bool(self.meta.get("edge_attr_1d", False))
        return decode_graphs(self.open(), positions, multi_hop_max_dist, edge_1d)

    def graph(self, i: int, multi_hop_max_dist: int = 5) -> Data:
        """One graph (see :meth:`graphs`)."""
        return self.graphs([i], multi_hop_max_dist)[0]

    def __repr__(self) -> str:
        return f"MoleculeCache({str(self.cache_dir)!r}, graphs={len(self)})"


class CachedGraphDataset(Dataset):
    """A split of a :class:`MoleculeCache` as a map-style dataset of PyG ``Data``.

    ``DataLoader`` fetches whole batches through :meth:`__getitems__`, so the path features of
    a batch are rebuilt together.

    Args:
        cache: the cache.
        positions: ``[N]`` cache positions of this split's graphs, in order.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        name: the split's name, for messages.
        mol_features: a fitted :class:`~.descriptors.DescriptorNormalizer` of the store's
            descriptors: each ``Data`` then carries ``mol_x`` ``[1, K]`` float32, its
            normalised descriptors (the model joins them to the graph token); ``None``: none.
    """

    def __init__(
        self,
        cache: MoleculeCache,
        positions: np.ndarray,
        multi_hop_max_dist: int = 5,
        name: str = "",
        *,
        mol_features: DescriptorNormalizer | None = None,
    ) -> None:
        self.cache = cache
        self.positions = np.asarray(positions, dtype=np.int64)
        self.multi_hop_max_dist = int(multi_hop_max_dist)
        self.name = name
        if mol_features is not None and list(mol_features.names) != cache.descriptor_names:
            raise ValueError(
                f"{cache.cache_dir}: its descriptors are not those of the molecule-feature "
                "normaliser (a store built with descriptors=True of the same descriptor set)"
            )
        self.mol_features = mol_features

    def __len__(self) -> int:
        return int(self.positions.size)

    def with_positions(self, positions: np.ndarray) -> CachedGraphDataset:
        """The same kind of split over other store ``positions`` ``[n]``."""
        return CachedGraphDataset(
            self.cache,
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
        graphs = self.cache.graphs(pos, self.multi_hop_max_dist)
        if self.mol_features is not None:
            raw = self.cache.descriptors[np.asarray(pos, dtype=np.int64)]  # [n, K]
            mol_x = torch.from_numpy(self.mol_features.transform(raw))
            for g, row in zip(graphs, mol_x, strict=True):
                g.mol_x = row.view(1, -1)
        return graphs

    def target_matrix(self) -> Tensor:
        """``[N, T]`` float targets of the split, read without building any graph."""
        return torch.from_numpy(np.asarray(self.cache.targets[self.positions], dtype=np.float32))

    @property
    def source_index(self) -> np.ndarray:
        """``[N]`` source row of each graph."""
        return np.asarray(self.cache.source_index[self.positions])

    def smiles(self) -> list[str]:
        """``[N]`` SMILES of the split's graphs (stores of SMILES sources only)."""
        return self.cache.smiles(self.positions)

    def describe(self, idx: Sequence[int] | np.ndarray) -> list[str]:
        """Where the graphs at split positions ``idx`` come from: source row (and SMILES)."""
        pos = self.positions[np.asarray(idx, dtype=np.int64)]
        rows = [self.cache.describe_row(int(r)) for r in self.cache.source_index[pos]]
        if not self.cache.has_smiles:
            return rows
        return [f"{r} {s!r}" for r, s in zip(rows, self.cache.smiles(pos), strict=True)]

    def __repr__(self) -> str:
        return f"CachedGraphDataset({self.name!r}, {len(self)} graphs)"
