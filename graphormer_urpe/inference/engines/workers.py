"""The featurising processes of streaming ``predict``: forked, at a lower priority, ending
with the process that started them.

A pool's worker runs :func:`worker_start` first: it lowers its priority
(:func:`lower_priority`), asks the kernel to end it when its parent ends
(:func:`end_with_parent`: a ``kill -9`` or a crash of ``predict`` leaves no worker behind) and
leaves Ctrl-C to its parent, which stops the pool (a terminal's Ctrl-C reaches the whole
process group; a worker that took it would print a traceback of its own).

Example::

    with featurising_pool(2) as pool:      # Pool.__exit__ terminates the workers
        chunk = pool.apply_async(featurize, (smiles,)).get()
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.pool
import os
import signal
import sys
from collections.abc import Callable

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Unix
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PIPE_BYTES",
    "WORKER_NICENESS",
    "end_with_parent",
    "featurising_pool",
    "lower_priority",
    "mp_context",
    "widen_pipe",
    "widen_result_pipe",
    "worker_start",
]


def featurising_pool(
    workers: int, setup: Callable[..., object] | None = None, setup_args: tuple = ()
) -> multiprocessing.pool.Pool:
    """``workers`` featurising processes (:func:`worker_start`, then ``setup(*setup_args)``
    where given: what every task of the pool needs, sent once per process rather than with
    each task), with a wide result pipe."""
    initargs = (os.getpid(), setup, setup_args)
    pool = mp_context().Pool(workers, initializer=worker_start, initargs=initargs)
    widen_result_pipe(pool)
    return pool


def worker_start(
    parent: int, setup: Callable[..., object] | None = None, setup_args: tuple = ()
) -> None:
    """A featurising process's start: a lower priority, an end with ``parent`` (its pid), no
    Ctrl-C of its own, and SIGTERM's default action (forked from a parent that may handle it,
    e.g. ``predict``, which turns it into an orderly stop); then ``setup(*setup_args)``."""
    lower_priority()
    end_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if setup is not None:
        setup(*setup_args)


PR_SET_PDEATHSIG = 1
"""Linux ``prctl`` option: the signal a process gets when the thread that forked it ends."""


def end_with_parent(parent: int) -> None:
    """Have the kernel kill this process (SIGKILL) when ``parent`` ends, where the system
    can (Linux's ``PR_SET_PDEATHSIG``; nothing elsewhere). A parent that ended before the
    request was made is caught by comparing the parent's pid afterwards."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AttributeError, OSError):  # pragma: no cover - no prctl in this libc
        return
    if os.getppid() != parent:  # the parent ended before the request
        os._exit(1)


def mp_context() -> multiprocessing.context.BaseContext:
    # fork starts workers in milliseconds where it is available (Linux); spawn elsewhere
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")  # pragma: no cover


WORKER_NICENESS = 5
"""How much lower the featurising processes' scheduling priority is than the calling
process's (Unix ``nice``; see :func:`lower_priority`)."""


def lower_priority() -> None:
    """Run this process :data:`WORKER_NICENESS` steps nicer (pool initializer; nothing where
    the system has no ``nice``).

    The process that runs the model is the pipeline's one consumer. Where the cores are all
    taken (2 cores: the model's thread and 2 workers), an equal share lets the workers run
    ahead of it until every submitted chunk is done; then they wait, and a core idles while
    the model catches up. At a lower priority the workers take the time the model leaves
    (measured: docs/results/predict.md), and where there are cores to spare priority changes
    nothing.
    """
    nice = getattr(os, "nice", None)
    if nice is not None:
        try:
            nice(WORKER_NICENESS)
        except OSError:  # pragma: no cover - raising one's niceness is always allowed
            pass


PIPE_BYTES = 1 << 20
"""Buffer of the pipe that brings the workers' chunks back (Linux; 64 KiB by default)."""


def widen_result_pipe(pool: multiprocessing.pool.Pool) -> None:
    """Give the pipe that carries ``pool``'s results a :data:`PIPE_BYTES` buffer
    (:func:`widen_pipe`).

    A chunk of molecules comes back as megabytes. Python reads a message from a pipe one
    buffer at a time, allocating the whole remainder for every read, so a wider pipe costs
    the process that runs the model less CPU per chunk (measured: docs/results/predict.md).
    """
    reader = getattr(getattr(pool, "_outqueue", None), "_reader", None)  # CPython's Pool
    if reader is not None:
        widen_pipe(reader)


def widen_pipe(conn: multiprocessing.connection.Connection) -> None:
    """Give the pipe behind ``conn`` a :data:`PIPE_BYTES` buffer, where the operating system
    allows (Linux's ``F_SETPIPE_SZ``; nothing elsewhere, or above the system's limit)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if set_size is None:
        return
    try:
        fcntl.fcntl(conn.fileno(), set_size, PIPE_BYTES)
    except OSError:  # above the system's pipe-max-size: keep the default
        pass
