r"""``pretrain:PATH``: any SMILES file as a self-supervised pretraining set.

The targets of every molecule are its RDKit 2D descriptors (:mod:`..featurizers.descriptors`),
normalised with statistics of the training molecules, so pretraining is multi-target regression
through the regular training loop (``graphormer-urpe pretrain``).

* **Input**: a ``.smi`` / ``.txt`` file (optionally ``.gz``) with one SMILES a line (a name may
  follow after whitespace; a first line ``smiles`` or the ``smiles_column`` name is a header),
  or a ``.csv`` / ``.csv.gz`` table with a ``smiles_column``. Rows are numbered from 0 over
  the data lines; invalid SMILES are recorded by the store with their row and left out.
* **Store**: the file goes through the memory-mapped store with ``descriptors=True`` (raw
  descriptors stored beside the graphs, computed in the parallel chunked build); the store's
  key names the descriptor set and RDKit version.
* **Split**: seeded random, :data:`PRETRAIN_FRACTIONS` (98 / 1 / 1%): the validation split
  selects the best checkpoint.
* **Targets**: :class:`DescriptorTargets` replaces each graph's ``y`` with its normalised
  descriptors ``[1, K]``, computed when read; the normaliser is fitted on (at most 100,000
  of) the training molecules and recorded in :attr:`DatasetSplits.pretrain
  <graphormer_urpe.datasets.registry.DatasetSplits>`, which the checkpoints carry.
* **Metric**: :func:`descriptor_metrics`, the mean over descriptors of the MAE, RMSE and R²
  in normalised units (selection on ``mae``).
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch_geometric.data import Data

from ..featurizers.descriptors import DescriptorNormalizer, descriptor_set_id
from ..split_indices import random_split
from ..store import MoleculeStore, StoreGraphDataset
from ..store.location import file_digest, store_folder
from ..store.records import MoleculeRecords, open_store

__all__ = [
    "PRETRAIN_FRACTIONS",
    "read_smiles_list",
    "open_pretrain",
    "DescriptorTargets",
    "descriptor_metrics",
    "load_pretrain",
]

logger = logging.getLogger(__name__)

PRETRAIN_FRACTIONS: tuple[float, float, float] = (0.98, 0.01, 0.01)
"""Train / valid / test fractions of a pretraining set's random split."""

_CHUNK_ROWS = 65_536
_FIT_ROWS = 100_000


def _is_csv(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".csv") or name.endswith(".csv.gz")


def read_smiles_list(
    path: str | os.PathLike[str], smiles_column: str = "smiles"
) -> tuple[list[str], int]:
    """The SMILES of a ``.smi`` / ``.txt`` / ``.csv`` file (``.gz`` too), in file order.

    Returns:
        ``(smiles, line_offset)``: ``[R]`` SMILES (``""`` for an empty line) and the file line
        of row 0 (1-based).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a CSV without ``smiles_column``, or a file without any row.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SMILES file not found: {path}")
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    if _is_csv(path):
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            header = pd.read_csv(f, nrows=0).columns.tolist()
        if smiles_column not in header:
            raise ValueError(f"{path}: column {smiles_column!r} not found; columns: {header}")
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            df = pd.read_csv(f, usecols=[smiles_column], dtype=str, keep_default_na=False)
        smiles, offset = df[smiles_column].str.strip().tolist(), 2
    else:
        with opener(path, "rt", encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        first = lines[0].split() if lines else []
        header = bool(first) and first[0].lower() in ("smiles", smiles_column.lower())
        smiles = [(ln.split() or [""])[0] for ln in lines[int(header) :]]
        offset = 1 + int(header)
    if not smiles:
        raise ValueError(f"{path}: no SMILES rows")
    return smiles, offset


def open_pretrain(
    path: str | os.PathLike[str],
    smiles_column: str = "smiles",
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> MoleculeStore:
    """The store (OGB features + raw descriptors) of a SMILES file, built on first use."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SMILES file not found: {path}")
    identity = {
        "sha256": file_digest(path),
        "smiles_column": smiles_column if _is_csv(path) else None,
        "featurizer": "ogb",
        "descriptors": descriptor_set_id(),
    }
    meta: dict[str, Any] = {"line_offset": None}  # known once the file is read

    def read() -> MoleculeRecords:
        smiles, meta["line_offset"] = read_smiles_list(path, smiles_column)
        rows = np.arange(len(smiles), dtype=np.int64)
        return MoleculeRecords(rows, np.zeros((len(smiles), 0)), [], smiles=smiles)

    return open_store(
        store_folder("pretrain", path.name.split(".")[0], identity, store_dir),
        read,
        featurizer="ogb",
        description=str(path),
        workers=workers,
        extra_meta=meta,  # read() fills in the line offset before the store is written
        descriptors=True,
    )


