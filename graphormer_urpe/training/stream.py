r"""Streaming prediction: any number of SMILES in, one result per row out, in input order.

Memory stays flat however long the input is::

    SMILES ──chunks of chunk_size──▶ worker processes (at a lower priority): featurize_chunk,
    then flat_graphs (Graphormer features of the whole chunk at once, as FlatGraphs; at most
    2 x workers chunks in flight)
      ──in input order──▶ windows of SORT_WINDOW x batch_size consecutive valid molecules
    (slices of the chunks' FlatGraphs, joined across chunk boundaries)
      ──sorted by size within the window──▶ batches of batch_size molecules
      ──collate──▶ the model
      ──▶ one Prediction per input row, in input order

Sorting a window by atom count before cutting it into batches puts molecules of similar size
together, so batches carry less padding (measured on MOSES with the default model: mean
padded size 25.8 atoms unsorted, 21.5 sorted). Windows hold a fixed number of consecutive
*valid* molecules whatever the chunk boundaries, so the predictions do not depend on
``chunk_size`` or ``workers``. A row that cannot be featurised keeps its place with
``values=None`` and the reason in ``error``.

Example::

    from graphormer_urpe import iter_predictions
    from graphormer_urpe.training import read_smiles

    for p in iter_predictions("runs/x/best.pt", read_smiles("library.smi")):
        print(p.index, p.smiles, None if p.values is None else p.values.tolist(), p.error)
"""

from __future__ import annotations

import csv
import ctypes
import gzip
import io
import multiprocessing
import multiprocessing.pool
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Unix
    fcntl = None  # type: ignore[assignment]

from ..graph.batch import GraphormerCollator
from ..graph.flat import FlatGraphs
from ..graph.shapes import StaticShapes
from .capture import CapturedForward, default_backend
from .ensemble import load_models, mean_and_std
from .inference import LoadedModel
from .loop import Precision
from .stream_defaults import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, DEFAULT_WORKERS

if TYPE_CHECKING:
    from ..datasets.domain import ChunkDomain, DomainCheck, DomainRecord

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_WORKERS",
    "Prediction",
    "default_threads",
    "iter_predictions",
    "read_smiles",
    "write_predictions_csv",
]

SORT_WINDOW = 8
"""Batches per window of consecutive valid molecules sorted by size (see the module's text)."""


