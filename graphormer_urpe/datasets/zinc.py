r"""ZINC through PyG's own ``torch_geometric.datasets.ZINC``, with Graphormer features cached.

:func:`load_zinc` returns the official train / val / test splits of the ZINC subset
(10,000 / 1,000 / 1,000 graphs, ``subset=True``) or of full ZINC (220,011 / 24,445 / 5,000,
``subset=False``), processed once with ``pre_transform=GraphormerFeatures(multi_hop_max_dist)``.
Graphs carry ``x`` ``[N, 1]`` (atom type, 28 types), ``edge_attr`` ``[E]`` (bond type 1..3)
and ``y`` ``[1, 1]`` (penalized logP; :class:`TargetAs2D` reshapes PyG's ``[1]`` on access).

Around PyG's class this module adds three guards:

* **Offline.** PyG's download code path is kept (``ZINC.download``: Dropbox zip + GitHub
  index files), but under a socket timeout, and a failure raises
  :class:`DatasetUnavailableError` saying where to put the files by hand: PyG's raw layout
  ``<root>/raw/{train,val,test}.pickle`` and ``<root>/raw/{train,val,test}.index``.
* **Partial raw folders.** PyG's ``download`` first deletes ``<root>/raw``; when only some raw
  files are present this module refuses to download and lists the missing ones instead.
* **Stale caches.** PyG keeps the subset and full processed data apart
  (``<root>/subset/processed`` / ``<root>/full/processed``) but only *warns* when the cached
  ``pre_transform`` differs. Here a cache built with another ``pre_transform`` (e.g. another
  ``multi_hop_max_dist``) or without one is re-processed.
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

import torch
from torch_geometric.data import Data
from torch_geometric.datasets import ZINC
from torch_geometric.transforms import BaseTransform

from ..graph.features import GraphormerFeatures, has_graphormer_features
from .safe_cache import SafeInMemoryDataset, pyg_repr, save_processed

__all__ = [
    "ZINC_DEFAULT_ROOT",
    "ZINC_RAW_FILES",
    "DatasetUnavailableError",
    "TargetAs2D",
    "zinc_raw_layout_help",
    "load_zinc",
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


class DatasetUnavailableError(FileNotFoundError):
    """A dataset's files are missing and could not be downloaded."""


class TargetAs2D(BaseTransform):
    """Reshape ``data.y`` to ``[1, T]`` float (PyG's ZINC stores ``[1]``)."""

    def forward(self, data: Data) -> Data:
        if getattr(data, "y", None) is not None:
            data.y = data.y.reshape(1, -1).float()
        return data


def zinc_raw_layout_help(root: str) -> str:
    """How to install ZINC's raw files by hand under ``root``."""
    raw = os.path.join(root, "raw")
    index_urls = ", ".join(ZINC.split_url.format(s) for s in _SPLITS)
    return (
        f"To install ZINC by hand, download {ZINC.url} (molecules.zip), unzip it and move its "
        f"'molecules' folder's train.pickle, val.pickle and test.pickle into {raw}/, and put "
        f"train.index, val.index and test.index from {index_urls} in the same folder. "
        f"Expected: {', '.join(os.path.join(raw, f) for f in ZINC_RAW_FILES)}"
    )


def _stale_cache_reason(processed_dir: str, expected: str) -> str | None:
    """Why an existing processed ZINC cache cannot be reused (``None`` if it can or is absent)."""
    data_files = [os.path.join(processed_dir, f"{s}.pt") for s in _SPLITS]
    if not any(os.path.exists(f) for f in data_files):
        return None
    marker = os.path.join(processed_dir, "pre_transform.pt")
    if not os.path.exists(marker):
        return "it has no record of its pre_transform"
    try:
        stored = torch.load(marker, weights_only=True)
    except Exception as exc:  # unreadable marker: rebuild rather than guess
        return f"its pre_transform record is unreadable ({type(exc).__name__})"
    if stored != expected:
        return f"it was built with pre_transform {stored}"
    return None


@contextmanager
def _socket_timeout(seconds: float | None) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


class _BatchedZINC(SafeInMemoryDataset, ZINC):
    """PyG's ``ZINC`` that computes the Graphormer features of each split in one batched pass.

    PyG's ``process()`` calls ``pre_transform`` graph by graph. This one reads the raw files
    exactly as PyG's does and stores ``GraphormerFeatures.apply_many`` of the whole split:
    the same processed files, several times faster. The processed files are read with
    ``weights_only=True`` only (:class:`~graphormer_urpe.datasets.safe_cache.SafeInMemoryDataset`).
    """

    def process(self) -> None:
        transform = self.pre_transform
        if not isinstance(transform, GraphormerFeatures):
            super().process()
            return
        for split in _SPLITS:
            with open(os.path.join(self.raw_dir, f"{split}.pickle"), "rb") as f:
                mols = pickle.load(f)  # PyG's own raw format and reader
            indices: list[int] = list(range(len(mols)))
            if self.subset:
                with open(os.path.join(self.raw_dir, f"{split}.index")) as f:
                    indices = [int(x) for x in f.read()[:-1].split(",")]
            data_list = []
            for idx in indices:
                mol = mols[idx]
                adj = mol["bond_type"]  # [N, N] bond types, 0 = none
                edge_index = adj.nonzero(as_tuple=False).t().contiguous()
                data = Data(
                    x=mol["atom_type"].to(torch.long).view(-1, 1),
                    edge_index=edge_index,
                    edge_attr=adj[edge_index[0], edge_index[1]].to(torch.long),
                    y=mol["logP_SA_cycle_normalized"].to(torch.float),
                )
                if self.pre_filter is None or self.pre_filter(data):
                    data_list.append(data)
            data_list = transform.apply_many(data_list, progress=None)
            save_processed(data_list, os.path.join(self.processed_dir, f"{split}.pt"))


