r"""``nci5k``: an embedded molecule set that needs no download.

RDKit ships the first 5,000 molecules of the NCI open database
(``<RDDataDir>/NCI/first_5k.tpsa.csv``: a comment line, then ``SMILES,TPSA`` lines). This
dataset labels each molecule with the ZINC benchmark's target,
:func:`~.penalized_logp.penalized_logp`, and featurises it with OGB's
features (NCI has elements and charges outside ZINC's 28 atom types). It is a small, real,
always-available regression task for smoke tests, tutorials and CI.

Molecules whose SMILES do not parse, or whose target cannot be computed, are reported (row and
SMILES) and left out, with the count logged. The store (:mod:`..store.location`) is keyed by
the source file's bytes, the RDKit version (the target depends on it), the featuriser and ``limit``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
from rdkit import RDConfig, rdBase
from tqdm.auto import tqdm

from ..featurizers.smiles import InvalidMoleculeError, parse_smiles
from ..store import MoleculeFailure, MoleculeStore
from ..store.location import file_digest, store_folder
from ..store.records import MoleculeRecords, open_store
from .penalized_logp import penalized_logp

__all__ = [
    "NCI5K_PATH",
    "NCI5K_TARGET",
    "read_nci_smiles",
    "read_nci",
    "nci_store_folder",
    "open_nci",
]

logger = logging.getLogger(__name__)

NCI5K_PATH = os.path.join(RDConfig.RDDataDir, "NCI", "first_5k.tpsa.csv")
"""The NCI file shipped with RDKit."""


def read_nci_smiles(path: str = NCI5K_PATH, limit: int | None = None) -> list[str]:
    """The SMILES of RDKit's NCI file, in file order.

    Args:
        path: the ``SMILES,TPSA`` file (``#`` lines and blank lines are skipped).
        limit: keep only the first ``limit`` molecules.

    Raises:
        FileNotFoundError: when the file is missing (an RDKit build without its Data folder).
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"RDKit's NCI molecule file is missing: {path} (the rdkit package ships it in "
            "rdkit/Data/NCI; reinstall rdkit or pass another source)"
        )
    out: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            out.append(text.rsplit(",", 1)[0].strip() if "," in text else text)
            if limit is not None and len(out) >= limit:
                break
    return out


NCI5K_TARGET = "penalized_logp"


def nci_store_folder(
    source: str = NCI5K_PATH,
    featurizer: str = "ogb",
    limit: int | None = None,
    store_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The store folder of the NCI molecules read with these options."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    if not os.path.exists(source):
        read_nci_smiles(source)  # raises the explanatory FileNotFoundError
    identity = {
        "sha256": file_digest(source),
        "rdkit": rdBase.rdkitVersion,  # the target depends on it
        "featurizer": featurizer,
        "limit": limit,
    }
    size = "all" if limit is None else f"first{limit}"
    return store_folder("nci5k", f"{featurizer}-{size}", identity, store_dir)


def _target(smiles: str) -> tuple[float | None, str]:
    """Penalized logP of one molecule, or ``None`` and the reason it cannot be computed."""
    try:
        y = penalized_logp(parse_smiles(smiles))
    except InvalidMoleculeError as exc:
        return None, str(exc)
    except Exception as exc:  # RDKit descriptor failures on exotic molecules
        return None, f"penalized logP failed: {type(exc).__name__}: {exc}"
    if not np.isfinite(y):
        return None, f"penalized logP is not finite ({y})"
    return y, ""


def read_nci(source: str = NCI5K_PATH, limit: int | None = None) -> MoleculeRecords:
    """The NCI molecules with their penalized logP; rows whose target cannot be computed are
    returned as ``skipped`` with the reason."""
    all_smiles = read_nci_smiles(source, limit)
    rows: list[int] = []
    smiles: list[str] = []
    targets: list[float] = []
    skipped: list[MoleculeFailure] = []
    for row, s in enumerate(tqdm(all_smiles, desc="nci5k targets", disable=None, leave=False)):
        y, reason = _target(s)
        if y is None:
            skipped.append(MoleculeFailure(row, s, reason))
            continue
        rows.append(row)
        smiles.append(s)
        targets.append(y)
    return MoleculeRecords(
        rows=np.asarray(rows, dtype=np.int64),
        targets=np.asarray(targets, dtype=np.float64).reshape(-1, 1),
        target_names=[NCI5K_TARGET],
        smiles=smiles,
        skipped=skipped,
    )


def open_nci(
    source: str = NCI5K_PATH,
    featurizer: str = "ogb",
    limit: int | None = None,
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    progress: bool | None = None,
) -> MoleculeStore:
    """The store of the NCI molecules (built on first use)."""
    folder = nci_store_folder(source, featurizer, limit, store_dir)
    description = "nci5k" if source == NCI5K_PATH else f"nci5k ({source})"
    return open_store(
        folder,
        lambda: read_nci(source, limit),
        featurizer=featurizer,
        description=description,
        workers=workers,
        progress=progress,
    )