def default_threads(workers: int) -> int:
    """Torch threads for the model: the CPU cores this process may use, less the ``workers``
    featurisation processes, at least 1 (threads that compete with busy workers for a core
    make both slower)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - workers)


class Prediction(NamedTuple):
    """The result for one input row.

    Attributes:
        index: the row, counted from 0 over the input SMILES.
        smiles: the SMILES as given.
        values: ``[T]`` float32 model outputs (logits for binary tasks; an ensemble's mean),
            or ``None``.
        error: why the row could not be featurised, or ``None``.
        members: see below.
    """

    index: int
    smiles: str
    values: Tensor | None
    error: str | None
    members: Tensor | None = None
    """``[K, T]`` each ensemble member's outputs (``values`` is their mean); ``None`` for one
    model."""
    domain: DomainCheck | None = None
    """How the molecule compares with the model's training molecules (out-of-domain reasons,
    nearest training similarity; :mod:`~graphormer_urpe.datasets.domain`); ``None`` for a row
    that could not be featurised, or a checkpoint without the record (domain unknown)."""


class _Row(NamedTuple):
    index: int
    smiles: str
    error: str | None  # None: a valid molecule
    domain: DomainCheck | None = None


class _Chunk(NamedTuple):
    first: int  # row of smiles[0]
    smiles: list[str]
    graphs: FlatGraphs | None  # the valid molecules, in input order
    errors: dict[int, str]  # row -> why it could not be featurised
    domain: ChunkDomain | None = None  # the valid molecules against the training record


# --------------------------------------------------------------------------------------
# Reading SMILES
# --------------------------------------------------------------------------------------


def read_smiles(
    source: str | Path, smiles_column: str = "smiles", stdin: IO[str] | None = None
) -> Iterator[str]:
    """The SMILES of a file, read lazily, one per row.

    ``.csv`` / ``.csv.gz``: the ``smiles_column`` column. ``.smi`` / ``.txt`` (optionally
    ``.gz``): the first whitespace-separated field of each line (a name may follow), a first
    line whose field is ``smiles_column`` (any case) being a header; a blank line is a row
    with an empty SMILES. ``-``: standard input (``stdin``), read as CSV when its first line
    names ``smiles_column`` among comma-separated fields, else one SMILES a line.
    """
    if str(source) == "-":
        yield from _read_stdin(stdin if stdin is not None else sys.stdin, smiles_column)
        return
    name = str(source).lower().removesuffix(".gz")
    if not name.endswith((".csv", ".smi", ".txt")):
        raise ValueError(
            f"{source}: unknown input format; expected .csv, .csv.gz, .smi or .txt "
            "(one SMILES a line), or - for standard input"
        )
    opener = gzip.open if str(source).lower().endswith(".gz") else open
    with opener(source, "rt", newline="") as fh:
        if name.endswith(".csv"):
            yield from _csv_column(fh, smiles_column, str(source))
        else:
            yield from _smiles_lines(fh, smiles_column)


def _read_stdin(fh: IO[str], smiles_column: str) -> Iterator[str]:
    first = fh.readline()
    rest: Iterable[str] = fh
    fields = next(csv.reader([first]), [])
    if len(fields) > 1 and smiles_column in fields:
        yield from _csv_column(_chain([first], rest), smiles_column, "standard input")
    elif first:
        yield from _smiles_lines(_chain([first], rest), smiles_column)


def _chain(head: list[str], tail: Iterable[str]) -> Iterator[str]:
    yield from head
    yield from tail


def _csv_column(lines: Iterable[str], column: str, where: str) -> Iterator[str]:
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{where} is empty; expected a CSV header with a {column!r} column")
    if column not in header:
        raise ValueError(f"{where} has no column {column!r}; columns: {', '.join(header)}")
    k = header.index(column)
    for row in reader:
        yield row[k] if k < len(row) else ""


def _smiles_lines(lines: Iterable[str], column: str) -> Iterator[str]:
    for i, line in enumerate(lines):
        fields = line.split(maxsplit=1)
        smi = fields[0] if fields else ""
        if i == 0 and smi.lower() == column.lower():
            continue
        yield smi


# --------------------------------------------------------------------------------------
# Featurising in worker processes, in input order
# --------------------------------------------------------------------------------------


def _featurize_part(
    part: list[str],
    first: int,
    featurizer: str,
    hops: int,
    mol_features: dict | None = None,
    domain: DomainRecord | None = None,
) -> _Chunk:
    """One chunk's graphs with their Graphormer features (runs in a worker process), and
    their molecule features where the model was trained with them (``mol_features``: the
    checkpoint's record), compared with the training record ``domain`` where there is one."""
    from ..datasets.mol_features import mol_features_of_smiles
    from ..datasets.store import featurize_chunk, flat_graphs, with_pointers

    mols = [] if domain is not None and domain.fingerprints is not None else None
    zeros = np.zeros((len(part), 1))
    arrays, failures, _ = featurize_chunk(part, zeros, first, featurizer, mols=mols)
    errors = {f.index: f.reason for f in failures}
    valid = len(arrays["num_nodes"])
    flat = checked = None
    if valid and domain is not None:
        checked = domain.check(arrays, mols)
    if valid:
        flat, _ = flat_graphs(with_pointers(arrays), range(valid), hops)
        flat.y = None
        if mol_features is not None:
            kept = [s for i, s in enumerate(part, start=first) if i not in errors]
            flat.mol_x = mol_features_of_smiles(kept, mol_features)  # [valid, K]
    return _Chunk(first, part, flat, errors, checked)


def _chunks(smiles: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    it, first = iter(smiles), 0
    while part := [s if isinstance(s, str) else str(s) for s in islice(it, size)]:
        yield first, part
        first += len(part)


def _mp_context() -> multiprocessing.context.BaseContext:
    # fork starts workers in milliseconds where it is available (Linux); spawn elsewhere
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")  # pragma: no cover


WORKER_NICENESS = 5
"""How much lower the featurising processes' scheduling priority is than the calling
process's (Unix ``nice``; see :func:`_lower_priority`)."""


def _lower_priority() -> None:
    """Run this process :data:`WORKER_NICENESS` steps nicer (pool initializer; nothing where
    the system has no ``nice``).

    The process that runs the model is the pipeline's one consumer. Where the cores are all
    taken (2 cores: the model's thread and 2 workers), an equal share lets the workers run
    ahead of it until every submitted chunk is done; then they wait, and a core idles while
    the model catches up: 15-17% of the machine idle over 40,000 MOSES molecules. At a lower
    priority the workers take the time the model leaves (3-5% idle), and where there are
    cores to spare priority changes nothing.
    """
    nice = getattr(os, "nice", None)
    if nice is not None:
        try:
            nice(WORKER_NICENESS)
        except OSError:  # pragma: no cover - raising one's niceness is always allowed
            pass


def _pool(workers: int) -> multiprocessing.pool.Pool:
    """The featurising processes: at a lower priority, with a wide result pipe."""
    pool = _mp_context().Pool(workers, initializer=_lower_priority)
    _widen_result_pipe(pool)
    return pool


PIPE_BYTES = 1 << 20
"""Buffer of the pipe that brings the workers' chunks back (Linux; 64 KiB by default)."""


def _widen_result_pipe(pool: multiprocessing.pool.Pool) -> None:
    """Give the pipe that carries ``pool``'s results a :data:`PIPE_BYTES` buffer, where the
    operating system allows (Linux's ``F_SETPIPE_SZ``; nothing elsewhere).

    A chunk of 1,000 MOSES molecules comes back as 13.5 MB. Python reads a message from a
    pipe one buffer at a time, allocating the whole remainder for every read, so through
    64 KiB it cost the main process 56 ms of CPU (4.8 ms per MB), through 1 MiB 19 ms
    (1.4 ms per MB): 0.04 CPU ms per molecule less in the process that runs the model.
    """
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    reader = getattr(getattr(pool, "_outqueue", None), "_reader", None)  # CPython's Pool
    if set_size is None or reader is None:
        return
    try:
        fcntl.fcntl(reader.fileno(), set_size, PIPE_BYTES)
    except OSError:  # above the system's pipe-max-size: keep the default
        pass


def _featurized(
    smiles: Iterable[str],
    featurizer: str,
    hops: int,
    workers: int,
    chunk_size: int,
    mol_features: dict | None = None,
    domain: DomainRecord | None = None,
) -> Iterator[_Chunk]:
    """Every chunk of the input with its graphs, in input order.

    With ``workers`` processes, at most ``2 * workers`` chunks are submitted and not yet
    consumed, so the input is read only as fast as it is used. An input of one chunk is
    featurised in this process.
    """
    chunks = _chunks(smiles, chunk_size)
    head = list(islice(chunks, 2))
    chunks = _chain(head, chunks)
    if workers == 0 or len(head) < 2:  # a single chunk is featurised here, without a pool
        for first, part in chunks:
            yield _featurize_part(part, first, featurizer, hops, mol_features, domain)
        return
    with _pool(workers) as pool:
        pending: deque = deque()
        for first, part in chunks:
            task = (part, first, featurizer, hops, mol_features, domain)
            pending.append(pool.apply_async(_featurize_part, task))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


class _HeapTrimmer:
    """Hands freed heap memory back to the operating system (glibc's ``malloc_trim``) once the
    resident memory has grown by ``slack`` bytes since the last time (nothing where there is
    no glibc or no ``/proc``).

    Batches of ever-different shapes fragment glibc's heap: the memory in use stays near
    270 MB while the free but retained part grows, so without trimming the main process's
    resident memory creeps up (MOSES molecules: 938 MB after 100,000, 1,312 MB after 800,000)
    and a million molecules would not fit 2 GB with the workers. A trim hands back every free
    page, including those the next batches reuse, which then come back as page faults: after
    every batch, 56 faults per molecule and a third of the main process's time (20,000
    molecules: 0.60 CPU ms per molecule, 27% of it in the kernel, against 0.39-0.48 without
    trimming). Trimming once the memory grew by ``slack`` since the last trim costs about 6
    faults per molecule while few trims happen, and 30-45 once the creep brings a trim every
    few batches (200,000 molecules): bounded memory at a fraction of the cost.
    """

    def __init__(self, slack: int = 256 * 2**20) -> None:
        self.slack = slack
        self.trim = _malloc_trim()
        self.limit = self._resident() + slack if self.trim is not None else None

    @staticmethod
    def _resident() -> int:
        """Resident bytes of this process (0 where ``/proc`` is missing)."""
        try:
            with open("/proc/self/statm", "rb") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
            return 0

    def __call__(self) -> None:
        if self.limit is None or self._resident() <= self.limit:
            return
        self.trim(0)
        self.limit = self._resident() + self.slack


@lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # not glibc
        return None


def _windows(chunks: Iterable[_Chunk], size: int) -> Iterator[tuple[list[_Row], FlatGraphs | None]]:
    """Consecutive rows holding ``size`` valid molecules (the last: at most ``size``), with
    those molecules' graphs; rows before any pending valid molecule come out at once."""
    rows: list[_Row] = []
    pieces: list[FlatGraphs] = []  # the pending valid molecules, a slice per chunk
    valid = 0
    for chunk in chunks:
        taken = seen = 0  # this chunk's valid molecules already in pieces / seen so far
        for i, smi in enumerate(chunk.smiles, start=chunk.first):
            error = chunk.errors.get(i)
            if error is not None and valid == 0:
                yield [_Row(i, smi, error)], None
                continue
            checked = None if error is not None or chunk.domain is None else chunk.domain[seen]
            rows.append(_Row(i, smi, error, checked))
            if error is None:
                seen += 1
                valid += 1
                if valid == size:
                    assert chunk.graphs is not None
                    pieces.append(chunk.graphs.slice(taken, seen))
                    yield rows, FlatGraphs.concat(pieces)
                    rows, pieces, valid, taken = [], [], 0, seen
        if seen > taken:
            assert chunk.graphs is not None
            pieces.append(chunk.graphs.slice(taken, seen))
    if rows:
        yield rows, FlatGraphs.concat(pieces)


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


def size_order(num_nodes: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """The batches of a window of molecules: ``[K]`` positions each, by ascending atom count
    (ties in input order), ``batch_size`` at a time (the last: the rest)."""
    order = np.argsort(num_nodes, kind="stable")
    return [order[i : i + batch_size] for i in range(0, order.size, batch_size)]


@torch.no_grad()
def _predict_window(
    forwards: list[CapturedForward],
    collator: GraphormerCollator,
    rows: list[_Row],
    graphs: FlatGraphs | None,
    batch_size: int,
    trim_heap: _HeapTrimmer,
) -> Iterator[Prediction]:
    out = None  # [K, W, T], in window order
    if graphs is not None:
        for take in size_order(graphs.num_nodes, batch_size):
            batch = collator(graphs.take(take))
            if forwards[0].cycle.backend is None:  # eager: one copy for every member
                batch = batch.to(forwards[0].cycle.device, non_blocking=True)
            part = torch.stack([forward(batch).cpu() for forward in forwards])
            if out is None:
                out = part.new_empty(part.shape[0], len(graphs), part.shape[2])
            out[:, torch.from_numpy(take)] = part
            trim_heap()
    k = 0
    for r in rows:
        if r.error is not None:
            yield Prediction(r.index, r.smiles, None, r.error)
            continue
        assert out is not None
        if len(forwards) == 1:
            yield Prediction(r.index, r.smiles, out[0, k], None, domain=r.domain)
        else:
            values = out[:, k].mean(dim=0)
            yield Prediction(r.index, r.smiles, values, None, out[:, k], r.domain)
        k += 1


def iter_predictions(
    model: LoadedModel | list[LoadedModel] | str | Path,
    smiles: Iterable[str],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    workers: int = DEFAULT_WORKERS,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    device: str = "auto",
    progress: bool = False,
    similarity: bool = True,
) -> Iterator[Prediction]:
    """Predict every SMILES of ``smiles`` (any iterable, read lazily), yielding one
    :class:`Prediction` per input row in input order as soon as its batch is done.

    Args:
        model: a checkpoint path, an ensemble folder (``train --ensemble``), a
            :func:`~graphormer_urpe.training.load_model` result or a list of them (an
            ensemble: each row gets the members' mean, and their outputs in ``members``).
        smiles: the SMILES (a list, a generator, :func:`read_smiles`, ...).
        batch_size: valid molecules per model batch (batches are cut from windows of
            ``SORT_WINDOW * batch_size`` consecutive valid molecules sorted by size).
        workers: featurisation processes (0: in this process).
        chunk_size: SMILES per featurisation task.
        device: where to load a checkpoint path (``auto``, ``cpu``, ``cuda``, ``cuda:N``).
        progress: show a progress bar (molecules/s) on standard error.
        similarity: search each molecule's nearest training fingerprint (where the
            checkpoint records them); the other domain checks cost next to nothing.
    """
    for name, value, low in (("batch_size", batch_size, 1), ("chunk_size", chunk_size, 1)):
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if isinstance(model, LoadedModel):
        models = [model]
    elif isinstance(model, list):
        models = model
    else:
        models = load_models(model, device)
    lm = models[0]
    for m in models:
        m.model.eval()
    cfg = lm.model.config
    precision = Precision(lm.config.precision, lm.device)
    # on one GPU, static batches and forward passes captured per batch shape
    backend = default_backend(lm.device)
    static = StaticShapes(batch_size, cfg.multi_hop_max_dist) if backend else None
    collator = GraphormerCollator(cfg.multi_hop_max_dist, cfg.spatial_pos_max, static=static)
    autocast = lambda: precision.autocast(backend is None)  # noqa: E731
    forwards = [CapturedForward(m.model, autocast, lm.device, backend) for m in models]
    if any(m.mol_features != lm.mol_features for m in models):
        raise ValueError("the ensemble's members were trained with different molecule features")
    domain = lm.domain  # an ensemble's members record the same training split
    if domain is not None and not similarity:
        domain = replace(domain, fingerprints=None)
    chunks = _featurized(
        smiles, lm.featurizer, cfg.multi_hop_max_dist, workers, chunk_size, lm.mol_features, domain
    )
    # disable=None: drawn on a terminal only, never into a log file
    with tqdm(desc="predict", unit="mol", disable=None if progress else True, smoothing=0.1) as bar:
        trim_heap = _HeapTrimmer()
        for rows, graphs in _windows(chunks, SORT_WINDOW * batch_size):
            yield from _predict_window(forwards, collator, rows, graphs, batch_size, trim_heap)
            bar.update(len(rows))


# --------------------------------------------------------------------------------------
# Writing CSV
# --------------------------------------------------------------------------------------


DOMAIN_COLUMNS = ("domain", "nearest_similarity")
"""The applicability-domain columns of the CSV (see :func:`write_predictions_csv`)."""


def prediction_columns(
    target_names: Sequence[str], binary: bool, logits: bool, std: bool = False, domain: bool = False
) -> list[str]:
    """The CSV header: ``smiles``, one column per target (``prob_`` / ``logit_`` prefixed for
    binary tasks), for an ensemble (``std``) one ``<column>_std`` per target, with ``domain``
    the :data:`DOMAIN_COLUMNS`, ``error``."""
    if binary:
        prefix = "logit_" if logits else "prob_"
        target_names = [prefix + n for n in target_names]
    spread = [f"{n}_std" for n in target_names] if std else []
    return ["smiles", *target_names, *spread, *(DOMAIN_COLUMNS if domain else ()), "error"]


def write_predictions_csv(
    predictions: Iterable[Prediction],
    fh: IO[str],
    target_names: Sequence[str],
    binary: bool = False,
    logits: bool = False,
    std: bool = False,
    domain: bool = False,
) -> tuple[int, int]:
    """Write the header, then one row per prediction, flushed as it comes, so that an
    interrupted run leaves a valid CSV prefix. Binary tasks get sigmoid probabilities unless
    ``logits``. With ``std`` (an ensemble's predictions) each value is the members' mean of
    what the column reports, followed by their standard deviations. With ``domain``, the
    columns ``domain`` (``in``, ``out: <reasons>``, ``unknown`` where the checkpoint has no
    training record, empty for a row that could not be read) and ``nearest_similarity``
    (three decimals; empty where not searched) come before ``error``.

    Returns:
        ``(rows, failed)``: rows written and how many of them could not be featurised.
    """
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(prediction_columns(target_names, binary, logits, std, domain))
    fh.flush()
    rows = failed = 0
    line = io.StringIO()
    row_writer = csv.writer(line, lineterminator="\n")
    for p in predictions:
        if p.values is None:
            cells = [""] * (len(target_names) * (2 if std else 1))
            failed += 1
        else:
            cells = _cells(p, binary and not logits, std)
        if domain:
            cells += _domain_cells(p)
        row_writer.writerow([p.smiles, *cells, p.error or ""])
        fh.write(line.getvalue())  # one whole line per write
        fh.flush()
        line.seek(0)
        line.truncate()
        rows += 1
    return rows, failed


def _domain_cells(p: Prediction) -> list[str]:
    """A row's :data:`DOMAIN_COLUMNS` cells."""
    if p.values is None:
        return ["", ""]
    if p.domain is None:
        return ["unknown", ""]
    sim = p.domain.nearest_similarity
    return [p.domain.label, "" if sim is None else f"{sim:.3f}"]


def _cells(p: Prediction, probabilities: bool, std: bool) -> list[str]:
    """A predicted row's value cells (see :func:`write_predictions_csv`)."""
    if p.members is None:  # one model: its values as they are
        values = torch.sigmoid(p.values) if probabilities else p.values
        cells = [f"{v:.6g}" for v in values.tolist()]
        return cells + ["0"] * len(cells) if std else cells
    members = torch.sigmoid(p.members) if probabilities else p.members  # [K, T]
    mean, spread = mean_and_std(members)
    cells = [f"{v:.6g}" for v in mean.tolist()]
    return cells + [f"{v:.6g}" for v in spread.tolist()] if std else cells
