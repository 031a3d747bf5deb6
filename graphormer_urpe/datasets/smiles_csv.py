r"""``csv:PATH``: a SMILES table (``.csv`` or ``.csv.gz``) with numeric target columns.

:func:`read_smiles_csv` reads the file into
:class:`~graphormer_urpe.datasets.source.MoleculeRecords`; the store featurises them. The
rules:

* **Invalid SMILES** (unparsable, empty, no atoms, or atoms the featuriser cannot encode) are
  recorded by the store with their row and reason, logged and left out; ``strict=True`` turns
  them into an :class:`~graphormer_urpe.datasets.featurize.InvalidMoleculeError` naming the
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
from pathlib import Path

import numpy as np
import pandas as pd

from .source import MoleculeRecords, check_strict, file_digest, open_store, store_dir
from .splitting import normalize_split_name, split_code
from .store import MoleculeCache

__all__ = ["read_smiles_csv", "open_csv", "csv_store_dir", "describe_csv_row", "NA_STRINGS"]

logger = logging.getLogger(__name__)

NA_STRINGS = frozenset(
    {
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    }
)
"""The strings read as a missing value (pandas' defaults)."""


def describe_csv_row(row: int) -> str:
    """``"row r (line r + 2)"``: a data row and its line in the file (after the header)."""
    return f"row {row} (line {row + 2})"


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def csv_store_dir(
    path: str | os.PathLike[str],
    options: dict,
    cache_dir: str | os.PathLike[str] | None,
) -> Path:
    """The store folder of a CSV file read with ``options`` (columns, featuriser)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SMILES CSV file not found: {path}")
    return store_dir("csv", _stem(path), {"sha256": file_digest(path), **options}, cache_dir)


def _read_table(path: Path) -> pd.DataFrame:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            return pd.read_csv(
                f, dtype=str, keep_default_na=False, na_values=[], skipinitialspace=True
            )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{path}: cannot read as CSV: {e}") from None


def _numeric_column(df: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Values as float64 (missing → NaN) and the rows whose value is not a finite number."""
    text = df[column].str.strip()
    missing = text.isin(NA_STRINGS).to_numpy()
    values = pd.to_numeric(text.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
    return values, np.flatnonzero(~np.isfinite(values) & ~missing)


def _infer_targets(df: pd.DataFrame, path: Path, smiles_column: str, exclude: set) -> list[str]:
    columns = [str(c) for c in df.columns]
    targets = []
    for c in columns:
        if c == smiles_column or c in exclude:
            continue
        values, bad = _numeric_column(df, c)
        if not bad.size and not np.isnan(values).all():
            targets.append(c)
    if not targets:
        raise ValueError(
            f"{path}: no numeric target column found besides {smiles_column!r}; "
            f"available columns: {columns} (pass target_columns)"
        )
    logger.info("%s: using target column(s) %s", path, targets)
    return targets


def _target_matrix(df: pd.DataFrame, path: Path, targets: list[str]) -> np.ndarray:
    matrix = np.empty((len(df), len(targets)), dtype=np.float64)
    for j, c in enumerate(targets):
        values, bad = _numeric_column(df, c)
        if bad.size:
            row = int(bad[0])
            raise ValueError(
                f"{path}: {describe_csv_row(row)}: target column {c!r} holds "
                f"{df[c].iloc[row]!r}, which is not a finite number ({bad.size} such "
                "value(s) in this column; leave a cell empty for a missing value)"
            )
        matrix[:, j] = values
    n_missing = int(np.isnan(matrix).sum())
    if n_missing:
        logger.info(
            "%s: %d missing target value(s) kept as NaN (masked in training and evaluation)",
            path,
            n_missing,
        )
    return matrix


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
    if target_columns is not None and not list(target_columns):
        raise ValueError("target_columns is empty; name at least one target column")
    df = _read_table(path)
    columns = [str(c) for c in df.columns]
    wanted = [smiles_column, *(target_columns or []), *([split_column] if split_column else [])]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise ValueError(f"{path}: column(s) {missing} not found; available columns: {columns}")
    if len(df) == 0:
        raise ValueError(f"{path}: no data rows (only the header {columns})")
    targets = (
        [str(c) for c in target_columns]
        if target_columns is not None
        else _infer_targets(df, path, smiles_column, {split_column})
    )
    split = None
    if split_column is not None:
        split = np.array(
            [
                split_code(normalize_split_name(v, f"{path}: {describe_csv_row(i)}"))
                for i, v in enumerate(df[split_column].tolist())
            ],
            dtype=np.int8,
        )
    return MoleculeRecords(
        rows=np.arange(len(df), dtype=np.int64),
        targets=_target_matrix(df, path, targets),
        target_names=targets,
        smiles=df[smiles_column].tolist(),
        split=split,
    )


def open_csv(
    path: str | os.PathLike[str],
    smiles_column: str = "smiles",
    featurizer: str = "ogb",
    target_columns: Sequence[str] | None = None,
    split_column: str | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    strict: bool = False,
    descriptors: bool = False,
) -> MoleculeCache:
    """The store of a SMILES CSV, built on first use (see :func:`read_smiles_csv`).

    Args:
        path: the ``.csv`` / ``.csv.gz`` file.
        smiles_column: the SMILES column.
        featurizer: ``"ogb"`` or ``"zinc"``.
        target_columns: the target columns (``None``: every numeric column).
        split_column: a column of split labels, stored as split codes.
        cache_dir: the cache folder.
        workers: processes building the store.
        strict: raise :class:`~.featurize.InvalidMoleculeError` when any row is invalid.
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
    cache = open_store(
        csv_store_dir(path, identity, cache_dir),
        lambda: read_smiles_csv(path, smiles_column, targets, split_column),
        featurizer=featurizer,
        description=str(path),
        workers=workers,
        extra_meta={"line_offset": 2, "split_column": split_column},
        descriptors=descriptors,
    )
    if strict:
        check_strict(cache, str(path), describe_csv_row)
    elif cache.failures:
        logger.info(
            "%s: %d row(s) were left out (listed in %s)",
            path,
            len(cache.failures),
            cache.cache_dir / "meta.json",
        )
    return cache
