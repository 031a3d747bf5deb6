"""Featurising one chunk of source rows into the store's flat arrays, and writing it
(:mod:`~graphormer_urpe.datasets.store` describes the whole; :mod:`.build` runs the chunks)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...graph.batched_structure import index_dtype
from .format import FEATURIZER_NAMES, META_FILE, ChunkResult, MoleculeFailure

__all__ = ["GraphDict", "featurize_chunk", "featurize_smiles_list", "graph_arrays", "write_chunk"]


# --------------------------------------------------------------------------------------
# Featurising one chunk
# --------------------------------------------------------------------------------------


def _failure_reason(smiles: str, exc: BaseException | None, featurizer: str = "ogb") -> str:
    from ..featurizers.smiles import InvalidMoleculeError, parse_smiles

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
    from ..featurizers.molecule_graphs import featurize_smiles

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
                from ..featurizers.smiles import parse_smiles

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

    from ..featurizers.ogb_features import BAD_STEREO, ogb_graphs

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
        keep_smiles: store the SMILES of the stored graphs too.
        descriptors: add ``descriptors`` ``[G, K]`` float32, the RDKit 2D descriptors of the
            stored graphs (:func:`~..featurizers.descriptors.compute_descriptors`).
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
        from ..featurizers.descriptors import compute_descriptors

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


def build_chunk(task: ChunkTask) -> ChunkResult:
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
