"""Shared fixtures: random graphs, the real ZINC validation graphs when available."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def random_graph(
    rng: np.random.Generator,
    n: int,
    p: float,
    kind: str = "random",
    node_features: int = 1,
    edge_features: int = 1,
    num_targets: int = 1,
) -> Data:
    """An undirected graph (both directions stored) of ``kind`` random / ring / edgeless / split."""
    if kind == "ring" and n > 2:
        a = np.zeros((n, n), dtype=bool)
        a[np.arange(n), (np.arange(n) + 1) % n] = True
        # add a chord sometimes so several shortest paths tie
        if n > 5:
            a[0, n // 2] = True
    elif kind == "edgeless":
        a = np.zeros((n, n), dtype=bool)
    elif kind == "split" and n > 3:  # two components
        h = n // 2
        a = np.zeros((n, n), dtype=bool)
        a[:h, :h] = rng.random((h, h)) < max(p, 0.5)
        a[h:, h:] = rng.random((n - h, n - h)) < max(p, 0.5)
    else:
        a = rng.random((n, n)) < p
    a = np.triu(a, 1)
    a = a | a.T
    src, dst = np.nonzero(a)
    e = src.size
    # the same bond features in both directions, as molecules store them
    und = {}
    attrs = np.zeros((e, edge_features), dtype=np.int64)
    for idx, (s, d) in enumerate(zip(src, dst, strict=True)):
        key = (min(s, d), max(s, d))
        if key not in und:
            und[key] = rng.integers(0, 4, size=edge_features)
        attrs[idx] = und[key]
    x = rng.integers(0, 20, size=(n, node_features))
    return Data(
        x=torch.from_numpy(x),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        edge_attr=torch.from_numpy(attrs.squeeze(1) if edge_features == 1 else attrs),
        y=torch.randn(1, num_targets, generator=torch.Generator().manual_seed(int(n))),
        num_nodes=n,
    )


def graph_zoo(seed: int = 0, count: int = 200, **kw) -> list[Data]:
    """Hundreds of graphs covering random, ring, edgeless, disconnected and 1-node cases."""
    rng = np.random.default_rng(seed)
    kinds = ["random", "ring", "edgeless", "split", "random"]
    out = []
    for i in range(count):
        n = 1 if i % 17 == 0 else int(rng.integers(2, 26))
        out.append(random_graph(rng, n, float(rng.uniform(0.05, 0.4)), kinds[i % len(kinds)], **kw))
    return out


def load_zinc_val_graphs(limit: int | None = None) -> list[Data]:
    """The official ZINC-subset validation graphs (skips the test when the data is absent)."""
    path = SHARED_DATA / "zinc" / "val_graphs.npz"
    if not path.exists():
        pytest.skip(f"real ZINC validation graphs not available at {path}")
    z = np.load(path)
    graphs = []
    total = len(z["y"]) if limit is None else limit
    for g in range(total):
        a, b = z["node_ptr"][g], z["node_ptr"][g + 1]
        e0, e1 = z["edge_ptr"][g], z["edge_ptr"][g + 1]
        graphs.append(
            Data(
                x=torch.from_numpy(z["x"][a:b].astype(np.int64)).view(-1, 1),
                edge_index=torch.from_numpy(z["edge_index"][:, e0:e1].astype(np.int64)),
                edge_attr=torch.from_numpy(z["edge_attr"][e0:e1].astype(np.int64)),
                y=torch.tensor([float(z["y"][g])]),
            )
        )
    return graphs


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
