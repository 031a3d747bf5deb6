r"""Requests that arrive together, predicted together: a few forward passes for many small requests.

::

    request ─submit─▶ queue ──gatherer thread: every request waiting, up to max_molecules, as
      soon as a featurising worker is free──▶ a batch, cut into parts of at most PART
      molecules (a batch of more than one part: in order of SMILES length), featurised by the
      worker processes (:class:`~.worker.FeaturizingWorker`; a few molecules for an idle
      server: in this thread)
      ──predictor thread: the next part, with the parts behind it that are ready (up to PART
      molecules more), in one StreamModel.predict──▶ each request's own rows, as soon as the
      last part of its batch is predicted

The two stages run side by side and never wait for each other while there is work: a worker
takes the next part as soon as it is done with one, however far behind the model is, and the
model takes every part that is ready as soon as it is done with a pass. Under load the
batches grow by themselves: the requests that come while a worker featurises wait for the
next batch, and larger parts and passes cost less CPU per molecule (a call and a forward
pass have a fixed cost; docs/results/serve.md). A forward pass pads every molecule to its
largest, so a batch that needs several parts is cut in order of SMILES length (a measure of
a molecule's size that needs no parsing): each pass then holds molecules of about one size,
and the batch's rows are put back in the order gathered once its last part is predicted. A
lone request goes through at once. At most :data:`DEPTH` parts are gathered and not yet
taken by the model, which bounds the memory of featurised molecules when requests come
faster than the model predicts them.

A request whose caller gave up (a timeout, a client that went away) is cancelled: it is
skipped if not yet gathered, and its result is dropped otherwise.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import NamedTuple

from ..inference.engines.stream import StreamModel
from .worker import FeaturizingWorker

__all__ = ["Batcher"]

log = logging.getLogger(__name__)

WORKERS_FROM = 16
"""Requests of fewer molecules, gathered while the model and the workers are idle, are
featurised in the gatherer's thread: sending them to a worker process costs more time than it
saves. Otherwise they go to the workers, which leave the model's process to the model."""

PART = 48
"""The most molecules a worker featurises at a time, and the most the model takes into one pass
beyond its first part: smaller parts keep both stages busy on the few requests a server holds
at a time, larger ones cost less per molecule (the sizes measured: docs/results/serve.md)."""

DEPTH = 8
"""The most parts gathered and not yet taken by the model (featurised or being featurised)."""


@dataclass
class _Request:
    smiles: list[str]
    future: Future = field(default_factory=Future)


class _Part(NamedTuple):
    """Consecutive SMILES of a batch (in the order gathered, or of SMILES length)."""

    requests: list[_Request]  # the batch's requests (its first part only)
    size: int  # its SMILES
    chunk: object  # its featurised chunk, a Future of it, or why featurising failed
    last: bool  # the batch's last part
    order: list[int] | None = None  # the last part of a batch cut by length: the gathered
    # position of each of the batch's SMILES, in the order cut