_NETWORK_ERRORS = (OSError, http.client.HTTPException, zipfile.BadZipFile)


def load_zinc(
    root: str | os.PathLike[str] = ZINC_DEFAULT_ROOT,
    subset: bool = True,
    multi_hop_max_dist: int = 20,
    *,
    download: bool = True,
    download_timeout: float = 30.0,
    force_reload: bool = False,
) -> tuple[ZINC, ZINC, ZINC]:
    """The ZINC train / val / test datasets with Graphormer features.

    Args:
        root: PyG's ZINC root (raw files in ``<root>/raw``).
        subset: ``True`` for the 12k-graph benchmark subset, ``False`` for full ZINC.
        multi_hop_max_dist: passed to ``GraphormerFeatures``; a cache built with another value
            is re-processed.
        download: try PyG's download when the raw files are absent.
        download_timeout: socket timeout (seconds) while downloading.
        force_reload: re-process even if a matching cache exists.

    Returns:
        ``(train, val, test)`` PyG ``ZINC`` datasets (``y`` reshaped to ``[1, 1]`` on access).

    Raises:
        DatasetUnavailableError: raw files missing and not downloadable (offline), or only
            some of them present; the message says where to put them.
    """
    root = os.fspath(root)
    raw_dir = os.path.join(root, "raw")
    missing = [f for f in ZINC_RAW_FILES if not os.path.isfile(os.path.join(raw_dir, f))]
    if missing and len(missing) < len(ZINC_RAW_FILES):
        raise DatasetUnavailableError(
            f"ZINC raw folder {raw_dir} is incomplete: missing {', '.join(missing)}. (Not "
            "downloading: PyG's download would first delete that folder.) "
            + zinc_raw_layout_help(root)
        )
    if missing and not download:
        raise DatasetUnavailableError(
            f"ZINC raw files not found in {raw_dir}. " + zinc_raw_layout_help(root)
        )

    pre_transform = GraphormerFeatures(multi_hop_max_dist)
    processed_dir = os.path.join(root, "subset" if subset else "full", "processed")
    reload_first = force_reload
    reason = _stale_cache_reason(processed_dir, pyg_repr(pre_transform))
    if reason is not None and not force_reload:
        logger.warning(
            "re-processing ZINC in %s: %s, not %s", processed_dir, reason, pyg_repr(pre_transform)
        )
        reload_first = True

    zip_path = os.path.join(root, "molecules.zip")
    zip_existed = os.path.exists(zip_path)
    try:
        with _socket_timeout(download_timeout if missing else socket.getdefaulttimeout()):
            train = _BatchedZINC(
                root,
                subset=subset,
                split="train",
                transform=TargetAs2D(),
                pre_transform=pre_transform,
                force_reload=reload_first,
            )
    except _NETWORK_ERRORS as exc:
        still_missing = [f for f in ZINC_RAW_FILES if not os.path.isfile(os.path.join(raw_dir, f))]
        if not missing or not still_missing:
            raise
        if not zip_existed and os.path.exists(zip_path):
            os.remove(zip_path)  # a partial download would be "reused" next time
        raise DatasetUnavailableError(
            f"ZINC raw files not found in {raw_dir} and downloading them failed "
            f"({type(exc).__name__}: {exc}). " + zinc_raw_layout_help(root)
        ) from None
    val = _BatchedZINC(root, subset, "val", transform=TargetAs2D(), pre_transform=pre_transform)
    test = _BatchedZINC(root, subset, "test", transform=TargetAs2D(), pre_transform=pre_transform)
    for name, ds in (("train", train), ("val", val), ("test", test)):
        if len(ds) and not has_graphormer_features(ds[0]):
            raise RuntimeError(  # pragma: no cover - guarded by the stale-cache check
                f"ZINC {name} split in {processed_dir} lacks Graphormer features; "
                "pass force_reload=True"
            )
    logger.info(
        "ZINC %s: %d / %d / %d graphs (train / val / test)",
        "subset" if subset else "full",
        len(train),
        len(val),
        len(test),
    )
    return train, val, test
