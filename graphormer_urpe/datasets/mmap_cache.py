r"""Memory-mapped molecule caches for millions of graphs: build in parallel chunks, read lazily.

A cache is a folder of flat numpy arrays (``.npy``, opened with ``mmap_mode="r"``) plus
``meta.json``. For ``M`` molecules with ``N_m`` atoms and ``E_m`` directed bonds:

================  ===================  ======================================================
array             shape                content
================  ===================  ======================================================
``x``             ``[sum N, F]``       atom features (OGB: ``F = 9``), narrowest integer dtype
``edge_index``    ``[2, sum E]``       directed bonds, node ids local to each molecule
``edge_attr``     ``[sum E, F_e]``     bond features (OGB: ``F_e = 3``)
``dist_code``     ``[sum N^2]``        shortest-path hops, row-major ``[N, N]`` per molecule
``path_code``     ``[sum N^2]``        Floyd–Warshall intermediate node per pair
``y``             ``[M, T]`` float32   targets, ``NaN`` = missing (e.g. the test splits)
``node_ptr``      ``[M + 1]`` int64    offsets into ``x``; likewise ``edge_ptr``, ``pair_ptr``
``source_index``  ``[M]`` int64        the source row of each cached molecule
================  ===================  ======================================================

Only the two ``[N, N]`` path matrices are stored, coded in ``uint8`` for molecules
(:func:`~graphormer_urpe.graph.fast_features.encode_paths`): 2 bytes per atom pair instead of
the 30 of an ``int16`` ``[N, N, D, F_e]`` ``edge_input`` tensor (``D = 5``, ``F_e = 3``), which
would also tie the cache to one ``multi_hop_max_dist``. ``edge_input`` is rebuilt when a
graph is read, for a whole batch at once when the ``DataLoader`` asks through ``__getitems__``
(:func:`~graphormer_urpe.graph.fast_features.batched_path_edge_features`); the graph that
comes out is identical to what :class:`~graphormer_urpe.graph.features.GraphormerFeatures`
stores.

**Building** (:func:`build_molecule_cache`) splits the source rows into fixed chunks (the chunk
size is recorded in ``plan.json`` on the first run). Each chunk is featurised (OGB's
``smiles2graph``), its shortest paths are computed for all its molecules at once
(:func:`~graphormer_urpe.graph.fast_features.batched_shortest_paths`), and it is written to
``chunks/<id>/`` atomically (a temporary folder renamed into place), by ``workers`` processes.
An interrupted build resumes with the chunks that are missing; finished chunks are never
recomputed. When all are there they are concatenated into the final arrays (again through
temporary files), ``meta.json`` is written last, and the chunks are removed.

**Failures.** A SMILES that RDKit cannot parse, or a molecule without atoms, is not cached:
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
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset
from torch_geometric.data import Data
from tqdm.auto import tqdm

from ..graph.fast_features import (
    batched_path_edge_features,
    batched_shortest_paths,
    decode_paths,
    index_dtype,
)

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

CACHE_FORMAT = "graphormer-urpe-mmap/1"
META_FILE = "meta.json"
PLAN_FILE = "plan.json"
CHUNKS_DIR = "chunks"
DEFAULT_CHUNK_SIZE = 20_000
_MAX_LOGGED_FAILURES = 20
_CHUNK_ARRAYS = (
    "x",
    "edge_index",
    "edge_attr",
    "dist_code",
    "path_code",
    "y",
    "num_nodes",
    "num_edges",
    "source_index",
)
_CACHE_ARRAYS = (
    "x",
    "edge_index",
    "edge_attr",
    "dist_code",
    "path_code",
    "y",
    "node_ptr",
    "edge_ptr",
    "pair_ptr",
    "source_index",
)


@dataclass
class MoleculeFailure:
    """A source row that produced no graph."""

    index: int
    smiles: str
    reason: str


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
            ``paths`` (shortest paths), ``write``; plus ``merge`` (wall).
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


def _failure_reason(smiles: str, exc: BaseException | None) -> str:
    from .featurize import InvalidMoleculeError, parse_smiles

    try:
        parse_smiles(smiles)
    except InvalidMoleculeError as err:
        return str(err)
    except Exception as err:  # pragma: no cover - parse_smiles raises its own error
        return f"{type(err).__name__}: {err}"
    if exc is None:
        return f"SMILES {smiles!r}: molecule has no atoms"
    return f"SMILES {smiles!r}: {type(exc).__name__}: {exc}"


def _ogb_graphs(
    smiles: Sequence[str], first_index: int
) -> tuple[list[int], list[dict[str, np.ndarray]], list[MoleculeFailure]]:
    """OGB ``smiles2graph`` on every SMILES; failures are returned, not raised."""
    from ogb.utils import smiles2graph
    from rdkit import rdBase

    kept, graphs, failures = [], [], []
    with rdBase.BlockLogs():
        for offset, smi in enumerate(smiles):
            text = smi if isinstance(smi, str) else ""
            try:
                graph = smiles2graph(text)
                exc = None if int(graph["num_nodes"]) > 0 else ValueError("no atoms")
            except Exception as err:  # RDKit returns None for bad SMILES; OGB then fails
                graph, exc = None, err
            if exc is not None or graph is None:
                failures.append(
                    MoleculeFailure(first_index + offset, str(smi), _failure_reason(text, exc))
                )
                continue
            kept.append(offset)
            graphs.append(graph)
    return kept, graphs, failures


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


def featurize_chunk(
    smiles: Sequence[str], targets: np.ndarray, first_index: int
) -> tuple[dict[str, np.ndarray], list[MoleculeFailure], dict[str, float]]:
    """Graphs and encoded shortest paths of a list of SMILES.

    Args:
        smiles: ``[R]`` SMILES strings.
        targets: ``[R, T]`` targets (``NaN`` = missing).
        first_index: source row of ``smiles[0]`` (rows are numbered consecutively).

    Returns:
        ``(arrays, failures, seconds)``: the chunk arrays (``x``, ``edge_index``, ``edge_attr``,
        ``dist_code``, ``path_code``, ``y``, ``num_nodes``, ``num_edges``, ``source_index``),
        the rows that failed, and the time spent per stage.
    """
    targets = np.asarray(targets, dtype=np.float64).reshape(len(smiles), -1)
    t0 = time.perf_counter()
    kept, graphs, failures = _ogb_graphs(smiles, first_index)
    t1 = time.perf_counter()
    num_nodes = np.array([int(g["num_nodes"]) for g in graphs], dtype=np.int64)
    num_edges = np.array([g["edge_index"].shape[1] for g in graphs], dtype=np.int64)
    if graphs:
        x = np.concatenate([g["node_feat"] for g in graphs])
        edge_index = np.concatenate([g["edge_index"] for g in graphs], axis=1)
        edge_attr = np.concatenate([g["edge_feat"] for g in graphs])
    else:
        x = np.zeros((0, 9), dtype=np.int64)
        edge_index = np.zeros((2, 0), dtype=np.int64)
        edge_attr = np.zeros((0, 3), dtype=np.int64)
    dist_code, path_code, _ = batched_shortest_paths(num_nodes, edge_index, num_edges)
    t2 = time.perf_counter()
    arrays = {
        "x": _narrow(x, "atom feature"),
        "edge_index": edge_index.astype(index_dtype(max(int(num_nodes.max(initial=1)) - 1, 0))),
        "edge_attr": _narrow(edge_attr, "bond feature"),
        "dist_code": dist_code,
        "path_code": path_code,
        "y": targets[kept].astype(np.float32),
        "num_nodes": num_nodes.astype(np.int32),
        "num_edges": num_edges.astype(np.int32),
        "source_index": (first_index + np.asarray(kept, dtype=np.int64)).astype(np.int64),
    }
    return arrays, failures, {"featurize": t1 - t0, "paths": t2 - t1}


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


def _build_chunk(task: tuple[str, int, int, list[str], np.ndarray]) -> ChunkResult:
    """Featurise and write one chunk (runs in a worker process)."""
    chunk_dir, chunk, first_index, smiles, targets = task
    arrays, failures, seconds = featurize_chunk(smiles, targets, first_index)
    t0 = time.perf_counter()
    meta = {
        "chunk": chunk,
        "first_index": first_index,
        "rows": len(smiles),
        "graphs": int(arrays["num_nodes"].size),
        "failures": [asdict(f) for f in failures],
    }
    write_chunk(Path(chunk_dir), arrays, meta)
    seconds["write"] = time.perf_counter() - t0
    return ChunkResult(chunk, len(smiles), int(arrays["num_nodes"].size), failures, seconds)


# --------------------------------------------------------------------------------------
# Building a cache
# --------------------------------------------------------------------------------------


def _atomic_write_json(path: Path, obj: Any) -> None:
    from ..training.checkpoint import write_atomic  # not at import: training imports datasets

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


def _read_plan(cache_dir: Path, rows: int, targets: int, chunk_size: int) -> int:
    """The chunk size of an existing build plan, or a new plan with ``chunk_size``."""
    plan_path = cache_dir / PLAN_FILE
    if plan_path.is_file():
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
        if (
            plan.get("format") == CACHE_FORMAT
            and plan["rows"] == rows
            and plan["targets"] == targets
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
    plan = {"format": CACHE_FORMAT, "rows": rows, "targets": targets, "chunk_size": chunk_size}
    _atomic_write_json(plan_path, plan)
    return chunk_size


def _merge_chunks(cache_dir: Path, num_chunks: int, meta: dict[str, Any]) -> None:
    """Concatenate the chunks into the final arrays (through temporary files)."""
    chunk_dirs = [cache_dir / CHUNKS_DIR / f"{c:06d}" for c in range(num_chunks)]
    parts = {
        name: [np.load(d / f"{name}.npy", mmap_mode="r") for d in chunk_dirs]
        for name in _CHUNK_ARRAYS
    }
    num_nodes = np.concatenate([np.asarray(a, dtype=np.int64) for a in parts["num_nodes"]])
    num_edges = np.concatenate([np.asarray(a, dtype=np.int64) for a in parts["num_edges"]])
    ptrs = {}
    for name, counts in (
        ("node_ptr", num_nodes),
        ("edge_ptr", num_edges),
        ("pair_ptr", num_nodes * num_nodes),
    ):
        ptr = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        ptrs[name] = ptr
    tmp = cache_dir / f".merge.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        for name in ("x", "edge_index", "edge_attr", "dist_code", "path_code", "y", "source_index"):
            arrays = parts[name]
            dtype = np.result_type(*arrays)
            axis = 1 if name == "edge_index" else 0
            shape = list(arrays[0].shape)
            shape[axis] = sum(a.shape[axis] for a in arrays)
            out = np.lib.format.open_memmap(tmp / f"{name}.npy", "w+", dtype, tuple(shape))
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
        for name, ptr in ptrs.items():
            np.save(tmp / f"{name}.npy", ptr)
        for name in _CACHE_ARRAYS:
            os.replace(tmp / f"{name}.npy", cache_dir / f"{name}.npy")
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


def build_molecule_cache(
    cache_dir: str | os.PathLike[str],
    smiles: Sequence[str],
    targets: np.ndarray,
    *,
    target_names: Sequence[str] = ("y",),
    workers: int = 1,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: bool = True,
    description: str = "molecules",
    extra_meta: dict[str, Any] | None = None,
) -> CacheReport:
    """Build (or resume, or reuse) the memory-mapped cache of ``smiles``.

    Args:
        cache_dir: the cache folder (created).
        smiles: ``[R]`` SMILES; source row ``r`` is ``smiles[r]``.
        targets: ``[R]`` or ``[R, T]`` targets, ``NaN`` = missing.
        target_names: ``[T]`` names, stored in ``meta.json``.
        workers: processes featurising chunks in parallel (1: in this process).
        chunk_size: rows per chunk for a new build (a resumed build keeps its own).
        progress: show a tqdm bar (molecules).
        description: name of the source in messages.
        extra_meta: more entries for ``meta.json`` (e.g. the source file's digest).

    Returns:
        The :class:`CacheReport` (also logged).
    """
    cache_dir = Path(cache_dir)
    rows = len(smiles)
    targets = np.asarray(targets, dtype=np.float64).reshape(rows, -1)
    if len(target_names) != targets.shape[1]:
        raise ValueError(f"{len(target_names)} target names for {targets.shape[1]} target columns")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if cache_is_complete(cache_dir):
        report = existing_cache_report(cache_dir, workers)
        if report.molecules != rows:
            raise ValueError(
                f"{cache_dir} caches {report.molecules} rows, but {description} has {rows}; "
                "remove the folder to rebuild it"
            )
        # leftovers of a build interrupted between meta.json and the clean-up
        shutil.rmtree(cache_dir / CHUNKS_DIR, ignore_errors=True)
        (cache_dir / PLAN_FILE).unlink(missing_ok=True)
        logger.info(
            "%s: reusing the cache in %s (%d graphs)", description, cache_dir, report.graphs
        )
        return report
    wall = time.perf_counter()
    chunk_size = _read_plan(cache_dir, rows, targets.shape[1], chunk_size)
    num_chunks = max(1, -(-rows // chunk_size))
    chunks_root = cache_dir / CHUNKS_DIR
    chunks_root.mkdir(parents=True, exist_ok=True)
    for stale in chunks_root.glob(".*.tmp-*"):  # left by an interrupted writer
        shutil.rmtree(stale, ignore_errors=True)
    done = {int(p.name) for p in chunks_root.iterdir() if p.is_dir() and p.name.isdigit()}
    todo = [c for c in range(num_chunks) if c not in done]
    done_rows = sum(min(chunk_size, rows - c * chunk_size) for c in done)
    if done:
        logger.info(
            "%s: resuming: %d of %d chunks already built (%d molecules)",
            description,
            len(done),
            num_chunks,
            done_rows,
        )
    tasks = [
        (
            str(chunks_root / f"{c:06d}"),
            c,
            c * chunk_size,
            list(smiles[c * chunk_size : (c + 1) * chunk_size]),
            targets[c * chunk_size : (c + 1) * chunk_size],
        )
        for c in todo
    ]
    stage = {"featurize": 0.0, "paths": 0.0, "write": 0.0}
    bar = tqdm(
        total=rows,
        initial=done_rows,
        unit="mol",
        desc=f"preprocessing {description}",
        disable=not progress,
        dynamic_ncols=True,
    )
    t_process = time.perf_counter()
    try:
        if workers == 1 or len(tasks) <= 1:
            results = (_build_chunk(t) for t in tasks)
            for r in results:
                _account(r, stage, bar)
        else:
            with _mp_context().Pool(min(workers, len(tasks))) as pool:
                for r in pool.imap_unordered(_build_chunk, tasks):
                    _account(r, stage, bar)
    finally:
        bar.close()
    process_seconds = time.perf_counter() - t_process
    processed = sum(len(t[3]) for t in tasks)

    failures: list[MoleculeFailure] = []
    graphs = 0
    for c in range(num_chunks):
        chunk_meta = json.loads((chunks_root / f"{c:06d}" / META_FILE).read_text("utf-8"))
        graphs += chunk_meta["graphs"]
        failures.extend(MoleculeFailure(**f) for f in chunk_meta["failures"])
    meta = {
        "format": CACHE_FORMAT,
        "source": description,
        "rows": rows,
        "graphs": graphs,
        "target_names": list(target_names),
        "chunk_size": chunk_size,
        "failures": [asdict(f) for f in failures],
        **(extra_meta or {}),
    }
    t_merge = time.perf_counter()
    _merge_chunks(cache_dir, num_chunks, meta)
    stage["merge"] = time.perf_counter() - t_merge
    shutil.rmtree(chunks_root, ignore_errors=True)
    (cache_dir / PLAN_FILE).unlink(missing_ok=True)

    _log_failures(description, failures, rows)
    t0 = time.perf_counter()
    cache = MoleculeCache(cache_dir)
    cache.open()
    load = time.perf_counter() - t0
    report = CacheReport(
        str(cache_dir),
        rows,
        graphs,
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
        graphs,
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


def _account(result: ChunkResult, stage: dict[str, float], bar: tqdm) -> None:
    for k, v in result.seconds.items():
        stage[k] = stage.get(k, 0.0) + v
    bar.update(result.rows)


def _log_failures(description: str, failures: list[MoleculeFailure], rows: int) -> None:
    for n, f in enumerate(failures):
        level = logging.WARNING if n < _MAX_LOGGED_FAILURES else logging.DEBUG
        logger.log(level, "%s: row %d %r not cached: %s", description, f.index, f.smiles, f.reason)
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


def _compact16(a: np.ndarray) -> Tensor:
    """int16 tensor when the values fit (as ``GraphormerFeatures`` stores them), else int64."""
    if a.size == 0 or (a.min() >= -(2**15) and a.max() < 2**15):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int16))
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # pragma: no cover


class MoleculeCache:
    """Read access to a finished cache; arrays are memory-mapped on first use.

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
            for name in _CACHE_ARRAYS:
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
    def nbytes(self) -> int:
        """Size of the cache on disk."""
        return _cache_bytes(self.cache_dir)

    def _raw(self, i: int) -> tuple[np.ndarray, ...]:
        a = self.open()
        n0, n1 = int(a["node_ptr"][i]), int(a["node_ptr"][i + 1])
        e0, e1 = int(a["edge_ptr"][i]), int(a["edge_ptr"][i + 1])
        p0, p1 = int(a["pair_ptr"][i]), int(a["pair_ptr"][i + 1])
        return (
            a["x"][n0:n1],
            a["edge_index"][:, e0:e1].astype(np.int64),
            a["edge_attr"][e0:e1],
            a["dist_code"][p0:p1],
            a["path_code"][p0:p1],
            a["y"][i],
        )

    def graphs(self, indices: Sequence[int], multi_hop_max_dist: int = 5) -> list[Data]:
        """The graphs at cache positions ``indices``, with Graphormer features.

        Each ``Data`` has ``x`` ``[N, F]`` long, ``edge_index`` ``[2, E]`` long, ``edge_attr``
        ``[E, F_e]`` long, ``y`` ``[1, T]`` float32 and exactly the attributes of
        :class:`~graphormer_urpe.graph.features.GraphormerFeatures` (``spatial_pos``
        ``[N * N]`` int16, ``edge_input`` ``[N * N * D, F_e]`` int16, ``edge_input_hops`` ``[1]``,
        ``degree`` ``[N]`` long). Graphs are rebuilt in groups of equal size.
        """
        if multi_hop_max_dist < 1:
            raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
        size = len(self)
        raws = []
        for i in indices:
            i = int(i)
            if not -size <= i < size:
                raise IndexError(f"graph {i} out of range for a cache of {size} graphs")
            raws.append(self._raw(i % size))
        out: list[Data | None] = [None] * len(raws)
        groups: dict[tuple[int, int], list[int]] = {}
        for q, r in enumerate(raws):
            groups.setdefault((r[0].shape[0], r[2].shape[1]), []).append(q)
        for (n, fe), members in groups.items():
            g = len(members)
            dist, path = decode_paths(
                np.stack([raws[q][3] for q in members]).reshape(g, n, n),
                np.stack([raws[q][4] for q in members]).reshape(g, n, n),
            )
            edge_type = np.zeros((g, n, n, fe), dtype=np.int64)
            adj = np.zeros((g, n, n), dtype=bool)
            shift = 2 + 512 * np.arange(fe)
            for slot, q in enumerate(members):
                ei, ea = raws[q][1], raws[q][2]
                edge_type[slot, ei[0], ei[1]] = ea.astype(np.int64) + shift
                adj[slot, ei[0], ei[1]] = True
            edge_input, hops = batched_path_edge_features(
                dist, path, edge_type, multi_hop_max_dist, np.int16
            )
            degree = adj.sum(axis=2)
            for slot, q in enumerate(members):
                x, ei, ea, _, _, y = raws[q]
                h = int(hops[slot])
                out[q] = Data(
                    x=torch.from_numpy(x.astype(np.int64)),
                    edge_index=torch.from_numpy(ei),
                    edge_attr=torch.from_numpy(ea.astype(np.int64)),
                    y=torch.from_numpy(np.array(y, dtype=np.float32).reshape(1, -1)),
                    spatial_pos=_compact16(dist[slot].reshape(-1)),
                    edge_input=torch.from_numpy(
                        np.ascontiguousarray(edge_input[slot, :, :, :h]).reshape(n * n * h, fe)
                    ),
                    edge_input_hops=torch.tensor([h], dtype=torch.long),
                    degree=torch.from_numpy(degree[slot].astype(np.int64)),
                )
        return out  # type: ignore[return-value]

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
    """

    def __init__(
        self,
        cache: MoleculeCache,
        positions: np.ndarray,
        multi_hop_max_dist: int = 5,
        name: str = "",
    ) -> None:
        self.cache = cache
        self.positions = np.asarray(positions, dtype=np.int64)
        self.multi_hop_max_dist = int(multi_hop_max_dist)
        self.name = name

    def __len__(self) -> int:
        return int(self.positions.size)

    def _pos(self, idx: int) -> int:
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for {self.name or 'split'} of {n} graphs")
        return int(self.positions[idx])

    def __getitem__(self, idx: int) -> Data:
        return self.cache.graph(self._pos(int(idx)), self.multi_hop_max_dist)

    def __getitems__(self, indices: Sequence[int]) -> list[Data]:
        return self.cache.graphs([self._pos(int(i)) for i in indices], self.multi_hop_max_dist)

    def target_matrix(self) -> Tensor:
        """``[N, T]`` float targets of the split, read without building any graph."""
        return torch.from_numpy(np.asarray(self.cache.targets[self.positions], dtype=np.float32))

    @property
    def source_index(self) -> np.ndarray:
        """``[N]`` source row of each graph."""
        return np.asarray(self.cache.source_index[self.positions])

    def __repr__(self) -> str:
        return f"CachedGraphDataset({self.name!r}, {len(self)} graphs)"