def _settle(future: Future, result=None, error: BaseException | None = None) -> None:
    """Give ``future`` its result (or error) unless its caller cancelled it meanwhile."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # cancelled: nobody waits for it any more
        pass


class Batcher:
    """Predicts the SMILES of concurrent requests in shared parts (see the module's text).

    Args:
        stream: the model(s) and what feeds them.
        workers: featurising processes (0: in the gatherer's thread).
        max_molecules: the most molecules gathered at a time (a request larger than this is
            gathered alone).
        start: start the threads now (else: :meth:`start`).
        part: the most molecules a worker featurises at a time (:data:`PART`).
    """

    def __init__(
        self,
        stream: StreamModel,
        workers: int = 1,
        max_molecules: int = 1024,
        start: bool = True,
        part: int = PART,
    ) -> None:
        self.stream = stream
        self.part = part
        self.workers = workers
        self.max_molecules = max_molecules
        self._free = threading.Semaphore(max(workers, 1))  # workers without a part
        self._room = threading.Semaphore(DEPTH)  # parts the model has not taken yet
        self._busy = threading.Event()  # the model is predicting
        self._requests: queue.Queue[_Request | None] = queue.Queue()
        self._parts: queue.Queue[_Part | None] = queue.Queue()
        free = self._free.release
        self._workers = [FeaturizingWorker(stream.featurizing, free) for _ in range(workers)]
        self.passes = 0
        """Forward passes so far."""
        self._threads = [
            threading.Thread(target=self._gather, name="serve-gather", daemon=True),
            threading.Thread(target=self._predict, name="serve-predict", daemon=True),
        ]
        if start:
            self.start()

    def start(self) -> None:
        """Start gathering and predicting (requests submitted before wait for this)."""
        for t in self._threads:
            t.start()

    def submit(self, smiles: list[str]) -> Future:
        """A future of ``smiles``' :class:`~graphormer_urpe.inference.engines.predict_io.Prediction`
        rows, in order (``index`` counted from 0 over ``smiles``)."""
        request = _Request(list(smiles))
        if not request.smiles:
            request.future.set_result([])
            return request.future
        self._requests.put(request)
        return request.future

    def close(self) -> None:
        """Stop the threads and the featurising processes (waiting requests are cancelled)."""
        self._requests.put(None)
        for t in self._threads:
            if t.is_alive():
                t.join(timeout=10)
        for w in self._workers:
            w.close()
        self._workers = []

    # ----------------------------------------------------------------------------------
    # Gathering and featurising

    def _take(self) -> list[_Request] | None:
        """The first waiting request and those behind it, up to ``max_molecules``; ``None``
        once closed."""
        first = self._requests.get()
        if first is None:
            return None
        batch, count = [first], len(first.smiles)
        while count < self.max_molecules and (nxt := _now(self._requests)) is not None:
            batch.append(nxt)
            count += len(nxt.smiles)
        return [r for r in batch if r.future.set_running_or_notify_cancel()]

    def _gather(self) -> None:
        while True:
            self._free.acquire()  # a worker is free: whatever waits now is its next part
            batch = self._take()
            if batch is None:
                break
            smiles = [s for r in batch for s in r.smiles]
            if not smiles:
                self._free.release()
                continue
            here = not self._workers or (len(smiles) < WORKERS_FROM and not self._busy.is_set())
            size = len(smiles) if not self._workers else min(len(smiles), self.part)
            order = None
            if size < len(smiles):  # several parts: each of molecules of about one size
                order = sorted(range(len(smiles)), key=lambda k: len(smiles[k]))
                smiles = [smiles[k] for k in order]
            for i in range(0, len(smiles), size):
                if i:
                    self._free.acquire()
                self._room.acquire()
                piece, last = smiles[i : i + size], i + size >= len(smiles)
                chunk = self._featurize_here(piece, i) if here else self._send(piece, i)
                part = _Part(
                    batch if i == 0 else [], len(piece), chunk, last, order if last else None
                )
                self._parts.put(part)
        self._parts.put(None)

    def _featurize_here(self, piece: list[str], first: int) -> object:
        try:
            return self.stream.featurize(piece, first)
        except Exception as exc:  # a broken featuriser: each caller hears of it
            log.exception("featurising %d molecules failed", len(piece))
            return exc
        finally:
            self._free.release()

    def _send(self, piece: list[str], first: int) -> Future:
        """``piece`` to a free worker (one is: its place was taken from ``_free``)."""
        worker = next((w for w in self._workers if not w.busy), self._workers[0])
        return worker.submit(piece, first)

    # ----------------------------------------------------------------------------------
    # Predicting

    def _predict(self) -> None:
        waiting: deque[_Request] = deque()  # gathered requests not yet answered, in order
        rows: list = []  # predicted rows of waiting[0] on (or why they could not be)
        batch: list = []  # predicted rows of the batch whose last part is still to come
        held: _Part | None = None  # a part taken from the queue before it was ready
        while True:
            first = held if held is not None else self._parts.get()
            if first is None:
                break
            parts, held = [first], None
            count = first.size  # with the parts behind it that are ready, up to part more
            while count < first.size + self.part and (nxt := _now(self._parts)) is not None:
                if not _ready(nxt.chunk):  # still being featurised: the next pass's first
                    held = nxt
                    break
                parts.append(nxt)
                count += nxt.size
            for p in parts:
                self._room.release()
                waiting.extend(p.requests)
            self._busy.set()
            try:
                predicted = iter(self._pass(parts))
            finally:
                self._busy.clear()
            self.passes += 1
            for p in parts:
                batch.extend(next(predicted) for _ in range(p.size))
                if p.last:
                    rows.extend(batch if p.order is None else _gathered(batch, p.order))
                    batch = []
            _answer(waiting, rows)

    def _pass(self, parts: list[_Part]) -> list:
        """One forward pass over ``parts``: a row per SMILES, in order (the exception for
        those of a part that could not be featurised, or of a pass that failed)."""
        chunks = []
        for p in parts:
            try:
                chunk = p.chunk.result() if isinstance(p.chunk, Future) else p.chunk
            except Exception as exc:
                log.exception("featurising %d molecules failed", p.size)
                chunk = exc
            chunks.append(chunk)
        featurized = [c for c in chunks if not isinstance(c, BaseException)]
        try:
            predicted = iter(self.stream.predict(featurized)) if featurized else iter(())
            out = []
            for p, c in zip(parts, chunks, strict=True):
                failed = isinstance(c, BaseException)
                out.extend([c] * p.size if failed else [next(predicted) for _ in range(p.size)])
            return out
        except Exception as exc:
            log.exception("predicting %d molecules failed", sum(p.size for p in parts))
            return [exc] * sum(p.size for p in parts)


def _now(items: queue.Queue):
    """The next item of ``items`` if one is there now, else ``None``; the closing mark
    (``None``) stays in the queue, after what came before it."""
    try:
        item = items.get_nowait()
    except queue.Empty:
        return None
    if item is None:
        items.put(None)
    return item


def _ready(chunk: object) -> bool:
    return not isinstance(chunk, Future) or chunk.done()


def _gathered(rows: list, order: list[int]) -> list:
    """``rows`` of a batch cut in ``order`` (the gathered position of each), put back in the
    order gathered."""
    out: list = [None] * len(rows)
    for row, k in zip(rows, order, strict=True):
        out[k] = row
    return out


def _answer(waiting: deque[_Request], rows: list) -> None:
    """Answer the waiting requests whose rows are all in ``rows`` (taking them out of both)."""
    while waiting and len(waiting[0].smiles) <= len(rows):
        r = waiting.popleft()
        n = len(r.smiles)
        mine, rows[:n] = rows[:n], []
        error = next((x for x in mine if isinstance(x, BaseException)), None)
        if error is not None:
            _settle(r.future, error=error)
        else:
            _settle(r.future, [p._replace(index=k) for k, p in enumerate(mine)])