class DescriptorTargets(StoreGraphDataset):
    """A split of a descriptor store whose targets are the normalised descriptors.

    Each ``Data`` is the store's graph with ``y`` ``[1, K]`` float32 =
    ``normalizer.transform(descriptors)`` (finite; missing values are 0).

    Args:
        *args, **kwargs: those of :class:`~..store.StoreGraphDataset` (``store``: a store
            built with ``descriptors=True``; ``positions``, ``multi_hop_max_dist``, ``name``).
        normalizer: the fitted :class:`~..featurizers.descriptors.DescriptorNormalizer`.
    """

    def __init__(self, *args: Any, normalizer: DescriptorNormalizer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if list(normalizer.names) != self.store.descriptor_names:
            raise ValueError(f"{self.store.folder}: its descriptors are not the normaliser's")
        self.normalizer = normalizer

    def with_positions(self, positions: np.ndarray) -> DescriptorTargets:
        return DescriptorTargets(
            self.store, positions, self.multi_hop_max_dist, self.name, normalizer=self.normalizer
        )

    def _targets(self, store_positions: Sequence[int]) -> np.ndarray:
        """``[n, K]`` float32 normalised descriptors of the graphs at ``store_positions``."""
        raw = self.store.descriptors[np.asarray(store_positions, dtype=np.int64)]
        return self.normalizer.transform(raw)

    def __getitems__(self, indices: Sequence[int]) -> list[Data]:
        graphs = super().__getitems__(indices)
        y = torch.from_numpy(self._targets([self._pos(int(i)) for i in indices]))
        for g, row in zip(graphs, y, strict=True):
            g.y = row.view(1, -1)
        return graphs

    def __getitem__(self, idx: int) -> Data:
        return self.__getitems__([idx])[0]

    def target_matrix(self) -> Tensor:
        """``[N, K]`` float32 normalised descriptors of the split (read in blocks)."""
        out = np.empty((len(self), len(self.normalizer.names)), dtype=np.float32)
        for start in range(0, len(self), _CHUNK_ROWS):
            out[start : start + _CHUNK_ROWS] = self._targets(
                self.positions[start : start + _CHUNK_ROWS]
            )
        return torch.from_numpy(out)


def descriptor_metrics(y_pred: Tensor, y_true: Tensor) -> dict[str, float]:
    """Means over the ``K`` descriptors of MAE, RMSE and R² (normalised units).

    Args:
        y_pred: ``[N, K]`` predictions.
        y_true: ``[N, K]`` normalised descriptors.

    Returns:
        ``{"mae", "rmse", "r2"}``; R² of a descriptor constant on these molecules counts as 0.
    """
    pred, true = y_pred.double(), y_true.double()
    err = pred - true
    mse = err.square().mean(dim=0)  # [K]
    var = true.var(dim=0, unbiased=False)  # [K]
    r2 = torch.where(var > 0, 1 - mse / var.clamp(min=1e-12), torch.zeros_like(var))
    return {
        "mae": float(err.abs().mean()),
        "rmse": float(mse.sqrt().mean()),
        "r2": float(r2.mean()),
    }


def _record(path: str, store: MoleculeStore, norm: DescriptorNormalizer, parts: dict) -> dict:
    """What a pretraining checkpoint records about its data (JSON-friendly)."""
    return {
        "task": "rdkit2d-descriptors",
        "source": str(path),
        "store": str(store.folder),
        "molecules": len(store),
        "unreadable": len(store.failures),
        "split": {k: int(v.size) for k, v in parts.items()},
        "split_fractions": list(PRETRAIN_FRACTIONS),
        "descriptors": norm.to_dict(),
    }


def load_pretrain(
    path: str,
    multi_hop_max_dist: int = 5,
    *,
    smiles_column: str = "smiles",
    seed: int = 0,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> Any:
    """The :class:`~..registry.DatasetSplits` of a pretraining SMILES file (see module doc).

    Args:
        path: the ``.smi`` / ``.txt`` / ``.csv`` file (``.gz`` too).
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        smiles_column: the SMILES column of a CSV.
        seed: seed of the random split (and of the rows the normaliser is fitted on).
        store_dir: the store folder.
        workers: processes building the store.
    """
    from ..dataset_splits import DatasetSplits, unreadable_by_split

    store = open_pretrain(path, smiles_column, store_dir=store_dir, workers=workers)
    parts = random_split(len(store), PRETRAIN_FRACTIONS, seed)
    for part, pos in parts.items():
        if pos.size == 0:
            raise ValueError(
                f"pretrain:{path}: the {part} split of {len(store)} molecules is empty "
                f"(fractions {PRETRAIN_FRACTIONS}); give at least 100 valid molecules"
            )
    train = parts["train"]
    if train.size > _FIT_ROWS:  # the statistics of a random sample of the training molecules
        train = np.sort(np.random.default_rng(seed).choice(train, _FIT_ROWS, replace=False))
    norm = DescriptorNormalizer.fit(store.descriptors[train], store.descriptor_names)
    sets = {
        p: DescriptorTargets(store, pos, multi_hop_max_dist, p, normalizer=norm)
        for p, pos in parts.items()
    }
    logger.info(
        "pretrain:%s: %d molecules, %d descriptors (%s), normalised on %d training molecules",
        path,
        len(store),
        len(norm.names),
        descriptor_set_id(),
        norm.fitted_on,
    )
    return DatasetSplits(
        name=f"pretrain:{path}",
        **sets,
        featurizer="ogb",
        target_names=list(norm.names),
        evaluator=descriptor_metrics,
        unreadable=unreadable_by_split(store.failures, "random"),
        pretrain=_record(path, store, norm, parts),
    )
