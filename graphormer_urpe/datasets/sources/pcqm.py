r"""OGB-LSC PCQM4Mv2 and PCQM4M (v1): official layout, safe loading, a memory-mapped store.

Layout under ``root`` (what OGB's zip unpacks to; ``data`` by default)::

    <root>/pcqm4m-v2/raw/data.csv.gz          idx,smiles,homolumogap
    <root>/pcqm4m-v2/split_dict.pt            numpy int64 arrays: train, valid, test-dev,
                                              test-challenge
    <root>/pcqm4m_kddcup2021/...              the same for PCQM4M v1 (splits train, valid, test)

When ``data.csv.gz`` and ``split_dict.pt`` are both absent they are downloaded from OGB's URL
(the zip is unpacked into ``root``); offline this fails within the socket timeout with a
:class:`~.download.DatasetUnavailableError` that says where to put the
files.

What this module does differently from OGB 1.3.6's ``PygPCQM4Mv2Dataset``:

* **No prompt.** OGB calls ``input()`` when ``RELEASE_v1.txt`` is missing; here a missing
  release file is logged and the files are used as they are.
* **Safe loading.** ``split_dict.pt`` is a pickle of numpy arrays; OGB's ``torch.load`` fails
  under torch >= 2.6 (``weights_only=True``). It is loaded here with ``weights_only=True`` and
  only numpy's array-reconstruction functions and dtypes allow-listed
  (:func:`load_split_dict`), then checked (1-D integer arrays inside the data).
* **Scale.** The processed data is a memory-mapped store (:mod:`~graphormer_urpe.datasets.store`):
  built in parallel, resumable chunks (its size: docs/results/code-notes.md), opened without reading
  the arrays and read lazily; nothing is unpickled. It lives in the store folder
  (:mod:`..store.location`),
  under ``pcqm/<name>-<hash>/`` where the hash is that of ``data.csv.gz`` (editing the file rebuilds
  it); it does not depend on ``multi_hop_max_dist`` (applied when graphs are read).
* **Failures.** Molecules RDKit cannot parse are listed by index in the store's
  ``meta.json``, logged with a count, and left out of every split (``missing`` says which
  split lost which rows); :func:`~graphormer_urpe.inference.submit.submit_checkpoint` refuses
  to write a submission when a test molecule is missing.

The datasets' facts are in :mod:`.pcqm_files`, their raw files (layout, download, safe split
loading, the SMILES table) in :mod:`.pcqm_files`; this module builds and opens the store.

The metric is OGB's: ``ogb.lsc.PCQM4Mv2Evaluator`` (``PCQM4MEvaluator`` for v1) MAE over the
molecules that have a label (:class:`LSCEvaluator`). In the
:class:`~graphormer_urpe.datasets.DatasetSplits` of these datasets, ``test`` is ``test-dev``
(v2) or ``test`` (v1), both unlabelled.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...utils.deprecation import renamed_attribute
from ..store import (
    DEFAULT_CHUNK_SIZE,
    MoleculeStore,
    StoreGraphDataset,
    build_molecule_store,
    existing_store_report,
    store_is_complete,
)
from ..store.location import file_digest, store_folder
from .pcqm_files import (
    LSCInfo,
    ensure_lsc_files,
    load_split_dict,
    read_lsc_csv,
)
from .pcqm_files import lsc_dataset as _info

__all__ = [
    "LSCEvaluator",
    "LSCData",
    "preprocess_lsc",
    "open_lsc",
    "load_lsc_splits",
]

logger = logging.getLogger(__name__)

_STORE_VERSION = 1


def lsc_store_folder(
    info: LSCInfo, csv_path: Path, store_dir: str | os.PathLike[str] | None
) -> Path:
    identity = {"sha256": file_digest(csv_path), "version": _STORE_VERSION}
    return store_folder("pcqm", info.name, identity, store_dir)


# --------------------------------------------------------------------------------------
# Preprocessing and opening
# --------------------------------------------------------------------------------------


def preprocess_lsc(
    name: str = "pcqm4mv2",
    root: str | os.PathLike[str] | None = None,
    *,
    workers: int = 1,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    download: bool = True,
    progress: bool = True,
    store_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Build (or resume, or reuse) the memory-mapped store of an OGB-LSC dataset.

    Args:
        name: ``pcqm4mv2`` or ``pcqm4m``.
        root: the dataset root (default ``data``).
        workers: processes featurising chunks in parallel.
        chunk_size: molecules per chunk (the resumable unit) of a new build.
        download: fetch OGB's zip when the files are absent.
        progress: show progress bars.
        store_dir: the store folder (:func:`~..store.location.default_store_dir`).

    Returns:
        The :class:`~graphormer_urpe.datasets.store.StoreReport` as a dict, plus
        ``dataset``, ``bytes_per_molecule`` and the projections for the official dataset
        (``official_molecules``, ``projected_store_bytes``, ``projected_seconds`` at this
        run's throughput).
    """
    info = _info(name)
    folder = ensure_lsc_files(info, root, download=download, progress=progress)
    load_split_dict(folder / "split_dict.pt", info.splits)  # fails now, not after the build
    csv_path = folder / "raw" / "data.csv.gz"
    digest = file_digest(csv_path)
    store_path = lsc_store_folder(info, csv_path, store_dir)
    read_seconds = 0.0
    if store_is_complete(store_path):
        report = existing_store_report(store_path, workers)
        logger.info("%s: the store in %s is complete; nothing to do", info.title, store_path)
    else:
        t0 = time.perf_counter()
        smiles, gap = read_lsc_csv(csv_path)
        read_seconds = time.perf_counter() - t0
        logger.info(
            "%s: read %d molecules from %s in %.1f s",
            info.title,
            len(smiles),
            csv_path,
            read_seconds,
        )
        report = build_molecule_store(
            store_path,
            smiles,
            gap,
            target_names=["homolumogap"],
            workers=workers,
            chunk_size=chunk_size,
            progress=progress,
            description=info.title,
            extra_meta={"dataset": info.name, "source_sha256": digest},
        )
    out = report.to_dict()
    per_mol = report.store_bytes / max(report.graphs, 1)
    projected = int(per_mol * info.total)
    out.update(
        dataset=info.name,
        read_seconds=round(read_seconds, 3),
        bytes_per_molecule=round(per_mol, 1),
        official_molecules=info.total,
        projected_store_bytes=projected,
        projected_cache_bytes=projected,  # its previous name, until the next minor release
        projected_seconds=(
            round(info.total / report.molecules_per_second, 1)
            if report.molecules_per_second
            else None
        ),
    )
    return out


