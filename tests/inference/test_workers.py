"""The featurising processes of streaming ``predict``: their result pipe, their priority and
their signals (how they end with the command: ``tests/cli/test_predict_signals.py``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from graphormer_urpe.inference.engines import workers


@pytest.mark.skipif(not hasattr(workers.fcntl, "F_GETPIPE_SZ"), reason="needs Linux pipes")
def test_the_result_pipe_is_widened():
    max_size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    with workers.mp_context().Pool(1) as pool:
        fd = pool._outqueue._reader.fileno()
        before = workers.fcntl.fcntl(fd, workers.fcntl.F_GETPIPE_SZ)
        workers.widen_result_pipe(pool)
        after = workers.fcntl.fcntl(fd, workers.fcntl.F_GETPIPE_SZ)
        assert pool.apply(len, ("abc",)) == 3  # results still come back
    if max_size >= workers.PIPE_BYTES:
        assert after == workers.PIPE_BYTES
    else:  # refused, unless the process may exceed the system's limit (root)
        assert after in (before, workers.PIPE_BYTES)


@pytest.mark.skipif(not hasattr(os, "nice"), reason="needs Unix priorities")
def test_featurising_workers_run_at_a_lower_priority():
    with workers.featurising_pool(1) as pool:
        niceness = pool.apply(os.nice, (0,))
        assert pool.apply(len, ("abc",)) == 3
    assert niceness == min(os.nice(0) + workers.WORKER_NICENESS, 19)


def _handlers() -> tuple[int, int]:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_workers_leave_ctrl_c_to_the_parent_and_die_of_sigterm():
    old = signal.signal(signal.SIGTERM, lambda *a: None)  # a parent that handles SIGTERM
    try:
        with workers.featurising_pool(1) as pool:
            assert pool.apply(_handlers) == (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGTERM, old)
