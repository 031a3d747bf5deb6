r"""From a source to its store: the records a source yields, and the store built from them.

Every source module (:mod:`..sources.smiles_csv`, :mod:`..sources.nci`, :mod:`..sources.zinc`,
:mod:`..sources.ogbg_mol`, :mod:`..sources.pcqm`) reads its files into :class:`MoleculeRecords`
(SMILES or ready graphs, targets, optional split labels, the rows it rejected itself) and hands
them to :func:`open_store`, which builds the memory-mapped store (:mod:`.`) once in the folder
:func:`~.location.store_folder` names and reuses it afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from ..featurizers.smiles import InvalidMoleculeError
from .build import build_molecule_store
from .chunks import GraphDict
from .format import MoleculeFailure, store_is_complete
from .read import MoleculeStore

__all__ = [
    "MoleculeRecords",
    "open_store",
    "check_strict",
    "failure_summary",
]

logger = logging.getLogger(__name__)


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
) -> MoleculeStore:
    """The finished store in ``folder``; built from ``read()`` first when it is missing or
    unfinished (an interrupted build resumes with its finished chunks).

    Args:
        folder: from :func:`store_folder`.
        read: reads the source (called only when the store must be built).
        featurizer: ``"ogb"`` or ``"zinc"`` (for SMILES records; recorded for graphs).
        description: the source in messages (e.g. the file path).
        workers: processes featurising chunks in parallel.
        progress: show a progress bar while building (``None``: when stderr is a terminal).
        extra_meta: more entries for the store's ``meta.json``.
        descriptors: store the RDKit 2D descriptors too (:mod:`..featurizers.descriptors`); put
            :func:`~..featurizers.descriptors.descriptor_set_id` in the identity given to
            :func:`store_folder`, so that a store without them is not taken for one with them.
    """
    if not store_is_complete(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(folder.with_name(folder.name + ".lock")):  # one builder at a time
            if not store_is_complete(folder):  # else another process built it meanwhile
                records = read()
                logger.info(
                    "%s: building its store in %s (%d workers)", description, folder, workers
                )
                build_molecule_store(
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
    store = MoleculeStore(folder)
    if descriptors and not store.has_descriptors:
        raise ValueError(
            f"{folder} holds a store without descriptors; its key must name the descriptor "
            "option (remove the folder to rebuild it)"
        )
    if len(store) == 0:
        raise ValueError(
            f"{description}: no valid molecule among {store.meta['rows']} rows; "
            + failure_summary(store.failures, description)
        )
    return store


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
    store: MoleculeStore,
    description: str,
    describe_row: Callable[[int], str] = lambda r: f"row {r}",
) -> None:
    """Raise :class:`InvalidMoleculeError` when the store left any source row out.

    Raises:
        InvalidMoleculeError: naming the source, the rows and the SMILES.
    """
    failures = store.failures
    if failures:
        raise InvalidMoleculeError(
            failure_summary(failures, description, describe_row), failures[0].smiles
        )
