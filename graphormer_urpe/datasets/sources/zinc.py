r"""ZINC (the benchmark subset and full ZINC) from PyG's raw files into one store.

:func:`open_zinc` returns the store of the official train / val / test splits of the ZINC
subset (10,000 / 1,000 / 1,000 graphs, ``subset=True``) or of full ZINC (220,011 / 24,445 /
5,000, ``subset=False``), with the split of each graph stored as its split code. Graphs carry
``x`` ``[N, 1]`` (atom type, 28 types), ``edge_attr`` ``[E]`` (bond type 1..3) and ``y``
``[1, 1]`` (penalized logP), exactly as PyG's ``torch_geometric.datasets.ZINC`` reads them.

* **Raw files.** PyG's layout: ``<root>/raw/{train,val,test}.pickle`` (from PyG's
  ``molecules.zip``) and ``<root>/raw/{train,val,test}.index`` (the subset's indices).
  They are read with PyG's own rules (``bond_type`` matrix → ``edge_index``, both directions,
  sorted; the subset through the index files).
* **Download.** PyG's address (``ZINC.url`` and ``ZINC.split_url``), under a socket timeout; a
  failure raises :class:`DatasetUnavailableError` saying where to put the files by hand.
* **Partial raw folders.** When only some raw files are present nothing is downloaded over
  them: the error lists the missing ones.
"""

from __future__ import annotations

import http.client
import logging
import os
import pickle
import socket
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from torch_geometric.datasets import ZINC

from ..store import GraphDict, MoleculeStore
from ..store.location import file_digest, store_folder
from ..store.records import MoleculeRecords, open_store
from .download import DatasetUnavailableError

__all__ = [
    "ZINC_DEFAULT_ROOT",
    "ZINC_RAW_FILES",
    "zinc_raw_layout_help",
    "ensure_zinc_files",
    "read_zinc",
    "open_zinc",
]

logger = logging.getLogger(__name__)

ZINC_DEFAULT_ROOT = os.path.join("data", "ZINC")
ZINC_RAW_FILES: tuple[str, ...] = (
    "train.pickle",
    "val.pickle",
    "test.pickle",
    "train.index",
    "val.index",
    "test.index",
)
_SPLITS = ("train", "val", "test")
_NETWORK_ERRORS = (OSError, http.client.HTTPException, zipfile.BadZipFile)


def zinc_raw_layout_help(root: str | os.PathLike[str]) -> str:
    """How to install ZINC's raw files by hand under ``root``."""
    raw = os.path.join(root, "raw")
    index_urls = ", ".join(ZINC.split_url.format(s) for s in _SPLITS)
    return (
        f"To install ZINC by hand, download {ZINC.url} (molecules.zip), unzip it and move its "
        f"'molecules' folder's train.pickle, val.pickle and test.pickle into {raw}/, and put "
        f"train.index, val.index and test.index from {index_urls} in the same folder. "
        f"Expected: {', '.join(os.path.join(raw, f) for f in ZINC_RAW_FILES)}"
    )


@contextmanager
def _socket_timeout(seconds: float | None) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _download(root: Path, timeout: float) -> None:
    """PyG's ZINC download: ``molecules.zip`` → ``raw/``, then the three index files."""
    from torch_geometric.data import download_url, extract_zip

    raw = root / "raw"
    zip_path = root / "molecules.zip"
    zip_existed = zip_path.exists()
    try:
        with _socket_timeout(timeout):
            path = download_url(ZINC.url, str(root), log=False, filename="molecules.zip")
            extract_zip(path, str(root), log=False)
            raw.mkdir(parents=True, exist_ok=True)
            for name in ("train.pickle", "val.pickle", "test.pickle"):
                os.replace(root / "molecules" / name, raw / name)
            os.unlink(path)
            for split in _SPLITS:
                download_url(ZINC.split_url.format(split), str(raw), log=False)
    except _NETWORK_ERRORS as exc:
        if not zip_existed and zip_path.exists():
            zip_path.unlink()  # a partial download would be "reused" next time
        raise DatasetUnavailableError(
            f"ZINC raw files not found in {raw} and downloading them failed "
            f"({type(exc).__name__}: {exc}). " + zinc_raw_layout_help(root)
        ) from None


