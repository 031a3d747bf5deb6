"""Writing embeddings: one row per input row, in input order, into a ``.npy`` file that
``numpy.load(path, mmap_mode="r")`` maps without reading it, with memory flat at any size.

A stream's length is known only at its end, so :class:`EmbeddingWriter` appends each row's
float32 values after a ``.npy`` header of :data:`HEADER_BYTES` bytes and writes the real
shape into that header when it closes (then renames the file into place). Next to
``FILE.npy`` it writes:

* ``FILE.ids.csv``: ``row,name,smiles,error``, one line per row of the array, in its order
  (``name``: a ``.smi`` line's or an SD record's name, a CSV's first id column, else empty;
  ``error``: why the row is NaN);
* ``FILE.json``: ``rows``, ``dim``, ``dtype``, ``members`` and ``member_dim`` (an ensemble's
  vectors side by side), ``hidden_dim`` and ``mol_features`` (the graph token's part and the
  descriptors' part of each member's vector), ``unreadable`` and the names of the files.

An unreadable SMILES gets a row of NaN. Example::

    from graphormer_urpe.inference import embed_smiles

    X = embed_smiles("runs/x/best.pt", ["CCO", "c1ccccc1O"])   # [2, D] float32
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from ...graph.model import Graphormer
from ...io.files import write_atomic
from ..embeddings import embedding_dim
from ..loading import LoadedModel
from .predict_io import Prediction
from .stream import iter_predictions, loaded_models

__all__ = [
    "HEADER_BYTES",
    "EmbeddingWriter",
    "embed_smiles",
    "npy_header",
    "side_paths",
    "write_embeddings",
]

HEADER_BYTES = 128
"""Length of the ``.npy`` header (magic, version, length, the dict padded with spaces): room
for any row count, and a multiple of 64 as the format asks."""


def npy_header(rows: int, dim: int) -> bytes:
    """A ``.npy`` (format 1.0) header of :data:`HEADER_BYTES` bytes for a C-order float32
    array ``[rows, dim]``."""
    text = repr({"descr": "<f4", "fortran_order": False, "shape": (rows, dim)})
    body = text.ljust(HEADER_BYTES - 10 - 1) + "\n"  # 10: magic (6), version (2), length (2)
    if len(body) + 10 != HEADER_BYTES:
        raise ValueError(f"shape ({rows}, {dim}) does not fit a {HEADER_BYTES}-byte header")
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")


def side_paths(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(FILE.json, FILE.ids.csv)`` next to ``FILE.npy``."""
    path = Path(path)
    return path.with_suffix(".json"), path.with_suffix(".ids.csv")


def _temporary(path: Path, mode: str):
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    return open(fd, mode, **({} if "b" in mode else {"newline": "", "encoding": "utf-8"})), tmp


