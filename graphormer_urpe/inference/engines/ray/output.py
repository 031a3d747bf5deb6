"""The output of ``predict --engine ray``: one part file per input shard, and a manifest.

A folder holds ``part-00000.csv``, ``part-00001.csv``, ... (the columns of local ``predict``,
rows in the input shard's order), with ``--embeddings`` ``part-00000.npy`` beside each (and
its ``.json`` and ``.ids.csv``, as :class:`~graphormer_urpe.inference.engines.embeddings_io.
EmbeddingWriter` writes them), and ``manifest.json``::

    {"format": 1, "checkpoint": "...", "columns": [...], "embeddings": false,
     "shards": [{"input": "lib/a.smi", "output": "part-00000.csv", "rows": 4096,
                 "failed": 2, "outside": 17, "bytes": 301234, "embeddings": null}, ...]}

A part file is written under a temporary name and renamed once its shard's last row is
written; the manifest (rewritten atomically) then records it. A re-run skips every shard the
manifest records whose part file is there with the recorded size (:meth:`Manifest.complete`),
and writes the others again from their first row.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ....graph.model import Graphormer
from ....io.files import write_atomic
from ..embeddings_io import EmbeddingWriter, side_paths
from ..predict_io import Prediction, PredictionLayout

__all__ = ["MANIFEST", "Manifest", "PartWriter", "ShardRecord"]

MANIFEST = "manifest.json"
"""The manifest's name in the output folder."""
FORMAT = 1


@dataclass
class ShardRecord:
    """One finished shard in the manifest."""

    input: str
    """The input file, as listed."""
    output: str
    """The part file's name in the output folder."""
    rows: int
    """Rows written (one per input row)."""
    failed: int
    """Of those, rows that could not be read (empty predictions, the reason in ``error``)."""
    outside: int
    """Of those, molecules out of the training domain."""
    bytes: int
    """The part file's size."""
    embeddings: str | None = None
    """The ``.npy`` of its embeddings (``--embeddings``), else ``None``."""


class Manifest:
    """The manifest of an output folder: which shards are done, and the part names.

    Args:
        folder: the output folder (created).
        checkpoint: recorded; a folder holding another checkpoint's output is refused.
        columns: the part files' header; a folder whose parts have others is refused.
        embeddings: whether parts have their ``.npy``.

    Raises:
        ValueError: ``folder`` holds the output of another checkpoint or other columns.
    """

    def __init__(
        self, folder: str | Path, checkpoint: str, columns: Sequence[str], embeddings: bool
    ) -> None:
        self.folder = Path(folder)
        self.path = self.folder / MANIFEST
        self.head = {
            "format": FORMAT,
            "checkpoint": checkpoint,
            "columns": list(columns),
            "embeddings": embeddings,
        }
        self.shards: dict[str, ShardRecord] = {}
        if self.path.exists():
            old = json.loads(self.path.read_text())
            for key in ("checkpoint", "columns", "embeddings"):
                if old.get(key) != self.head[key]:
                    raise ValueError(
                        f"{self.folder} holds predictions of another run ({key}: "
                        f"{old.get(key)!r}, not {self.head[key]!r}); choose another --output"
                    )
            self.shards = {s["input"]: ShardRecord(**s) for s in old["shards"]}

    def complete(self, source: str) -> bool:
        """Whether shard ``source`` is recorded and its files are there, of the recorded
        size (a part file is renamed into place only once whole)."""
        record = self.shards.get(source)
        if record is None:
            return False
        part = self.folder / record.output
        if not part.is_file() or part.stat().st_size != record.bytes:
            return False
        return record.embeddings is None or (self.folder / record.embeddings).is_file()

    def part_names(self, sources: Sequence[str]) -> dict[str, str]:
        """A part file name per input: the recorded one, else the next free number."""
        taken = {r.output for r in self.shards.values()}
        names, k = {}, 0
        for source in sources:
            if source in self.shards:
                names[source] = self.shards[source].output
                continue
            while f"part-{k:05d}.csv" in taken:
                k += 1
            names[source] = f"part-{k:05d}.csv"
            taken.add(names[source])
        return names

    def record(self, record: ShardRecord) -> None:
        """Add a finished shard and rewrite the manifest (atomically)."""
        self.shards[record.input] = record
        self.save()

    def save(self) -> None:
        """Write the manifest (atomically)."""
        body = {**self.head, "shards": [asdict(r) for r in self.shards.values()]}
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(body, indent=1) + "\n")