def ensure_zinc_files(
    root: str | os.PathLike[str] = ZINC_DEFAULT_ROOT,
    *,
    download: bool = True,
    download_timeout: float = 30.0,
) -> Path:
    """``<root>/raw`` with every ZINC raw file, downloaded when all are absent.

    Raises:
        DatasetUnavailableError: some files missing, or all missing and not downloadable.
    """
    root = Path(root)
    raw = root / "raw"
    missing = [f for f in ZINC_RAW_FILES if not (raw / f).is_file()]
    if missing and len(missing) < len(ZINC_RAW_FILES):
        raise DatasetUnavailableError(
            f"ZINC raw folder {raw} is incomplete: missing {', '.join(missing)}. (Not "
            "downloading over it.) " + zinc_raw_layout_help(root)
        )
    if missing and not download:
        raise DatasetUnavailableError(
            f"ZINC raw files not found in {raw}. " + zinc_raw_layout_help(root)
        )
    if missing:
        _download(root, download_timeout)
    return raw


def _graph(mol: dict) -> GraphDict:
    """One raw ZINC molecule (``atom_type`` ``[N]``, ``bond_type`` ``[N, N]``) as PyG reads it."""
    adj = np.asarray(mol["bond_type"])
    src, dst = np.nonzero(adj)  # row-major: sorted by source, then target, as PyG's nonzero
    return {
        "node_feat": np.asarray(mol["atom_type"], dtype=np.int64).reshape(-1, 1),
        "edge_index": np.stack([src, dst]).astype(np.int64),
        "edge_feat": adj[src, dst].astype(np.int64),
        "num_nodes": int(adj.shape[0]),
    }


def read_zinc(raw: str | os.PathLike[str], subset: bool = True) -> MoleculeRecords:
    """ZINC's three splits as graph records (rows numbered across train, val, test)."""
    raw = Path(raw)
    graphs: list[GraphDict] = []
    targets: list[float] = []
    split: list[int] = []
    for code, name in enumerate(_SPLITS):
        with open(raw / f"{name}.pickle", "rb") as f:
            mols = pickle.load(f)  # PyG's own raw format and reader
        indices = range(len(mols))
        if subset:
            text = (raw / f"{name}.index").read_text()
            indices = [int(x) for x in text.strip().split(",") if x.strip()]
        for i in indices:
            graphs.append(_graph(mols[i]))
            targets.append(float(np.asarray(mols[i]["logP_SA_cycle_normalized"]).reshape(-1)[0]))
            split.append(code)
        del mols
    return MoleculeRecords(
        rows=np.arange(len(graphs), dtype=np.int64),
        targets=np.asarray(targets, dtype=np.float64).reshape(-1, 1),
        target_names=["penalized_logp"],
        graphs=graphs,
        split=np.asarray(split, dtype=np.int8),
    )


def open_zinc(
    root: str | os.PathLike[str] = ZINC_DEFAULT_ROOT,
    subset: bool = True,
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    download: bool = True,
    download_timeout: float = 30.0,
    progress: bool | None = None,
) -> MoleculeStore:
    """The store of ZINC (subset or full), built from the raw files on first use.

    Raises:
        DatasetUnavailableError: raw files missing and not downloadable (offline), or only
            some of them present; the message says where to put them.
    """
    raw = ensure_zinc_files(root, download=download, download_timeout=download_timeout)
    names = ZINC_RAW_FILES if subset else ZINC_RAW_FILES[:3]
    identity = {f: file_digest(raw / f) for f in names}
    label = "subset" if subset else "full"
    store = open_store(
        store_folder("zinc", label, {"subset": subset, **identity}, store_dir),
        lambda: read_zinc(raw, subset),
        featurizer="zinc",
        description=f"ZINC {label}",
        workers=workers,
        progress=progress,
    )
    logger.info("ZINC %s: %d graphs in %s", label, len(store), store.folder)
    return store
