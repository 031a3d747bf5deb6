r"""From a source to its store: the records a source yields, and where its store lives.

Every dataset module (:mod:`.smiles_csv`, :mod:`.nci`, :mod:`.zinc`, :mod:`.ogbg`,
:mod:`.pcqm`) reads its files into :class:`MoleculeRecords` (SMILES or ready graphs, targets,
optional split labels, the rows it rejected itself) and hands them to :func:`open_store`,
which builds the memory-mapped store (:mod:`.store`) once and reuses it afterwards.

**Where stores live.** One cache folder for all of them: ``cache_dir`` when given (the CLI's
``--cache-dir``), else the ``GRAPHORMER_URPE_CACHE`` environment variable, else
``$XDG_CACHE_HOME/graphormer-urpe`` (``~/.cache/graphormer-urpe``). A store's folder is
``<cache>/<kind>/<label>-<key>/`` where ``key`` hashes the source's identity (the SHA-256
of its file(s)) with every option that changes the stored graphs (featuriser, columns,
limit, the format version): the same file with the same options reuses its store, anything
changed builds a new one next to it. Deleting a store's folder is always safe: the next use
builds it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from .featurize import InvalidMoleculeError
from .store import (
    CACHE_FORMAT,
    GraphDict,
    MoleculeCache,
    MoleculeFailure,
    build_molecule_cache,
    cache_is_complete,
)

__all__ = [
    "CACHE_ENV",
    "MoleculeRecords",
    "default_cache_dir",
    "store_dir",
    "file_digest",
    "open_store",
    "check_strict",
    "failure_summary",
]

logger = logging.getLogger(__name__)

CACHE_ENV = "GRAPHORMER_URPE_CACHE"
"""Environment variable naming the cache folder (overridden by an explicit ``cache_dir``)."""


@dataclass
class MoleculeRecords:
    """What a source provides before featurisation.

    Attributes:
        rows: ``[R]`` source row of each record (what messages and failures refer to).
        targets: ``[R, T]`` float64 targets, ``NaN`` = missing.
        target_names: ``[T]`` names.
        smiles: ``[R]`` SMILES (featurised by the store), or ``None`` with ``graphs``.
        graphs: ``[R]`` ready graphs (ZINC, ogbg-mol*), or ``None``.
        split: ``[R]`` int8 split codes (``0`` train, ``1`` valid, ``2`` test), or ``None``.
        skipped: rows the source already rejected (e.g. a target that cannot be computed).
    """

    rows: np.ndarray
    targets: np.ndarray
    target_names: list[str]
    smiles: list[str] | None = None
    graphs: list[GraphDict] | None = None
    split: np.ndarray | None = None
    skipped: list[MoleculeFailure] = field(default_factory=list)


def default_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$GRAPHORMER_URPE_CACHE``, else
    ``$XDG_CACHE_HOME/graphormer-urpe`` (``~/.cache/graphormer-urpe``)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "graphormer-urpe"


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def store_dir(
    kind: str, label: str, identity: dict[str, Any], cache_dir: str | os.PathLike[str] | None
) -> Path:
    """The folder of a source's store: ``<cache>/<kind>/<label>-<hash of identity>``.

    Args:
        kind: the source kind (``csv``, ``nci5k``, ``zinc``, ``ogbg``, ``pcqm``).
        label: a readable name (e.g. the file's stem), sanitised.
        identity: everything the stored graphs depend on (file digests, options).
        cache_dir: the cache folder (see :func:`default_cache_dir`).
    """
    payload = json.dumps({"format": CACHE_FORMAT, **identity}, sort_keys=True, default=str)
    key = hashlib.sha256(payload.encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:60] or "data"
    return default_cache_dir(cache_dir) / kind / f"{safe}-{key}"


def open_store(
    folder: Path,
    read: Callable[[], MoleculeRecords],
    *,
    featurizer: str,
    description: str,
    workers: int = 1,
    progress: bool | None = None,
    extra_meta: dict[str, Any] | None = None,
    descriptors: bool = False,
) -> MoleculeCache:
    """The finished store in ``folder``; built from ``read()`` first when it is missing or
    unfinished (an interrupted build resumes with its finished chunks).

    Args:
        folder: from :func:`store_dir`.
        read: reads the source (called only when the store must be built).
        featurizer: ``"ogb"`` or ``"zinc"`` (for SMILES records; recorded for graphs).
        description: the source in messages (e.g. the file path).
        workers: processes featurising chunks in parallel.
        progress: show a progress bar while building (``None``: when stderr is a terminal).
        extra_meta: more entries for the store's ``meta.json``.
        descriptors: store the RDKit 2D descriptors too (:mod:`.descriptors`); put
            :func:`~.descriptors.descriptor_set_id` in the identity given to
            :func:`store_dir`, so that a store without them is not taken for one with them.
    """
    if not cache_is_complete(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(folder.with_name(folder.name + ".lock")):  # one builder at a time
            if not cache_is_complete(folder):  # else another process built it meanwhile
                records = read()
                logger.info(
                    "%s: building its store in %s (%d workers)", description, folder, workers
                )
                build_molecule_cache(
                    folder,
                    records.smiles,
                    records.targets,
                    target_names=records.target_names,
                    featurizer=featurizer,
                    rows=records.rows,
                    graphs=records.graphs,
                    split=records.split,
                    keep_smiles=records.smiles is not None,
                    skipped=records.skipped,
                    workers=workers,
                    progress=progress,
                    description=description,
                    extra_meta=extra_meta,
                    descriptors=descriptors,
                )
                del records
    cache = MoleculeCache(folder)
    if descriptors and not cache.has_descriptors:
        raise ValueError(
            f"{folder} holds a store without descriptors; its key must name the descriptor "
            "option (remove the folder to rebuild it)"
        )
    if len(cache) == 0:
        raise ValueError(
            f"{description}: no valid molecule among {cache.meta['rows']} rows; "
            + failure_summary(cache.failures, description)
        )
    return cache


def failure_summary(
    failures: Sequence[MoleculeFailure],
    description: str,
    describe_row: Callable[[int], str] = lambda r: f"row {r}",
) -> str:
    """``"<source>: N invalid molecule(s): row r 'SMILES': reason; ..."`` (the first five)."""
    shown = "; ".join(f"{describe_row(f.index)} {f.smiles!r}: {f.reason}" for f in failures[:5])
    more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
    return f"{description}: {len(failures)} invalid molecule(s): {shown}{more}"


def check_strict(
    cache: MoleculeCache,
    description: str,
    describe_row: Callable[[int], str] = lambda r: f"row {r}",
) -> None:
    """Raise :class:`InvalidMoleculeError` when the store left any source row out.

    Raises:
        InvalidMoleculeError: naming the source, the rows and the SMILES.
    """
    failures = cache.failures
    if failures:
        raise InvalidMoleculeError(
            failure_summary(failures, description, describe_row), failures[0].smiles
        )
