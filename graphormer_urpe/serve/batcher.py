r"""Requests that arrive together, predicted together: a few forward passes for many small requests.

::

    request ─submit─▶ queue ──gatherer thread, one batch ahead of the model: every request
      waiting (while the model is busy: and those that come within WAIT), up to max_molecules──▶
      featurised (worker processes, parts of at most PART; a few molecules: in this thread)
      ──predictor thread: StreamModel.predict, part by part as each comes──▶ each request's
      own rows, as soon as its part is done

The gatherer keeps one batch ahead of the model: while the model predicts a batch, the next
one is gathered and featurised, and every request that comes in meanwhile waits for the batch
after it. Under load the batches grow by themselves: many clients keep about two batches in
turn, larger than those of a gatherer that took every request as soon as it came (a forward
pass has a fixed cost, so larger batches cost less CPU per molecule; measured:
docs/results/serve.md).
While the model is busy the gatherer also waits up to :data:`WAIT` for company (the clients
whose answers just went out send their next requests), up to ``max_molecules``; a lone request
goes through at once (no waiting for company). Featurising the next batch overlaps the
model's pass over the current one, as in streaming ``predict``
(:mod:`~graphormer_urpe.inference.engines.stream`), whose code does both.

A request whose caller gave up (a timeout, a client that went away) is cancelled: it is
skipped if not yet featurised, and its result is dropped otherwise.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult

from ..inference.engines.predict_io import Prediction
from ..inference.engines.stream import Featurizing, StreamModel
from ..inference.engines.workers import featurising_pool

__all__ = ["Batcher"]

log = logging.getLogger(__name__)

POOL_FROM = 16
"""Batches of fewer molecules are featurised in the gatherer's thread while the model is idle:
sending them to a worker process costs more time than it saves. While the model is busy they
go to the workers too, which leave the model's process to the model."""

WAIT = 0.005
"""Seconds the gatherer waits for more requests while the model is busy (its batch could not
start sooner anyway); a lone request never waits. Its effect on batch sizes is measured in
docs/results/serve.md."""

PART = 48
"""The most molecules a worker process featurises at a time. The model predicts each part as
it comes, so featurising the rest of a batch overlaps the model's pass over its first parts,
and a request is answered as soon as its own part is done (its caller sends the next one
sooner). Measured against 32, 64 and whole batches: docs/results/serve.md."""

_FEATURIZING: Featurizing | None = None  # a worker process's featuriser (set by _install)


def _install(featurizing: Featurizing) -> None:
    """Pool initializer: the featuriser every task of this worker uses."""
    global _FEATURIZING
    _FEATURIZING = featurizing


def _featurize(part: list[str], first: int):
    """One part of a batch, featurised in a worker process."""
    assert _FEATURIZING is not None
    return _FEATURIZING(part, first)


@dataclass
class _Request:
    smiles: list[str]
    future: Future = field(default_factory=Future)


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
    """Predicts the SMILES of concurrent requests in shared batches (see the module's text).

    Args:
        stream: the model(s) and what feeds them.
        workers: featurising processes (0: in the gatherer's thread).
        max_molecules: the most molecules gathered into one batch (a request larger than
            this is a batch of its own).
        start: start the threads now (else: :meth:`start`).
        wait: seconds to wait for more requests while the model is busy (:data:`WAIT`).
        part: the most molecules a worker featurises at a time (:data:`PART`).
    """

    def __init__(
        self,
        stream: StreamModel,
        workers: int = 1,
        max_molecules: int = 1024,
        start: bool = True,
        wait: float = WAIT,
        part: int = PART,
    ) -> None:
        self.stream = stream
        self.part = part
        self.workers = workers
        self.max_molecules = max_molecules
        self.wait = wait
        self._ahead = threading.Semaphore(1)  # batches gathered and not yet taken by the model
        self._busy = threading.Event()  # the model is predicting a batch
        self._requests: queue.Queue[_Request | None] = queue.Queue()
        self._featurized: queue.Queue = queue.Queue()
        self._pool = None
        if workers > 0:
            self._pool = featurising_pool(workers, _install, (stream.featurizing,))
        self.batches = 0
        """Batches predicted so far."""
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
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None

    # ----------------------------------------------------------------------------------

    def _take(self) -> list[_Request] | None:
        """The next batch: the first waiting request and those behind it, up to
        ``max_molecules``; ``None`` once closed."""
        first = self._requests.get()
        if first is None:
            return None
        batch, count = [first], len(first.smiles)
        deadline = time.monotonic() + self.wait
        while count < self.max_molecules:
            try:
                nxt = self._requests.get_nowait()
            except queue.Empty:
                left = deadline - time.monotonic()
                if left <= 0 or not self._busy.is_set():
                    break
                try:  # the model is busy: wait a little for company
                    nxt = self._requests.get(timeout=min(left, 0.001))
                except queue.Empty:
                    continue
            if nxt is None:  # closing: this batch first
                self._requests.put(None)
                break
            batch.append(nxt)
            count += len(nxt.smiles)
        return [r for r in batch if r.future.set_running_or_notify_cancel()]

    def _gather(self) -> None:
        while True:
            self._ahead.acquire()  # one batch ahead of the model at most
            batch = self._take()
            if batch is None:
                break
            if not batch:
                self._ahead.release()
                continue
            smiles = [s for r in batch for s in r.smiles]
            try:
                chunks = self._featurize(smiles)
            except Exception as exc:  # a broken featuriser: each caller hears of it
                log.exception("featurising a batch of %d molecules failed", len(smiles))
                for r in batch:
                    _settle(r.future, error=exc)
                self._ahead.release()
                continue
            self._featurized.put((batch, chunks))
        self._featurized.put(None)

    def _featurize(self, smiles: list[str]) -> list:
        """The batch's chunks (consecutive rows from 0): featurised here (no workers, or a
        few molecules for an idle model), or parts of at most ``part`` molecules in flight in
        the worker processes (their ``AsyncResult``\\ s), which the model takes one by one
        as they come."""
        if self._pool is None or (len(smiles) < POOL_FROM and not self._busy.is_set()):
            return [self.stream.featurize(smiles, 0)]
        size = min(-(-len(smiles) // self.workers), self.part)
        return [
            self._pool.apply_async(_featurize, (smiles[i : i + size], i))
            for i in range(0, len(smiles), size)
        ]

    def _predict(self) -> None:
        while (item := self._featurized.get()) is not None:
            self._busy.set()
            self._ahead.release()  # the gatherer may gather the next batch meanwhile
            batch, chunks = item
            try:
                self._predict_batch(batch, chunks)
            finally:
                self._busy.clear()
            self.batches += 1

    def _predict_batch(self, batch: list[_Request], chunks: list) -> None:
        """Predict ``batch`` chunk by chunk, as each is featurised; every request is answered
        once its last row is predicted (its caller sends the next one while the rest of the
        batch is predicted)."""
        rows: list[Prediction] = []
        waiting, start = list(batch), 0  # requests not yet answered; the first one's row
        try:
            for chunk in chunks:
                chunk = chunk.get() if isinstance(chunk, AsyncResult) else chunk
                rows.extend(self.stream.predict([chunk]))
                while waiting and start + len(waiting[0].smiles) <= len(rows):
                    r = waiting.pop(0)
                    mine = rows[start : start + len(r.smiles)]
                    _settle(r.future, [p._replace(index=p.index - start) for p in mine])
                    start += len(r.smiles)
        except Exception as exc:
            log.exception("predicting a batch of %d requests failed", len(batch))
            for r in waiting:
                _settle(r.future, error=exc)
