"""A featurising process of the server: parts of SMILES in, featurised chunks out, in order.

The server sends each part down a pipe of its own and a reader thread takes the chunks back,
so a worker is known to be free the moment its last chunk arrives, with no pool machinery
between the two (a pool's handler threads wake for every task, which the server's many small
parts would pay for). A worker that dies (a crash in a native library, a ``kill``) fails the
parts it held and is started again with the next part, in the thread that sends the parts: a
worker ends with the thread that started it (``end_with_parent``), so the reader, which ends
with the worker, never starts one.

Example::

    worker = FeaturizingWorker(stream.featurizing)
    chunk = worker.submit(["CCO", "c1ccccc1"], 0).result()
    worker.close()
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection

from ..inference.engines.stream import Featurizing
from ..inference.engines.workers import mp_context, widen_pipe, worker_start

__all__ = ["FeaturizingWorker", "WorkerDied"]

log = logging.getLogger(__name__)


class WorkerDied(RuntimeError):
    """The featurising process ended while it held a part."""


def _featurize_parts(
    parent: int, featurizing: Featurizing, tasks: Connection, results: Connection
) -> None:
    """The worker process: featurise each ``(part, first)`` it receives until ``None``."""
    worker_start(parent)
    while (task := tasks.recv()) is not None:
        try:
            out = (True, featurizing(*task))
        except Exception as exc:
            out = (False, exc)
        try:
            results.send(out)
        except Exception as exc:  # an exception that does not pickle: its text goes back
            results.send((False, RuntimeError(f"{type(out[1]).__name__}: {out[1]} ({exc})")))


class FeaturizingWorker:
    """One featurising process and the thread that reads its chunks. Create it, and submit to
    it, from threads that live as long as it does: a process ends with the thread that
    started it.

    Args:
        featurizing: what featurising a part takes (:class:`Featurizing`).
        done: called (in the reader thread) after each part's future is settled.
    """

    def __init__(self, featurizing: Featurizing, done: Callable[[], object] = lambda: None) -> None:
        self.featurizing = featurizing
        self.done = done
        self._pending: deque[Future] = deque()  # the parts sent and not yet back, in order
        self._lock = threading.Lock()  # sending a part and starting a process
        self._closing = False
        self._alive = False
        self._start()

    def _start(self) -> None:
        ctx = mp_context()
        tasks_in, self._tasks = ctx.Pipe(duplex=False)
        self._results, results_out = ctx.Pipe(duplex=False)
        widen_pipe(self._results)
        args = (os.getpid(), self.featurizing, tasks_in, results_out)
        self.process = ctx.Process(target=_featurize_parts, args=args, daemon=True)
        self.process.start()
        tasks_in.close()
        results_out.close()
        reader = threading.Thread(target=self._read, args=(self._results,), daemon=True)
        reader.name = "serve-featurized"
        reader.start()
        self._alive = True

    @property
    def busy(self) -> bool:
        """Whether a part is in the process (sent and not yet back)."""
        return bool(self._pending)

    def submit(self, part: list[str], first: int = 0) -> Future:
        """A future of the chunk of ``part`` (rows ``first``, ``first + 1``, ...); a process
        that ended is started again first."""
        future: Future = Future()
        with self._lock:
            if not self._alive:
                self._tasks.close()
                self._start()
            self._pending.append(future)
            try:
                self._tasks.send((part, first))
            except OSError:  # the process just died: its reader fails what it held
                pass
        return future

    def _read(self, results: Connection) -> None:
        while True:
            try:
                ok, value = results.recv()
            except (EOFError, OSError):
                break
            future = self._pending.popleft()
            future.set_result(value) if ok else future.set_exception(value)
            self.done()
        with self._lock:  # the process ended: fail what it held
            lost = list(self._pending)
            self._pending.clear()
            self._alive = False
            if not self._closing:
                self.process.join(timeout=5)
                log.error("a featurising process ended (exit code %s)", self.process.exitcode)
        for future in lost:
            future.set_exception(WorkerDied("the featurising process ended"))
            self.done()
        results.close()

    def close(self) -> None:
        """Stop the process (parts not yet back are failed)."""
        with self._lock:
            self._closing = True
            try:
                self._tasks.send(None)
            except OSError:
                pass
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        self._tasks.close()
