r"""``csv:PATH``: a SMILES table (``.csv`` or ``.csv.gz``) with numeric target columns.

:func:`read_smiles_csv` reads the file into
:class:`~graphormer_urpe.datasets.store.records.MoleculeRecords`; the store featurises them. The
rules:

* **Invalid SMILES** (unparsable, empty, no atoms, or atoms the featuriser cannot encode) are
  recorded by the store with their row and reason, logged and left out; ``strict=True`` turns
  them into an :class:`~..featurizers.smiles.InvalidMoleculeError` naming the
  file, the rows and the SMILES. A file in which no molecule is valid is an error.
* **Missing target values** (empty cells, ``NA``, ``nan``, ...) become ``NaN`` and the molecule
  is kept: training and evaluation mask ``NaN`` targets out. A non-numeric or infinite target
  value is an error naming its row and column.
* **Extra columns** are ignored. A missing column is an error naming the file, the missing
  column(s) and the available ones; a file with a header and no rows is an error.
* A **split column** holds ``train`` / ``valid`` (``val``, ``validation``) / ``test``.

Rows are numbered from 0 over the data rows (the header excluded); messages also give the file
line (``row + 2``).
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pandas as pd

from ..store import MoleculeStore
from ..store.location import file_digest, store_folder
from ..store.records import MoleculeRecords, check_strict, open_store
from .sdf_blocks import is_sdf
from .table_check import NA_STRINGS, describe_csv_row, describe_sdf_record
from .table_records import table_records

__all__ = [
    "read_smiles_csv",
    "open_csv",
    "csv_store_folder",
    "describe_csv_row",
    "NA_STRINGS",
]

logger = logging.getLogger(__name__)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv", ".sdf"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def csv_store_folder(
    path: str | os.PathLike[str],
    options: dict,
    store_dir: str | os.PathLike[str] | None,
) -> Path:
    """The store folder of a CSV file read with ``options`` (columns, featuriser): under
    ``csv/``, or ``sdf/`` for an SD file (where a store of the same file built under ``csv/``
    by an earlier version exists and none under ``sdf/``, that one is read)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SMILES CSV file not found: {path}")
    identity = {"sha256": file_digest(path), **options}
    if not is_sdf(path):
        return store_folder("csv", _stem(path), identity, store_dir)
    folder = store_folder("sdf", _stem(path), identity, store_dir)
    older = store_folder("csv", _stem(path), identity, store_dir)
    return older if not folder.exists() and older.exists() else folder


def _read_table(path: Path) -> pd.DataFrame:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            return pd.read_csv(
                f, dtype=str, keep_default_na=False, na_values=[], skipinitialspace=True
            )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{path}: cannot read as CSV: {e}") from None


def read_smiles_csv(
    path: str | os.PathLike[str],
    smiles_column: str = "smiles",
    target_columns: Sequence[str] | None = None,
    split_column: str | None = None,
) -> MoleculeRecords:
    """Read a SMILES CSV into records.

    Args:
        path: the ``.csv`` / ``.csv.gz`` file (compression inferred from the name).
        smiles_column: the SMILES column.
        target_columns: the target columns; ``None`` takes every other column whose non-missing
            values are all numeric (the split column excluded) and logs the choice.
        split_column: a column of split labels, stored as split codes.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable file, missing columns, no rows, a bad target value or split
            label (naming the file, row and column).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SMILES CSV file not found: {path}")
    return table_records(
        _read_table(path), path, smiles_column, target_columns, split_column, describe_csv_row
    )


def open_csv(
    path: str | os.PathLike[str],
    smiles_column: str = "smiles",
    featurizer: str = "ogb",
    target_columns: Sequence[str] | None = None,
    split_column: str | None = None,
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    strict: bool = False,
    descriptors: bool = False,
) -> MoleculeStore:
    """The store of a SMILES CSV, built on first use (see :func:`read_smiles_csv`), or of an
    SD file (``.sdf``, ``.sdf.gz``; :mod:`.sdf`: its SD properties are the columns).

    Args:
        path: the ``.csv`` / ``.csv.gz`` (or ``.sdf`` / ``.sdf.gz``) file.
        smiles_column: the SMILES column.
        featurizer: ``"ogb"`` or ``"zinc"``.
        target_columns: the target columns (``None``: every numeric column).
        split_column: a column of split labels, stored as split codes.
        store_dir: the store folder.
        workers: processes building the store.
        strict: raise :class:`~..featurizers.smiles.InvalidMoleculeError` when any row
            is invalid.
        descriptors: a store that also holds each molecule's RDKit 2D descriptors (its own
            folder; a store without them is never reused for this).
    """
    targets = None if target_columns is None else [str(c) for c in target_columns]
    identity = {
        "smiles_column": smiles_column,
        "featurizer": featurizer,
        "target_columns": targets,
        "split_column": split_column,
    }
    if descriptors:  # only then, so that the folders of existing stores keep their names
        identity["descriptors"] = True
    read = partial(read_smiles_csv, path, smiles_column, targets, split_column)
    describe, offset = describe_csv_row, 2  # a row's line in the file: row + 2
    if is_sdf(path):  # an SD file: records, their SD properties as columns
        from .sdf import read_sdf

        read, describe, offset = partial(read_sdf, path, targets, split_column), None, None
        identity["smiles_column"] = "sdf"
    store = open_store(
        csv_store_folder(path, identity, store_dir),
        read,
        featurizer=featurizer,
        description=str(path),
        workers=workers,
        extra_meta={"line_offset": offset, "split_column": split_column},
        descriptors=descriptors,
    )
    if strict:
        check_strict(store, str(path), describe or describe_sdf_record)
    elif store.failures:
        logger.info(
            "%s: %d row(s) were left out (listed in %s)",
            path,
            len(store.failures),
            store.folder / "meta.json",
        )
    return store
