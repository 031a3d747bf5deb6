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
together, so batches carry less padding (measured: docs/results/code-notes.md). Windows hold a fixed
number of consecutive *valid* molecules whatever the chunk boundaries, so the predictions do not
depend on ``chunk_size`` or ``workers``. A row that cannot be featurised keeps its place with
``values=None`` and the reason in ``error``.

Example::

    from graphormer_urpe import iter_predictions
    from graphormer_urpe.inference import read_smiles

    for p in iter_predictions("runs/x/best.pt", read_smiles("library.smi")):
        print(p.index, p.smiles, None if p.values is None else p.values.tolist(), p.error)
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import lru_cache
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from ...graph.batch import GraphormerCollator
from ...graph.flat_graphs import FlatGraphs
from ...graph.static_shapes import StaticShapes
from ...runtime.capture import CapturedForward, default_backend
from ...runtime.precision import Precision
from ..embeddings import WithHeadInput
from ..loading import LoadedModel, load_model, load_models
from ..trees import TreesBeside
from .defaults import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, DEFAULT_WORKERS
from .predict_io import Prediction
from .workers import featurising_pool

if TYPE_CHECKING:
    from ...datasets.domain import ChunkDomain, DomainCheck, DomainRecord

__all__ = [
    "Featurizing",
    "StreamModel",
    "default_threads",
    "iter_predictions",
    "loaded_models",
    "predict_smiles",
]

log = logging.getLogger(__name__)

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
# Featurising in worker processes, in input order
# --------------------------------------------------------------------------------------