class LSCEvaluator:
    """OGB's evaluator (``PCQM4Mv2Evaluator`` / ``PCQM4MEvaluator``) over the labelled rows.

    Called with predictions and targets ``[N, 1]`` (or ``[N]``); rows whose target is ``NaN``
    (the unlabelled test splits) are left out. Returns ``{"mae": ...}`` (``NaN`` when no row
    has a label).
    """

    def __init__(self, info: LSCInfo) -> None:
        import ogb.lsc

        self.info = info
        self.evaluator = getattr(ogb.lsc, info.evaluator)()

    def __call__(self, y_pred: Tensor, y_true: Tensor) -> dict[str, float]:
        pred = torch.as_tensor(y_pred).detach().cpu().double().reshape(-1)
        true = torch.as_tensor(y_true).detach().cpu().double().reshape(-1)
        if pred.shape != true.shape:
            raise ValueError(
                f"{self.info.title} evaluation needs one prediction per molecule: "
                f"{tuple(y_pred.shape)} predictions for {tuple(y_true.shape)} targets"
            )
        mask = ~torch.isnan(true)
        if not bool(mask.any()):
            return {"mae": float("nan")}
        result = self.evaluator.eval({"y_pred": pred[mask].numpy(), "y_true": true[mask].numpy()})
        return {"mae": float(result["mae"])}


class LSCData:
    """An OGB-LSC dataset opened from its store: every official split, lazily read.

    Attributes:
        info: the dataset.
        store: the :class:`~graphormer_urpe.datasets.store.MoleculeStore`.
        split_rows: ``{split: [K] source rows}`` from ``split_dict.pt``.
        positions: ``{split: store positions}`` of the rows that are stored, in split order.
        missing: ``{split: source rows that could not be featurised}``.
        load_seconds: time to open the store and map the splits.
    """

    def __init__(self, info: LSCInfo, folder: Path, store: MoleculeStore) -> None:
        t0 = time.perf_counter()
        self.info = info
        self.folder = folder
        self.store = store
        self.split_rows = load_split_dict(folder / "split_dict.pt", info.splits)
        rows = int(store.meta["rows"])
        row_to_pos = np.full(rows, -1, dtype=np.int64)
        row_to_pos[np.asarray(store.source_index)] = np.arange(len(store))
        self.positions: dict[str, np.ndarray] = {}
        self.missing: dict[str, np.ndarray] = {}
        for split, idx in self.split_rows.items():
            out_of_range = idx[(idx < 0) | (idx >= rows)]
            if out_of_range.size:
                raise ValueError(
                    f"{folder / 'split_dict.pt'}: split {split!r} refers to row "
                    f"{int(out_of_range[0])}, but data.csv.gz has {rows} rows"
                )
            pos = row_to_pos[idx]
            self.missing[split] = idx[pos < 0]
            self.positions[split] = pos[pos >= 0]
            if self.missing[split].size:
                logger.warning(
                    "%s %s: %d of %d molecules could not be featurised and are left out "
                    "(rows %s%s)",
                    info.title,
                    split,
                    self.missing[split].size,
                    idx.size,
                    ", ".join(map(str, self.missing[split][:10])),
                    " ..." if self.missing[split].size > 10 else "",
                )
        self._check_labels()
        self.load_seconds = time.perf_counter() - t0

    cache = renamed_attribute("LSCData", "cache", "store")

    def _check_labels(self) -> None:
        y = np.asarray(self.store.targets[:, 0])
        for split, pos in self.positions.items():
            labelled = int(np.count_nonzero(~np.isnan(y[pos])))
            if split in self.info.test_splits and labelled:
                logger.warning(
                    "%s %s: %d molecules have a label (the official test splits have none)",
                    self.info.title,
                    split,
                    labelled,
                )
            elif split not in self.info.test_splits and labelled < pos.size:
                logger.warning(
                    "%s %s: %d of %d molecules have no label (ignored by loss and metric)",
                    self.info.title,
                    split,
                    pos.size - labelled,
                    pos.size,
                )
        for split, official in self.info.sizes.items():
            if self.split_rows[split].size != official:
                logger.info(
                    "%s %s has %d molecules (official: %d): a sample or a custom split",
                    self.info.title,
                    split,
                    self.split_rows[split].size,
                    official,
                )

    def split(self, name: str, multi_hop_max_dist: int = 5) -> StoreGraphDataset:
        """The stored graphs of split ``name``, in the split file's order."""
        if name not in self.positions:
            raise ValueError(f"{self.info.title} has splits {list(self.info.splits)}, not {name!r}")
        return StoreGraphDataset(self.store, self.positions[name], multi_hop_max_dist, name)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v.size}" for k, v in self.positions.items())
        return f"LSCData({self.info.title}, {sizes})"


