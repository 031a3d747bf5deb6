"""Building a store: chunks planned, featurised in parallel, resumed after an interruption,
merged (:mod:`~graphormer_urpe.datasets.store` describes the whole)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .chunks import ChunkTask, GraphDict, build_chunk
from .format import (
    CHUNK_ARRAYS,
    CHUNKS_DIR,
    DEFAULT_CHUNK_SIZE,
    MAX_LOGGED_FAILURES,
    META_FILE,
    OPTIONAL_CHUNK_ARRAYS,
    PLAN_FILE,
    STORE_FORMAT,
    ChunkResult,
    MoleculeFailure,
    StoreReport,
    counts_to_pointer,
    row_text,
    store_is_complete,
)
from .read import MoleculeStore

__all__ = ["build_molecule_store", "existing_store_report"]

logger = logging.getLogger("graphormer_urpe.datasets.store")  # the store's log, as before

# --------------------------------------------------------------------------------------
# Building a store
# --------------------------------------------------------------------------------------


def _atomic_write_json(path: Path, obj: Any) -> None:
    from ...io import write_atomic

    write_atomic(path, json.dumps(obj))


def _mp_context() -> multiprocessing.context.BaseContext:
    # fork (the DataLoader's default on Linux) starts workers in milliseconds; elsewhere spawn.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")  # pragma: no cover


def _read_plan(
    folder: Path, rows: int, targets: int, chunk_size: int, descriptors: bool = False
) -> int:
    """The chunk size of an existing build plan, or a new plan with ``chunk_size``."""
    plan_path = folder / PLAN_FILE
    if plan_path.is_file():
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
        if (
            plan.get("format") == STORE_FORMAT
            and plan["rows"] == rows
            and plan["targets"] == targets
            and plan.get("descriptors", False) == descriptors
        ):
            if plan["chunk_size"] != chunk_size:
                logger.info(
                    "%s: resuming a build planned with chunk size %d (not %d)",
                    folder,
                    plan["chunk_size"],
                    chunk_size,
                )
            return int(plan["chunk_size"])
        logger.warning("%s: discarding an unfinished build of different data", folder)
        shutil.rmtree(folder / CHUNKS_DIR, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    plan = {
        "format": STORE_FORMAT,
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


def _merge_chunks(folder: Path, num_chunks: int, meta: dict[str, Any]) -> None:
    """Concatenate the chunks into the final arrays (through temporary files)."""
    chunk_dirs = [folder / CHUNKS_DIR / f"{c:06d}" for c in range(num_chunks)]
    present = {p.stem for p in chunk_dirs[0].glob("*.npy")}
    names = [n for n in CHUNK_ARRAYS + OPTIONAL_CHUNK_ARRAYS if n in present]
    parts = {n: [np.load(d / f"{n}.npy", mmap_mode="r") for d in chunk_dirs] for n in names}
    counts = {
        n: np.concatenate([np.asarray(a, dtype=np.int64) for a in parts[n]])
        for n in ("num_nodes", "num_edges") + (("smiles_len",) if "smiles_len" in parts else ())
    }
    ptrs = {
        "node_ptr": counts_to_pointer(counts["num_nodes"]),
        "edge_ptr": counts_to_pointer(counts["num_edges"]),
    }
    if "smiles_len" in counts:
        ptrs["smiles_ptr"] = counts_to_pointer(counts["smiles_len"])
    tmp = folder / f".merge.tmp-{os.getpid()}"
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
            os.replace(tmp / f"{name}.npy", folder / f"{name}.npy")
        meta["arrays"] = sorted(concatenated + list(ptrs))
        _atomic_write_json(folder / META_FILE, meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def existing_store_report(folder: str | os.PathLike[str], workers: int = 1) -> StoreReport:
    """The :class:`StoreReport` of a finished store (nothing built; open time measured)."""
    t0 = time.perf_counter()
    store = MoleculeStore(folder)
    store.open()
    load = time.perf_counter() - t0
    return StoreReport(
        str(folder),
        int(store.meta["rows"]),
        len(store),
        store.failures,
        False,
        0,
        0,
        workers,
        0.0,
        0.0,
        None,
        {},
        store.nbytes,
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
                _account(build_chunk(task), stage, bar)
        else:
            with _mp_context().Pool(min(workers, len(tasks))) as pool:
                for r in pool.imap_unordered(build_chunk, tasks):
                    _account(r, stage, bar)
    finally:
        bar.close()
    return stage


def _reuse(
    folder: Path, rows: int, workers: int, description: str, descriptors: bool = False
) -> StoreReport:
    report = existing_store_report(folder, workers)
    if descriptors and not MoleculeStore(folder).has_descriptors:
        raise ValueError(
            f"{folder} holds a store without descriptors; a store with them needs its own "
            "folder (put the option in the store's key) or remove this one to rebuild it"
        )
    if report.molecules != rows:
        raise ValueError(
            f"{folder} stores {report.molecules} rows, but {description} has {rows}; "
            "remove the folder to rebuild it"
        )
    # leftovers of a build interrupted between meta.json and the clean-up
    shutil.rmtree(folder / CHUNKS_DIR, ignore_errors=True)
    (folder / PLAN_FILE).unlink(missing_ok=True)
    logger.info("%s: reusing the store in %s (%d graphs)", description, folder, report.graphs)
    return report


def build_molecule_store(
    folder: str | os.PathLike[str],
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
) -> StoreReport:
    """Build (or resume, or reuse) the memory-mapped store of ``smiles`` (or ``graphs``).

    Args:
        folder: the store folder (created).
        smiles: ``[R]`` SMILES, featurised with ``featurizer``; ``None`` with ``graphs``.
        targets: ``[R]`` or ``[R, T]`` targets, ``NaN`` = missing.
        target_names: ``[T]`` names, stored in ``meta.json``.
        featurizer: ``"ogb"`` or ``"zinc"`` for SMILES; recorded as given for ``graphs``.
        rows: ``[R]`` source row of each record (default ``0 .. R-1``).
        graphs: ``[R]`` ready graphs (:data:`GraphDict`) instead of SMILES.
        split: ``[R]`` split codes (index into :data:`SPLIT_NAMES`) stored with the graphs.
        keep_smiles: store the SMILES of the stored graphs (scaffold splits, messages).
        descriptors: also store the RDKit 2D descriptors of every graph (SMILES only).
        skipped: rows the source already rejected; recorded among the failures.
        workers: processes featurising chunks in parallel (1: in this process).
        chunk_size: rows per chunk for a new build (default :data:`DEFAULT_CHUNK_SIZE`; a
            resumed build keeps its own).
        progress: show a tqdm bar (molecules); ``None``: only when stderr is a terminal.
        description: name of the source in messages.
        extra_meta: more entries for ``meta.json`` (e.g. the source file's digest).

    Returns:
        The :class:`StoreReport` (also logged).
    """
    folder = Path(folder)
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
    if store_is_complete(folder):
        return _reuse(folder, total_rows, workers, description, descriptors)
    wall = time.perf_counter()
    chunk_size = _read_plan(folder, total_rows, targets.shape[1], chunk_size, descriptors)
    num_chunks = max(1, -(-records // chunk_size))
    chunks_root = folder / CHUNKS_DIR
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
        "format": STORE_FORMAT,
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
    _merge_chunks(folder, num_chunks, meta)
    stage["merge"] = time.perf_counter() - t_merge
    shutil.rmtree(chunks_root, ignore_errors=True)
    (folder / PLAN_FILE).unlink(missing_ok=True)

    _log_failures(description, failures, total_rows, meta.get("line_offset"))
    t0 = time.perf_counter()
    store = MoleculeStore(folder)
    store.open()
    load = time.perf_counter() - t0
    report = StoreReport(
        str(folder),
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
        store.nbytes,
        load,
    )
    logger.info(
        "%s: stored %d graphs in %s (%.1f MB, %d failures); %d molecules in %.1f s "
        "(%.0f molecules/s, %d workers); opens in %.3f s",
        description,
        num_graphs,
        folder,
        report.store_bytes / 1e6,
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
    from ..featurizers.descriptors import DESCRIPTOR_NAMES, descriptor_set_id

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


def _log_failures(
    description: str, failures: list[MoleculeFailure], rows: int, line_offset: int | None
) -> None:
    for n, f in enumerate(failures):
        level = logging.WARNING if n < MAX_LOGGED_FAILURES else logging.DEBUG
        where = row_text(f.index, line_offset)
        logger.log(level, "%s: %s %r left out: %s", description, where, f.smiles, f.reason)
    if failures:
        logger.warning(
            "%s: %d of %d molecules could not be featurised (listed in meta.json); "
            "they are excluded from every split",
            description,
            len(failures),
            rows,
        )