def _chunks(smiles: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    it, first = iter(smiles), 0
    while part := [s if isinstance(s, str) else str(s) for s in islice(it, size)]:
        yield first, part
        first += len(part)


def _featurized(
    smiles: Iterable[str], featurizing: Featurizing, workers: int, chunk_size: int
) -> Iterator[_Chunk]:
    """Every chunk of the input with its graphs, in input order.

    With ``workers`` processes, at most ``2 * workers`` chunks are submitted and not yet
    consumed, so the input is read only as fast as it is used. An input of one chunk is
    featurised in this process.
    """
    chunks = _chunks(smiles, chunk_size)
    head = list(islice(chunks, 2))
    chunks = chain(head, chunks)
    if workers == 0 or len(head) < 2:  # a single chunk is featurised here, without a pool
        for first, part in chunks:
            yield featurizing(part, first)
        return
    with featurising_pool(workers) as pool:
        pending: deque = deque()
        for first, part in chunks:
            pending.append(pool.apply_async(featurizing, (part, first)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


class _HeapTrimmer:
    """Hands freed heap memory back to the operating system (glibc's ``malloc_trim``) once the
    resident memory has grown by ``slack`` bytes since the last time (nothing where there is
    no glibc or no ``/proc``).

    Batches of ever-different shapes fragment glibc's heap: the memory in use stays flat
    while the free but retained part grows, so without trimming the main process's resident
    memory creeps up with the molecules read. A trim hands back every free page, including
    those the next batches reuse, which then come back as page faults: trimming after every
    batch costs a large share of the main process's time. Trimming once the memory grew by
    ``slack`` since the last trim bounds the memory at a fraction of that cost (measured:
    docs/results/code-notes.md).
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
    targets: int | None = None,
    trees: TreesBeside | None = None,
) -> Iterator[Prediction]:
    """One window's predictions; with ``targets`` (the models output ``[B, T + D]``,
    :class:`~graphormer_urpe.inference.embeddings.WithHeadInput`) the last ``D`` values of
    each member are the row's ``embedding``, joined across members; with ``trees``, each
    member's predictions blended with its trees head's."""
    out = None  # [K, W, T] (or [K, W, T + D] with targets), in window order
    if graphs is not None:
        for take in size_order(graphs.num_nodes, batch_size):
            taken = graphs.take(take)
            batch = collator(taken)
            if forwards[0].cycle.backend is None:  # eager: one copy for every member
                batch = batch.to(forwards[0].cycle.device, non_blocking=True)
            part = torch.stack([forward(batch).cpu() for forward in forwards])
            if trees is not None:
                part = trees(batch, taken.tree_x, part)
            if out is None:
                out = part.new_empty(part.shape[0], len(graphs), part.shape[2])
            out[:, torch.from_numpy(take)] = part
            trim_heap()
    emb = None  # [K, W, D]
    if targets is not None and out is not None:
        out, emb = out[..., :targets], out[..., targets:]
    k = 0
    for r in rows:
        if r.error is not None:
            yield Prediction(r.index, r.smiles, None, r.error)
            continue
        assert out is not None
        e = None if emb is None else emb[:, k].reshape(-1)
        if len(forwards) == 1:
            yield Prediction(r.index, r.smiles, out[0, k], None, domain=r.domain, embedding=e)
        else:
            values = out[:, k].mean(dim=0)
            yield Prediction(r.index, r.smiles, values, None, out[:, k], r.domain, embedding=e)
        k += 1


class Featurizing(NamedTuple):
    """What featurising SMILES for a model takes: its featuriser, its hops of path
    features, its molecule features' record, its training-domain record and whether it has
    a trees head. Picklable, so that a process of its own (a worker, a Ray task) can
    featurise for the model."""

    featurizer: str
    hops: int
    mol_features: dict | None = None
    domain: DomainRecord | None = None
    trees: tuple[str, ...] | None = None
    """The trees head's count fingerprints (``None``: no trees head)."""

    @classmethod
    def of(cls, model: LoadedModel, similarity: bool = True) -> Featurizing:
        """What ``model`` reads (an ensemble's first member: they read the same); without
        ``similarity``, no search of the nearest training fingerprint."""
        domain = model.domain
        if domain is not None and not similarity:
            domain = replace(domain, fingerprints=None)
        hops = model.model.config.multi_hop_max_dist
        trees = None if model.trees is None else model.trees.fingerprints
        return cls(model.featurizer, hops, model.mol_features, domain, trees)

    def __call__(self, part: list[str], first: int = 0) -> _Chunk:
        """The chunk ``part`` (rows ``first``, ``first + 1``, ...) featurised (in a worker
        process, or this one): its graphs with their Graphormer features, and their molecule
        features where the model was trained with them (``mol_features``: the checkpoint's
        record), compared with the training record ``domain`` where there is one; with
        ``trees``, the trees head's descriptors and fingerprints too (``tree_x``, computed
        with the molecule features from one pass of the descriptors)."""
        from ...datasets.mol_features import mol_features_of_smiles
        from ...datasets.store import featurize_chunk, flat_graphs, with_pointers

        domain = self.domain
        mols = [] if domain is not None and domain.fingerprints is not None else None
        zeros = np.zeros((len(part), 1))
        arrays, failures, _ = featurize_chunk(part, zeros, first, self.featurizer, mols=mols)
        errors = {f.index: f.reason for f in failures}
        valid = len(arrays["num_nodes"])
        flat = checked = None
        if valid and domain is not None:
            checked = domain.check(arrays, mols)
        if valid:
            flat, _ = flat_graphs(with_pointers(arrays), range(valid), self.hops)
            flat.y = None
            kept = [s for i, s in enumerate(part, start=first) if i not in errors]
            raw = None
            if self.trees is not None:
                from ..trees import tree_chunk_inputs

                flat.tree_x, raw = tree_chunk_inputs(kept, self.trees)  # [valid, F], [valid, 202]
            if self.mol_features is not None:
                flat.mol_x = mol_features_of_smiles(kept, self.mol_features, raw)  # [valid, K]
        return _Chunk(first, part, flat, errors, checked)


class StreamModel:
    """The model(s) of a stream with what feeds them: featurising a chunk of SMILES as the
    checkpoint reads molecules, and predicting featurised chunks window by window.

    :func:`iter_predictions` runs one in this process; the Ray engine
    (:mod:`~graphormer_urpe.inference.engines.ray.predictor`) runs one in each actor, so both give a
    row the same columns from the same code.

    Args:
        models: the model, or an ensemble's members (see :func:`iter_predictions`).
        batch_size: valid molecules per model batch.
        similarity: search each molecule's nearest training fingerprint.
        embeddings: give each row the vector the head reads.
        trim_slack: bytes the resident memory may grow by before freed heap memory is handed
            back (default 256 MiB; :class:`_HeapTrimmer`); a server, whose many small batches
            run for days, hands it back sooner.
    """

    def __init__(
        self,
        models: list[LoadedModel],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        similarity: bool = True,
        embeddings: bool = False,
        trim_slack: int = 256 * 2**20,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        loaded = models[0]
        if any(m.mol_features != loaded.mol_features for m in models):
            raise ValueError("the ensemble's members were trained with different molecule features")
        for m in models:
            m.model.eval()
        model_config = loaded.model.config
        precision = Precision(loaded.config.precision, loaded.device)
        # on one GPU, static batches and forward passes captured per batch shape
        backend = default_backend(loaded.device)
        static = StaticShapes(batch_size, model_config.multi_hop_max_dist) if backend else None
        self.collator = GraphormerCollator(
            model_config.multi_hop_max_dist, model_config.spatial_pos_max, static=static
        )
        autocast = lambda: precision.autocast(backend is None)  # noqa: E731
        nets = [WithHeadInput(m.model) if embeddings else m.model for m in models]
        self.forwards = [CapturedForward(net, autocast, loaded.device, backend) for net in nets]
        self.trees = None  # the members' trees heads, where they have them
        if any(m.trees is not None for m in models):
            if not all(m.trees is not None for m in models):
                raise ValueError("some of the ensemble's members have a trees head, some not")
            if len({m.trees.fingerprints for m in models}) > 1:  # type: ignore[union-attr]
                raise ValueError(
                    "the ensemble's members' trees read different fingerprints (trees kept "
                    "before and after Avalon and ErG were added): train the older members again"
                )
            self.trees = TreesBeside(
                [m.trees for m in models],  # type: ignore[misc]
                [m.embedder for m in models],
                lambda net: CapturedForward(net, autocast, loaded.device, backend),
            )
        self.targets = model_config.num_targets if embeddings else None
        self.batch_size = batch_size
        # an ensemble's members read the same and record the same training split
        self.featurizing = Featurizing.of(loaded, similarity)
        self.trim_heap = _HeapTrimmer(trim_slack)

    def featurize(self, part: list[str], first: int = 0) -> _Chunk:
        """The chunk of SMILES ``part`` (rows ``first``, ``first + 1``, ...) featurised for
        these models, in this process."""
        return self.featurizing(part, first)

    def chunks(self, smiles: Iterable[str], workers: int, chunk_size: int) -> Iterator[_Chunk]:
        """Every chunk of ``smiles`` featurised, in input order, by ``workers`` processes."""
        return _featurized(smiles, self.featurizing, workers, chunk_size)

    def predict(
        self, chunks: Iterable[_Chunk], done: Callable[[int], object] | None = None
    ) -> Iterator[Prediction]:
        """One :class:`Prediction` per row of ``chunks`` (consecutive, in input order), as
        each window of ``SORT_WINDOW * batch_size`` valid molecules is done; ``done(rows)``
        after each window."""
        for rows, graphs in _windows(chunks, SORT_WINDOW * self.batch_size):
            yield from _predict_window(
                self.forwards,
                self.collator,
                rows,
                graphs,
                self.batch_size,
                self.trim_heap,
                self.targets,
                self.trees,
            )
            if done is not None:
                done(len(rows))


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
    embeddings: bool = False,
) -> Iterator[Prediction]:
    """Predict every SMILES of ``smiles`` (any iterable, read lazily), yielding one
    :class:`Prediction` per input row in input order as soon as its batch is done.

    Args:
        model: a checkpoint path, an ensemble folder (``train --ensemble``), a
            :func:`~graphormer_urpe.inference.loading.load_model` result or a list of them (an
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
        embeddings: also give each row the graph-level vector its head reads
            (:attr:`Prediction.embedding`; :mod:`~graphormer_urpe.inference.embeddings`),
            from the same forward pass.
    """
    for name, value, low in (("batch_size", batch_size, 1), ("chunk_size", chunk_size, 1)):
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    stream = StreamModel(
        loaded_models(model, device),
        batch_size=batch_size,
        similarity=similarity,
        embeddings=embeddings,
    )
    chunks = stream.chunks(smiles, workers, chunk_size)
    # disable=None: drawn on a terminal only, never into a log file
    with tqdm(desc="predict", unit="mol", disable=None if progress else True, smoothing=0.1) as bar:
        yield from stream.predict(chunks, bar.update)


def loaded_models(
    model: LoadedModel | list[LoadedModel] | str | Path, device: str = "auto"
) -> list[LoadedModel]:
    """The models ``model`` names: itself as a list, or those of a checkpoint path or an
    ensemble folder loaded on ``device``."""
    if isinstance(model, LoadedModel):
        return [model]
    if isinstance(model, list):
        return model
    return load_models(model, device)


def predict_smiles(
    path: str | Path | LoadedModel,
    smiles: Iterable[str],
    device: str = "auto",
    batch_size: int = 256,
    progress: bool = True,
    workers: int | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, list[str | None]]:
    """Predict every SMILES; invalid ones are reported and get NaN predictions.

    The in-memory form of :func:`iter_predictions` (the one
    code path), which streams any number of SMILES; ``workers`` and ``chunk_size`` default
    to its defaults.

    Returns:
        ``(pred [len(smiles), T], errors)`` where ``errors[i]`` is ``None`` or the reason row
        ``i`` could not be featurised.
    """
    options = {
        "workers": DEFAULT_WORKERS if workers is None else workers,
        "chunk_size": DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size,
    }
    loaded = path if isinstance(path, LoadedModel) else load_model(path, device)
    rows: list[torch.Tensor | None] = []
    errors: list[str | None] = []
    results = iter_predictions(loaded, smiles, batch_size=batch_size, progress=progress, **options)
    for p in results:
        if p.error is not None:
            log.warning("row %d: %s", p.index, p.error)
        rows.append(p.values)
        errors.append(p.error)
    out = torch.full((len(rows), loaded.model.config.num_targets), math.nan)
    keep = [i for i, r in enumerate(rows) if r is not None]
    if keep:
        out[torch.tensor(keep)] = torch.stack([rows[i] for i in keep])
    return out, errors