def open_lsc(
    name: str = "pcqm4mv2",
    root: str | os.PathLike[str] | None = None,
    *,
    download: bool = True,
    progress: bool = True,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> LSCData:
    """Open an OGB-LSC dataset, preprocessing it first if its store is not complete.

    Args:
        name: ``pcqm4mv2`` or ``pcqm4m``.
        root: the dataset root (default ``data``).
        download: fetch OGB's zip when the files are absent.
        progress: show progress bars.
        store_dir: the store folder (:func:`~..store.location.default_store_dir`).
        workers, chunk_size: the build's processes and chunk size, when the store is
            missing or unfinished (:func:`preprocess_lsc`).
    """
    info = _info(name)
    folder = ensure_lsc_files(info, root, download=download, progress=progress)
    store_path = lsc_store_folder(info, folder / "raw" / "data.csv.gz", store_dir)
    if not store_is_complete(store_path):
        logger.info(
            "%s: no finished store in %s; preprocessing with %d worker(s) (run "
            "`graphormer-urpe preprocess --dataset %s --workers N` to choose)",
            info.title,
            store_path,
            workers,
            info.name,
        )
        preprocess_lsc(
            name,
            root,
            workers=workers,
            chunk_size=chunk_size,
            download=False,
            progress=progress,
            store_dir=store_dir,
        )
    return LSCData(info, folder, MoleculeStore(store_path))


def load_lsc_splits(
    name: str = "pcqm4mv2",
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 5,
    *,
    strict: bool = False,
    workers: int = 1,
    download: bool = True,
    progress: bool = True,
    store_dir: str | os.PathLike[str] | None = None,
):
    """An OGB-LSC dataset as :class:`~graphormer_urpe.datasets.DatasetSplits`.

    ``train`` and ``valid`` are the official splits; ``test`` is the first test split
    (``test-dev`` for PCQM4Mv2), which has no labels. The metric is OGB's MAE.

    Args:
        name: ``pcqm4mv2`` or ``pcqm4m``.
        root: dataset root (default ``data``).
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        strict: raise if any molecule could not be featurised.
        workers: processes for preprocessing when the store is missing.
        download: fetch OGB's zip when the files are absent.
        progress: show progress bars.
    """
    from ..dataset_splits import DatasetSplits
    from ..featurizers.smiles import InvalidMoleculeError

    info = _info(name)
    data = open_lsc(
        name, root, workers=workers, download=download, progress=progress, store_dir=store_dir
    )
    failures = data.store.failures
    if strict and failures:
        f = failures[0]
        raise InvalidMoleculeError(
            f"{info.title}: {len(failures)} molecule(s) could not be featurised, first row "
            f"{f.index} {f.smiles!r}: {f.reason}",
            f.smiles,
        )
    return DatasetSplits(
        name=info.name,
        train=data.split("train", multi_hop_max_dist),
        valid=data.split("valid", multi_hop_max_dist),
        test=data.split(info.dev_test, multi_hop_max_dist),
        featurizer="ogb",
        target_names=list(data.store.target_names),
        metric="mae",
        evaluator=LSCEvaluator(info),
        unreadable={
            part: int(data.missing[split].size)
            for part, split in (("train", "train"), ("valid", "valid"), ("test", info.dev_test))
            if data.missing[split].size
        },
    )
