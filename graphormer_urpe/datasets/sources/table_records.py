"""A table read as text into :class:`~graphormer_urpe.datasets.store.records.MoleculeRecords`:
its SMILES, target and split columns checked, as :mod:`.smiles_csv` states the rules (an SD
file's records, :mod:`.sdf`, become such a table too)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..split_indices import normalize_split_name, split_code
from ..store import MoleculeFailure
from ..store.records import MoleculeRecords
from .table_check import NA_STRINGS, not_a_number

__all__ = ["table_records"]

logger = logging.getLogger(__name__)


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


def _target_matrix(
    df: pd.DataFrame, path: Path, targets: list[str], describe: Callable[[int], str]
) -> np.ndarray:
    matrix = np.empty((len(df), len(targets)), dtype=np.float64)
    for j, c in enumerate(targets):
        values, bad = _numeric_column(df, c)
        if bad.size:
            row = int(bad[0])
            message = not_a_number(c, df[c].iloc[row], bad.size)
            raise ValueError(f"{path}: {describe(row)}: {message}")
        matrix[:, j] = values
    n_missing = int(np.isnan(matrix).sum())
    if n_missing:
        logger.info(
            "%s: %d missing target value(s) kept as NaN (masked in training and evaluation)",
            path,
            n_missing,
        )
    return matrix


def table_records(
    df: pd.DataFrame,
    path: Path,
    smiles_column: str,
    target_columns: Sequence[str] | None,
    split_column: str | None,
    describe: Callable[[int], str],
    rows: np.ndarray | None = None,
    skipped: Sequence[MoleculeFailure] = (),
) -> MoleculeRecords:
    """The records of a table read as text (``df``, every cell a string): its SMILES, target
    and split columns checked as :func:`read_smiles_csv` says; ``rows``: each row's number in
    the source (default ``0..``), ``describe`` names one in messages; ``skipped``: source rows
    already rejected (an SD record RDKit cannot read)."""
    if target_columns is not None and not list(target_columns):
        raise ValueError("target_columns is empty; name at least one target column")
    columns = [str(c) for c in df.columns]
    wanted = [smiles_column, *(target_columns or []), *([split_column] if split_column else [])]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise ValueError(f"{path}: column(s) {missing} not found; available columns: {columns}")
    if len(df) == 0 and not skipped:
        raise ValueError(f"{path}: no data rows (only the header {columns})")
    rows = np.arange(len(df), dtype=np.int64) if rows is None else rows

    def where(i: int) -> str:
        return describe(int(rows[i]))

    targets = (
        [str(c) for c in target_columns]
        if target_columns is not None
        else _infer_targets(df, path, smiles_column, {split_column})
    )
    split = None
    if split_column is not None:
        split = np.array(
            [
                split_code(normalize_split_name(v, f"{path}: {where(i)}"))
                for i, v in enumerate(df[split_column].tolist())
            ],
            dtype=np.int8,
        )
    return MoleculeRecords(
        rows=rows,
        targets=_target_matrix(df, path, targets, where),
        target_names=targets,
        smiles=df[smiles_column].tolist(),
        split=split,
        skipped=list(skipped),
    )
