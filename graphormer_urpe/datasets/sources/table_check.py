r"""Errors in a table's head, answered in a second: the column names and the first rows'
target values of a ``csv:`` or ``sdf:`` dataset, checked with the standard library alone,
before torch, RDKit or any featurisation is loaded.

:func:`check_table_head` raises the same one-line errors as the full read
(:func:`~graphormer_urpe.datasets.sources.smiles_csv.read_smiles_csv`,
:func:`~graphormer_urpe.datasets.sources.sdf.read_sdf`), which still checks every row: a column that
is not there (with the available ones), and a target value that is not a number (e.g. a
comma decimal, ``'5,48'``), naming its row and column.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

from ..spec import parse_dataset_spec
from .sdf_blocks import is_sdf, iter_sdf_blocks, sdf_properties, sdf_title

__all__ = [
    "HEAD_ROWS",
    "NA_STRINGS",
    "check_table_head",
    "describe_csv_row",
    "describe_sdf_record",
    "not_a_number",
]

HEAD_ROWS = 1_000
"""Rows (records) whose target values :func:`check_table_head` checks."""

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


def describe_sdf_record(row: int) -> str:
    """``"record r"``: an SD file's record, counted from 0."""
    return f"record {row}"


def not_a_number(column: str, value: str, bad: int, where: str = "in this column") -> str:
    """The message of a target value that is not a finite number (``bad`` such values
    ``where``)."""
    return (
        f"target column {column!r} holds {value!r}, which is not a finite number ({bad} such "
        f"value(s) {where}; leave a cell empty for a missing value)"
    )


def _finite_or_missing(text: str) -> bool:
    text = text.strip()
    if text in NA_STRINGS:
        return True
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_table_head(
    dataset: str,
    smiles_column: str | None = "smiles",
    target_columns: Sequence[str] | None = None,
    split_column: str | None = None,
    rows: int = HEAD_ROWS,
) -> None:
    """Check the columns and the first ``rows`` rows' target values of every file of a
    ``csv:`` / ``sdf:`` dataset (any other known dataset passes; a file that is not there is
    left to the full read).

    Raises:
        ValueError: a column missing (naming the available ones) or a target value that is
            not a number (naming its row and column), as the full read would; a dataset name
            that :func:`~..spec.parse_dataset_spec` refuses.
    """
    spec = parse_dataset_spec(dataset)
    if not spec.is_table:
        return
    for i, path in enumerate(spec.paths):
        if not Path(path).is_file():
            continue
        split = split_column if i == 0 else None  # (three files: no split column)
        if is_sdf(path):
            columns, records, describe = _sdf_head(path, rows)
            wanted = [*(target_columns or []), *([split] if split else [])]
        else:
            columns, records, describe = _csv_head(path, rows)
            wanted = [
                smiles_column or "smiles",
                *(target_columns or []),
                *([split] if split else []),
            ]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise ValueError(f"{path}: column(s) {missing} not found; available columns: {columns}")
        _check_values(path, records, list(target_columns or []), describe)


def _csv_head(path: str, rows: int) -> tuple[list[str], Iterable[dict[str, str]], object]:
    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, skipinitialspace=True)
            header = next(reader, [])
            body = [dict(zip(header, r, strict=False)) for r in islice(reader, rows)]
    except (OSError, UnicodeDecodeError, csv.Error):
        return [], [], describe_csv_row  # left to the full read's message
    return [str(c) for c in header], body, describe_csv_row


def _sdf_head(path: str, rows: int) -> tuple[list[str], Iterable[dict[str, str]], object]:
    try:
        records = [
            {"name": sdf_title(b), **sdf_properties(b)} for b in islice(iter_sdf_blocks(path), rows)
        ]
    except (OSError, EOFError):
        return [], [], describe_sdf_record
    columns = list(dict.fromkeys(k for r in records for k in r))
    return columns, _complete(records, columns), describe_sdf_record


def _complete(records: list[dict[str, str]], columns: list[str]) -> Iterator[dict[str, str]]:
    """SD records as rows of every column (a property a record lacks: missing)."""
    for r in records:
        yield {c: r.get(c, "") for c in columns}


def _check_values(
    path: str, records: Iterable[dict[str, str]], targets: list[str], describe
) -> None:
    rows = list(records)
    for column in targets:
        bad = [i for i, r in enumerate(rows) if not _finite_or_missing(r.get(column, ""))]
        if bad:
            value = rows[bad[0]][column]
            where = f"in its first {len(rows)} rows"
            message = not_a_number(column, value, len(bad), where)
            raise ValueError(f"{path}: {describe(bad[0])}: {message}")
