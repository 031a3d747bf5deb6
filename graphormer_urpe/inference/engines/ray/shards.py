"""The input of ``predict --engine ray``: a folder or a glob of SMILES files, each file one
shard, read in blocks of rows.

A shard is a ``.csv`` / ``.csv.gz`` (the ``smiles_column`` column), a ``.smi`` / ``.txt``
(optionally ``.gz``; one SMILES a line, a name may follow) or a ``.parquet`` file (the
``smiles_column`` column). CSV and SMILES-line files are read by the functions of local
``predict`` (:func:`~graphormer_urpe.inference.engines.predict_io.read_named_smiles`), so a row is
the same row for both engines. Nothing here imports Ray: the blocks are plain columns.

Example::

    shards = list_shards("library/")                  # sorted: library/a.smi, library/b.smi
    for block in read_shard(shards[0], 0, rows_per_block=4096):
        block["smiles"], block["row"]                 # [<= 4096] each
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from ..predict_io import read_named_smiles

__all__ = [
    "NAMED_SUFFIXES",
    "SHARD_SUFFIXES",
    "list_shards",
    "read_shard",
    "shards_have_names",
]

SHARD_SUFFIXES = (".csv", ".csv.gz", ".smi", ".smi.gz", ".txt", ".txt.gz", ".parquet")
"""The files a folder of shards is made of (other files in it are left alone)."""
NAMED_SUFFIXES = (".smi", ".smi.gz", ".txt", ".txt.gz")
"""One SMILES a line: the rest of the line is the row's name (the output's ``name`` column)."""


def _is_shard(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(SHARD_SUFFIXES)


def list_shards(source: str | Path) -> list[Path]:
    """The shards of ``source``, sorted by path: the shard files of a folder (not its
    sub-folders), the files a glob pattern (``data/*.smi.gz``, ``data/**/*.parquet``)
    matches, or a single file.

    Raises:
        FileNotFoundError: nothing to read.
        ValueError: a file of another kind, or one-SMILES-a-line files (which give a
            ``name`` column) mixed with CSV or Parquet files (which do not).
    """
    text = str(source)
    path = Path(source)
    if path.is_dir():
        shards = sorted(p for p in path.iterdir() if _is_shard(p))
        where = f"folder {source}"
    elif path.is_file():
        shards, where = [path], str(source)
        if not _is_shard(path):
            raise ValueError(f"{source}: expected {', '.join(SHARD_SUFFIXES)}")
    else:
        matched = sorted(Path(p) for p in glob.glob(text, recursive=True))
        others = [p for p in matched if p.is_file() and not _is_shard(p)]
        if others:
            raise ValueError(
                f"{others[0]} (matched by {source}): expected {', '.join(SHARD_SUFFIXES)}"
            )
        shards, where = [p for p in matched if _is_shard(p)], f"pattern {source}"
    if not shards:
        raise FileNotFoundError(f"no input files ({', '.join(SHARD_SUFFIXES)}) in {where}")
    shards_have_names(shards)
    return shards


def shards_have_names(shards: Sequence[Path]) -> bool:
    """Whether the output has a ``name`` column: the shards are one-SMILES-a-line files.

    Raises:
        ValueError: both kinds in one run (their outputs would have different columns).
    """
    named = [p.name.lower().endswith(NAMED_SUFFIXES) for p in shards]
    if any(named) and not all(named):
        a, b = shards[named.index(True)], shards[named.index(False)]
        raise ValueError(
            f"the input mixes one-SMILES-a-line files ({a.name}) with CSV or Parquet files "
            f"({b.name}), whose outputs have different columns; run them separately"
        )
    return all(named)


def read_shard(
    path: str | Path, shard: int, rows_per_block: int = 4096, smiles_column: str = "smiles"
) -> Iterator[dict[str, np.ndarray]]:
    """The rows of one shard, ``rows_per_block`` at a time, in file order, as columns:
    ``shard`` (int32, ``shard`` on every row), ``row`` (int64, counted from 0 in the file),
    ``smiles`` and ``name`` (str; ``""`` where the file has no name).

    Raises:
        ValueError: the file lacks ``smiles_column`` (CSV, Parquet) or is of another kind.
    """
    if rows_per_block < 1:
        raise ValueError(f"rows_per_block must be >= 1, got {rows_per_block}")
    first = 0
    for smiles, names in _blocks(Path(path), rows_per_block, smiles_column):
        n = len(smiles)
        yield {
            "shard": np.full(n, shard, dtype=np.int32),
            "row": np.arange(first, first + n, dtype=np.int64),
            "smiles": np.array(smiles, dtype=object),
            "name": np.array(names, dtype=object),
        }
        first += n


def _blocks(path: Path, size: int, column: str) -> Iterator[tuple[list[str], list[str]]]:
    if path.name.lower().endswith(".parquet"):
        yield from _parquet_blocks(path, size, column)
        return
    rows = read_named_smiles(path, column)
    while block := list(islice(rows, size)):
        yield [s for s, _ in block], [n or "" for _, n in block]


def _parquet_blocks(path: Path, size: int, column: str) -> Iterator[tuple[list[str], list[str]]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    if column not in table.schema_arrow.names:
        names = ", ".join(table.schema_arrow.names)
        raise ValueError(f"{path} has no column {column!r}; columns: {names}")
    for batch in table.iter_batches(batch_size=size, columns=[column]):
        smiles = ["" if s is None else str(s) for s in batch.column(0).to_pylist()]
        yield smiles, [""] * len(smiles)