class EmbeddingWriter:
    """Writes :attr:`Prediction.embedding` rows in the order given (input order) to ``path``.

    Use as a context manager; leaving it (an interruption included) closes the array with
    the rows written so far, so the files always agree.

    Args:
        path: the ``.npy`` file.
        models: the model, or an ensemble's members (their order is the vector's).
        source: recorded in ``FILE.json`` (e.g. the checkpoint).
    """

    def __init__(
        self, path: str | os.PathLike, models: Sequence[Graphormer], source: str = ""
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = embedding_dim(models)
        c = models[0].config
        self.meta = {
            "dim": self.dim,
            "dtype": "float32",
            "members": len(models),
            "member_dim": self.dim // len(models),
            "hidden_dim": c.hidden_dim,
            "mol_features": c.num_mol_features,
            "source": source,
        }
        self.rows = self.unreadable = 0
        self._nan = np.full(self.dim, np.nan, dtype="<f4").tobytes()
        self._array, self._array_tmp = _temporary(self.path, "wb")
        self._array.write(npy_header(0, self.dim))
        self._ids, self._ids_tmp = _temporary(side_paths(self.path)[1], "w")
        self._csv = csv.writer(self._ids)
        self._csv.writerow(["row", "name", "smiles", "error"])

    def write(self, p: Prediction) -> None:
        """Append row ``p`` (a row of NaN where it has no embedding)."""
        if p.embedding is None:
            self._array.write(self._nan)
            self.unreadable += 1
        else:
            e = p.embedding.numpy()
            if e.shape != (self.dim,):
                raise ValueError(f"row {p.index}: embedding of shape {e.shape}, not ({self.dim},)")
            self._array.write(e.astype("<f4", copy=False).tobytes())
        self._csv.writerow([p.index, p.name or "", p.smiles, p.error or ""])
        self.rows += 1

    def close(self) -> None:
        """Write the array's shape into its header, rename the files into place and write
        ``FILE.json``."""
        if self._array.closed:
            return
        self._array.seek(0)
        self._array.write(npy_header(self.rows, self.dim))
        for fh in (self._array, self._ids):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        meta_path, ids_path = side_paths(self.path)
        os.replace(self._ids_tmp, ids_path)
        os.replace(self._array_tmp, self.path)
        meta = {"rows": self.rows, **self.meta, "unreadable": self.unreadable}
        meta |= {"array": self.path.name, "ids": ids_path.name}
        write_atomic(meta_path, json.dumps(meta, indent=2) + "\n")

    def __enter__(self) -> EmbeddingWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def tee(self, predictions: Iterable[Prediction]) -> Iterator[Prediction]:
        """``predictions`` as they are, each written on its way through."""
        for p in predictions:
            self.write(p)
            yield p


def write_embeddings(
    model: LoadedModel | list[LoadedModel] | str | Path,
    smiles: Iterable[str],
    path: str | os.PathLike,
    *,
    device: str = "auto",
    **options,
) -> np.memmap:
    """Write the embeddings of every SMILES of ``smiles`` (any iterable, read lazily) to
    ``path`` (with its side files; see the module's text) and map the array.

    Args:
        model: as for :func:`~graphormer_urpe.inference.engines.stream.iter_predictions`.
        smiles: the SMILES.
        path: the ``.npy`` file.
        device: where to load a checkpoint path.
        options: passed on to :func:`~graphormer_urpe.inference.engines.stream.iter_predictions`
            (``batch_size``, ``workers``, ``chunk_size``, ``progress``, ``similarity``).

    Returns:
        ``[N, D]`` float32, read-only, memory-mapped; NaN rows for unreadable SMILES.
    """
    models = loaded_models(model, device)
    options.setdefault("similarity", False)
    source = str(model) if isinstance(model, (str, Path)) else ""
    with EmbeddingWriter(path, [m.model for m in models], source) as writer:
        for p in iter_predictions(models, smiles, embeddings=True, **options):
            writer.write(p)
    return np.load(path, mmap_mode="r")


def embed_smiles(
    model: LoadedModel | list[LoadedModel] | str | Path,
    smiles: Iterable[str],
    *,
    device: str = "auto",
    **options,
) -> np.ndarray:
    """The embeddings of ``smiles`` in memory: ``[N, D]`` float32, row ``i`` the graph-level
    vector the head reads for ``smiles[i]`` (an ensemble: its members' side by side; see
    :mod:`~graphormer_urpe.inference.embeddings`), NaN for an unreadable SMILES.

    ``options`` as for :func:`write_embeddings`; for millions of molecules, use that.
    """
    models = loaded_models(model, device)
    options.setdefault("similarity", False)
    nan = np.full(embedding_dim([m.model for m in models]), np.nan, dtype=np.float32)
    rows = [
        nan if p.embedding is None else p.embedding.numpy()
        for p in iter_predictions(models, smiles, embeddings=True, **options)
    ]
    return np.stack(rows) if rows else np.empty((0, nan.size), dtype=np.float32)
