"""Fixtures the tests share: the 40-molecule CSV and a tiny training run on it (one per module),
copies of the shared data, one thread, a fresh store folder per test; the plain helpers they use
are in ``helpers.py``."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.helpers import (
    ROOT,
    SHARED_DATA,
    SMILES,
    FakeClock,
    domain_checkpoint,
    embedding_checkpoint,
    steady_probe,
    tiny_train_config,
)


@pytest.fixture(scope="module")
def embedding_ckpt(tmp_path_factory) -> Path:
    """A tiny untrained model, targets ``a`` and ``b`` (:func:`helpers.embedding_checkpoint`)."""
    return embedding_checkpoint(tmp_path_factory.mktemp("plain") / "best.pt")


@pytest.fixture(scope="module")
def domain_ckpt(tmp_path_factory) -> Path:
    """A tiny checkpoint with its training-domain record (:func:`helpers.domain_checkpoint`)."""
    return domain_checkpoint(tmp_path_factory.mktemp("domain") / "best.pt")


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """A CSV of the 40 molecules of ``SMILES`` with their heavy-atom counts (one per module)."""
    path = tmp_path_factory.mktemp("csv") / "mols.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms"])
        for s in SMILES:
            w.writerow([s, sum(ch.isalpha() and ch not in "lr" for ch in s)])
    return path


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A CSV of 120 small molecules (heavy-atom counts) and a short run on it."""
    from graphormer_urpe.training import train

    root = tmp_path_factory.mktemp("cal")
    smiles = [
        "C" * a + x + "C" * b for a in range(1, 9) for b in range(0, 5) for x in ("O", "N", "C(=O)")
    ]
    heavy = [sum(ch.isalpha() for ch in s) for s in smiles]
    pd.DataFrame({"smiles": smiles, "heavy_atoms": heavy}).to_csv(root / "data.csv", index=False)
    out = root / "run"
    train(tiny_train_config(root / "data.csv", root / "store", out), progress=False)
    return root, out


@pytest.fixture(scope="module")
def start_checkpoint(table, tmp_path_factory) -> Path:
    """A tiny trained checkpoint to start from (its graph token is the trees' input); one per
    module."""
    from graphormer_urpe.training import train

    base = tmp_path_factory.mktemp("start")
    train(tiny_train_config(table, base / "data", base / "run"), progress=False)
    return base / "run" / "best.pt"


@pytest.fixture
def steady_clock(monkeypatch) -> list[float]:
    """Time that machine load cannot move, for a command run in this process:
    ``time.perf_counter`` advances a microsecond per reading, and a run's measured costs are
    fixed sizes (:func:`~tests.helpers.steady_probe`) times the machine's load, the list's
    last value (append to make the next measurement slower)."""
    import functools
    import time

    from graphormer_urpe.training import run as training_run
    from graphormer_urpe.training.trainer import Trainer

    clock = FakeClock()
    load = [1.0]
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(
        training_run, "Trainer", functools.partial(Trainer, probe=steady_probe(load))
    )
    return load


@pytest.fixture
def shared_copy(tmp_path):
    """Copy a folder of the shared data into a temporary folder (the original is read-only)."""

    def _copy(rel: str) -> Path:
        src = SHARED_DATA / rel
        if not src.exists():
            pytest.skip(f"shared data {src} not available")
        dst = tmp_path / Path(rel).name
        shutil.copytree(src, dst)
        return dst

    return _copy


@pytest.fixture
def one_thread():
    """Tiny models train fastest on one thread (and do not oversubscribe a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def store_dir(tmp_path_factory, monkeypatch) -> Path:
    """Every test builds its dataset stores in a fresh store folder of its own (never the
    user's ``~/.cache``); subprocesses inherit it through the environment variable."""
    folder = tmp_path_factory.mktemp("stores")
    monkeypatch.setenv("GRAPHORMER_URPE_STORE", str(folder))
    monkeypatch.delenv("GRAPHORMER_URPE_CACHE", raising=False)  # the variable's previous name
    return folder


def pytest_configure(config: pytest.Config) -> None:
    """Where the suite runs on several pytest-xdist processes, each computes on one thread, and
    so do the processes it starts (unless told otherwise): a process per core, not a thread per
    core in each process, which would share the cores out among more threads than they hold."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or int(workerinput.get("workercount", 1)) < 2:
        return
    torch.set_num_threads(1)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")


@pytest.fixture(autouse=True, scope="session")
def subprocesses_import_this_checkout():
    """The scripts and commands the tests start in other processes import the package of this
    checkout (first on ``PYTHONPATH``), not whichever checkout an installed copy points at."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        )
        yield


LONGEST_FIRST = ("tests/tools/test_device_check.py",)
"""Test files whose run is minutes long (the device check's smoke run of every section):
collected first, so that one worker starts them while the other runs the rest, instead of
one worker running them alone at the end (the suite runs each file on one of 2 workers)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))  # stable sort