class PartWriter:
    """Writes the dataset's rows, which come shard by shard in input order, into one part
    file per shard, and records each finished shard in the manifest.

    Each row carries its ``shard`` (the position in ``sources``) and ``row`` (its place in
    the shard). Rows must come in order: a row that is not the next one of its shard (lost
    or repeated) raises, so a written part holds each input row exactly once. A shard is
    finished when the first row of a later shard comes, or at :meth:`finish`; shards with no
    rows at all (empty files) get a part with the header alone.

    Args:
        manifest: the output's manifest.
        sources: the shards to write, in order.
        layout: the output's columns.
        models: for ``--embeddings``: the model(s), whose vectors each part's ``.npy`` holds.
        progress: called with the number of rows of each batch written.
    """

    def __init__(
        self,
        manifest: Manifest,
        sources: Sequence[str],
        layout: PredictionLayout,
        models: Sequence[Graphormer] | None = None,
        progress=None,
    ) -> None:
        self.manifest = manifest
        self.sources = list(sources)
        self.names = manifest.part_names(self.sources)
        self.layout = layout
        self.models = models
        self.progress = progress
        self.shard = -1  # the shard being written (-1: none yet)
        self.next_row = 0
        self.counts = [0, 0]  # failed, outside
        self.rows = self.failed = self.outside = 0  # over the finished shards
        self._fh = self._tmp = self._csv = self._embeddings = None

    # one shard's files ------------------------------------------------------------------

    def _open(self, shard: int) -> None:
        part = self.manifest.folder / self.names[self.sources[shard]]
        part.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{part.name}.", suffix=".tmp", dir=part.parent)
        self._fh = open(fd, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed in _close
        self._csv = csv.writer(self._fh, lineterminator="\n")
        self._csv.writerow(self.layout.header)
        if self.models is not None:
            npy = part.with_suffix(".npy")
            self._embeddings = EmbeddingWriter(npy, self.models, self.sources[shard])
        self.shard, self.next_row, self.counts = shard, 0, [0, 0]

    def _close(self) -> None:
        assert self._fh is not None and self._tmp is not None
        source = self.sources[self.shard]
        part = self.manifest.folder / self.names[source]
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.chmod(self._tmp, 0o644)
        npy = None
        if self._embeddings is not None:
            self._embeddings.close()
            npy, self._embeddings = part.with_suffix(".npy").name, None
        os.replace(self._tmp, part)
        self._fh = self._tmp = None
        failed, outside = self.counts
        record = ShardRecord(
            source, part.name, self.next_row, failed, outside, part.stat().st_size, npy
        )
        self.manifest.record(record)
        self.rows += self.next_row
        self.failed += failed
        self.outside += outside

    def _advance_to(self, shard: int) -> None:
        """Finish the shard being written and every empty one before ``shard``."""
        if shard < self.shard:
            raise RuntimeError(f"rows of shard {self.sources[shard]} came after later shards")
        while self.shard < shard:
            if self._fh is not None:
                self._close()
            self._open(self.shard + 1)

    # the stream ---------------------------------------------------------------------------

    def write(self, batch: dict[str, np.ndarray]) -> None:
        """Write a batch of rows (columns ``shard``, ``row``, ``smiles``, ``name``, the
        layout's value columns, ``domain``, ``nearest_similarity``, ``error``, and with
        embeddings ``embedding``)."""
        shards = batch["shard"]
        if len(shards) == 0:
            return
        # the batch's runs of rows of one shard
        cuts = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(shards)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=False):
            self._advance_to(int(shards[a]))
            self._write_rows(batch, a, b)
        if self.progress is not None:
            self.progress(len(shards))

    def _write_rows(self, batch: dict[str, np.ndarray], a: int, b: int) -> None:
        rows = batch["row"][a:b]
        expected = np.arange(self.next_row, self.next_row + (b - a))
        if not np.array_equal(rows, expected):
            bad = int(rows[np.flatnonzero(rows != expected)[0]])
            raise RuntimeError(
                f"{self.sources[self.shard]}: row {bad} came where row "
                f"{self.next_row + int(np.flatnonzero(rows != expected)[0])} was due"
            )
        layout = self.layout
        columns = layout.value_columns
        values = np.column_stack([batch[c][a:b] for c in columns]).tolist()
        smiles = batch["smiles"][a:b].tolist()
        names = batch["name"][a:b].tolist()
        domain = batch["domain"][a:b].tolist()
        sims = [None if math.isnan(s) else s for s in batch["nearest_similarity"][a:b].tolist()]
        errors = batch["error"][a:b].tolist()
        lines = []
        failed = outside = 0
        for i in range(b - a):
            readable = not errors[i]
            numbers = values[i] if readable else None
            lines.append(
                layout.cells(smiles[i], names[i], numbers, (domain[i], sims[i]), errors[i])
            )
            failed += not readable
            outside += domain[i].startswith("out")
        assert self._csv is not None
        self._csv.writerows(lines)
        if self._embeddings is not None:
            self._write_embeddings(batch, a, b, smiles, names, errors)
        self.next_row += b - a
        self.counts[0] += failed
        self.counts[1] += outside

    def _write_embeddings(self, batch, a: int, b: int, smiles, names, errors) -> None:
        assert self._embeddings is not None
        vectors = batch["embedding"][a:b]
        for i in range(b - a):
            vector = None if errors[i] else torch.from_numpy(np.ascontiguousarray(vectors[i]))
            p = Prediction(self.next_row + i, smiles[i], None, errors[i] or None)
            self._embeddings.write(p._replace(name=names[i], embedding=vector))

    def finish(self) -> None:
        """The stream ended: finish the last shard, and the empty ones after it."""
        self._advance_to(len(self.sources) - 1)
        if self._fh is not None:
            self._close()

    def abort(self) -> None:
        """Remove the temporary files of the shard being written (an interrupted run)."""
        if self._fh is not None:
            self._fh.close()
        if self._embeddings is not None:
            with contextlib.suppress(OSError):
                self._embeddings.close()
            for path in (self._embeddings.path, *side_paths(self._embeddings.path)):
                with contextlib.suppress(OSError):
                    path.unlink()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
        self._fh = self._tmp = self._embeddings = None
