r"""``sdf:PATH``: an SD file (``.sdf`` or ``.sdf.gz``) as a dataset, and as ``predict``'s input.

Each record is a row: its molecule, read by RDKit from the record's connection table and
kept as a canonical SMILES (the store featurises it as it does a CSV's), its title in a
``name`` column and each SD property in a column of its name, so that ``--target-columns``
and ``--split-column`` name SD properties. The rules are those of a CSV
(:mod:`.smiles_csv`): a missing property is a missing value, a value that is not a number is
an error naming its record and property, and a record RDKit cannot read keeps its row, with
RDKit's reason, counted like an unreadable SMILES (left out of training and listed in the
store's ``meta.json``; in ``predict``, an empty prediction with the reason in ``error``).

Records are read lazily, one text block at a time (:mod:`.sdf_blocks`), so memory stays flat
as for a CSV: a store build holds the SMILES and the property values, never the molecules.

Example::

    for smiles, title, error in iter_sdf_molecules("ligands.sdf.gz"):
        ...
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..store import MoleculeFailure
from ..store.records import MoleculeRecords
from .sdf_blocks import iter_sdf_blocks, sdf_properties, sdf_title
from .table_check import describe_sdf_record
from .table_records import table_records

__all__ = ["block_smiles", "iter_sdf_molecules", "read_sdf", "SMILES_COLUMN"]

SMILES_COLUMN = "smiles"
"""The column of the records' SMILES in the table :func:`read_sdf` builds."""


def block_smiles(block: str) -> tuple[str, str | None]:
    """``(canonical SMILES, None)`` of a record's molecule, or ``("", reason)`` when RDKit
    cannot read it (the reason: RDKit's, e.g. an atom's valence)."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")  # the reason is returned, not printed
    try:
        mol = Chem.MolFromMolBlock(block, sanitize=False, removeHs=False)
        if mol is None:
            return "", "RDKit cannot read the record's connection table"
        Chem.SanitizeMol(mol)
        mol = Chem.RemoveHs(mol)
        if mol.GetNumAtoms() == 0:
            return "", "the record holds no atoms"
        return Chem.MolToSmiles(mol), None
    except Exception as exc:  # RDKit's sanitisation errors: the reason, in one line
        text = str(exc).strip().splitlines()
        return "", f"RDKit cannot read the record: {text[0] if text else type(exc).__name__}"
    finally:
        RDLogger.EnableLog("rdApp.*")


def iter_sdf_molecules(path: str | os.PathLike[str]) -> Iterator[tuple[str, str, str | None]]:
    """``(smiles, title, error)`` for each record of an SD file, lazily (see
    :func:`block_smiles`)."""
    for block in iter_sdf_blocks(path):
        smiles, error = block_smiles(block)
        yield smiles, sdf_title(block), error


def read_sdf(
    path: str | os.PathLike[str],
    target_columns: Sequence[str] | None = None,
    split_column: str | None = None,
) -> MoleculeRecords:
    """Read an SD file into records (see the module doc).

    Args:
        path: the ``.sdf`` / ``.sdf.gz`` file.
        target_columns: SD properties holding the targets; ``None`` takes every property
            whose values are all numeric (logged).
        split_column: an SD property holding train / valid / test.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no records, a missing property, a value that is not a number or an
            unknown split label (naming the file, the record and the property).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SD file not found: {path}")
    table: list[dict[str, str]] = []
    rows: list[int] = []
    skipped: list[MoleculeFailure] = []
    for i, block in enumerate(iter_sdf_blocks(path)):
        smiles, error = block_smiles(block)
        title = sdf_title(block)
        if error is not None:
            skipped.append(MoleculeFailure(i, title, error))
            continue
        table.append({SMILES_COLUMN: smiles, "name": title, **sdf_properties(block)})
        rows.append(i)
    if not table and not skipped:
        raise ValueError(f"{path}: no records (an SD file's records end with $$$$ lines)")
    columns = list(dict.fromkeys(k for r in table for k in r)) or [SMILES_COLUMN, "name"]
    df = pd.DataFrame(table, columns=columns, dtype=str).fillna("")
    return table_records(
        df,
        path,
        SMILES_COLUMN,
        target_columns,
        split_column,
        describe_sdf_record,
        rows=np.asarray(rows, dtype=np.int64),
        skipped=skipped,
    )
