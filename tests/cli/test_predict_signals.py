"""``graphormer-urpe predict`` stopped by a signal, and its featurising processes.

The tests run ``graphormer-urpe predict`` as a child process on a long ``.smi`` file,
stop it once it has written some rows, and check its exit status, its last line, that the
output is a prefix of the input's rows, and that its featurising processes are gone within a
second of the command's end.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import tiny_checkpoint

MOLECULES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "C1CCCCC1N", "OCC(=O)[O-]"]
LINUX = sys.platform.startswith("linux")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, waiting to be reaped, has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.fixture(scope="module")
def long_input(tmp_path_factory) -> tuple[Path, Path]:
    """A checkpoint and a ``.smi`` file of 400,000 named rows (far more than a test waits
    for)."""
    folder = tmp_path_factory.mktemp("signals")
    ckpt = tiny_checkpoint(folder / "best.pt", "ogb")
    lines = (f"{MOLECULES[i % len(MOLECULES)]} row{i}\n" for i in range(400_000))
    (folder / "in.smi").write_text("".join(lines))
    return ckpt, folder / "in.smi"


def _cpu_ticks(pid: int) -> int:
    """Clock ticks of CPU process ``pid`` has used (user + system; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _start(
    ckpt: Path, smi: Path, out: Path, chunk: int = 2000, rows: bool = True
) -> subprocess.Popen:
    """``predict`` with 2 workers, once its workers run and (``rows``) it has written rows, or
    else once each worker has spent 0.2 s of CPU on its first chunk; ``chunk`` SMILES per task
    (2,000 of these: about 0.2 s of featurising)."""
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "predict", "--checkpoint", str(ckpt)]
    cmd += ["--input", str(smi), "--output", str(out), "--no-progress", "--workers", "2"]
    cmd += ["--chunk-size", str(chunk), "--batch-size", "64", "--threads", "1"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        pool = _children(proc.pid)
        if len(pool) >= 2 and (
            out.exists() and out.stat().st_size > 2000
            if rows
            else all(_cpu_ticks(pid) >= 0.2 * os.sysconf("SC_CLK_TCK") for pid in pool)
        ):
            return proc
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"predict did not start: {proc.communicate()[1]}")


def _wait_for_the_end(pool: list[int], seconds: float = 1.0) -> None:
    """Fail unless every process of ``pool`` ends within ``seconds`` from now."""
    ended = time.monotonic()
    while any(_alive(pid) for pid in pool) and time.monotonic() - ended < seconds:
        time.sleep(0.01)
    alive = [pid for pid in pool if _alive(pid)]
    assert not alive, f"workers {alive} outlived predict by {seconds} s"


def _prefix_rows(out: Path, smi: Path) -> int:
    """The rows of ``out``, checked to be the first rows of ``smi``, in order, with names."""
    rows = list(csv.reader(out.open()))
    assert rows[0][:2] == ["smiles", "name"]
    with smi.open() as fh:
        for row, line in zip(rows[1:], fh, strict=False):
            assert row[:2] == line.split()
            assert row[2] != ""  # predicted
    return len(rows) - 1


@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_predict_says_how_many_rows_it_wrote_and_its_workers_end(
    long_input, tmp_path, sig
):
    ckpt, smi = long_input
    out = tmp_path / "out.csv"
    proc = _start(ckpt, smi, out)
    pool = _children(proc.pid)
    proc.send_signal(sig)
    proc.wait(timeout=60)  # not communicate(): the workers hold its standard error too
    _wait_for_the_end(pool)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    written = _prefix_rows(out, smi)
    name = signal.Signals(sig).name
    last = err.strip().splitlines()[-1]
    assert last == (
        f"graphormer-urpe: {name}: stopped after writing {written} rows to {out} "
        f"(the input's first {written}, a valid CSV)"
    )
    assert "Traceback" not in err and "ForkPoolWorker" not in err


@pytest.mark.skipif(not LINUX, reason="the kernel's parent-death signal is Linux's")
def test_workers_end_when_predict_is_killed(long_input, tmp_path):
    ckpt, smi = long_input
    # chunks of 50,000: without the parent-death signal, orphaned workers finish the ones they
    # hold (measured: 5.5 s); killed while both are busy with their first one
    proc = _start(ckpt, smi, tmp_path / "out.csv", chunk=50_000, rows=False)
    pool = _children(proc.pid)
    proc.kill()  # SIGKILL: no handler runs, the kernel ends the workers
    proc.wait(timeout=60)
    _wait_for_the_end(pool)
    proc.communicate(timeout=60)
