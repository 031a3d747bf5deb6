r"""The input policy every source goes through: what leaves *train*, what is only reported.

:func:`apply_input_policy` drops from the *train* split only the graphs that cannot teach
anything (every target missing) or that exceed ``max_nodes`` atoms, logs how many (with the
first rows and SMILES), and never drops a valid or test graph. An empty split is an error
naming the split and the dataset. The full table of bad inputs is ``docs/bad_input.md``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from .split_indices import SPLITS
from .store import StoreGraphDataset

if TYPE_CHECKING:
    from .dataset_splits import DatasetSplits

__all__ = ["apply_input_policy", "graph_sizes", "target_values"]

logger = logging.getLogger(__name__)

_MAX_LISTED = 10


def graph_sizes(dataset: Dataset) -> np.ndarray:
    """Number of nodes (atoms) of every graph of ``dataset``.

    Read from the store without building any graph for this package's datasets; other
    datasets are iterated.

    Returns:
        ``[len(dataset)]`` int64 node counts.
    """
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(dataset, StoreGraphDataset):
        ptr = dataset.store.open()["node_ptr"]
        return (ptr[dataset.positions + 1] - ptr[dataset.positions]).astype(np.int64)
    return np.array([int(dataset[i].num_nodes) for i in range(len(dataset))], dtype=np.int64)


def target_values(dataset: Dataset) -> np.ndarray:
    """``[len(dataset), T]`` float64 targets (``NaN`` = missing), read without building graphs
    where the dataset allows it (``target_matrix()``)."""
    if len(dataset) == 0:
        return np.zeros((0, 1), dtype=np.float64)
    if callable(getattr(dataset, "target_matrix", None)):
        return dataset.target_matrix().to(torch.float64).numpy()
    ys = [dataset[i].y.to(torch.float64).reshape(1, -1) for i in range(len(dataset))]
    return torch.cat(ys).numpy()


def _where(dataset: Dataset, positions: np.ndarray) -> str:
    """Where the graphs at ``positions`` of ``dataset`` come from (the first few), for logs."""
    shown = np.asarray([int(p) for p in positions[:_MAX_LISTED]], dtype=np.int64)
    if isinstance(dataset, StoreGraphDataset):
        names = dataset.describe(shown)
    else:
        names = [f"graph {p}" for p in shown]
    more = f" and {len(positions) - len(shown)} more" if len(positions) > len(shown) else ""
    return ", ".join(names) + more


def _subset(dataset: Dataset, keep: np.ndarray) -> Dataset:
    """The graphs of ``dataset`` at positions ``keep``, as the same kind of dataset."""
    keep = np.asarray(keep, dtype=np.int64)
    if isinstance(dataset, StoreGraphDataset):
        return dataset.with_positions(dataset.positions[keep])
    return Subset(dataset, keep.tolist())


def apply_input_policy(splits: DatasetSplits, max_nodes: int | None = None) -> DatasetSplits:
    """Check the splits and leave out of *train* the graphs that must not be trained on.

    The policy (the same for every source):

    * an empty split raises;
    * training graphs whose every target is missing (``NaN``) are left out, with a warning
      giving their number and the first rows; partially labelled graphs stay (the loss masks
      the missing targets);
    * a validation split without a single target value raises (it selects the checkpoint);
    * with ``max_nodes``, training graphs with more than ``max_nodes`` atoms are left out
      (logged: how many, the largest size, the first rows); validation and test graphs are
      **never** left out: the oversized ones are counted, logged and evaluated anyway;
    * unlabelled validation / test graphs are kept (the metrics ignore missing targets).

    Args:
        splits: the splits of one source.
        max_nodes: the largest training graph to keep, in atoms (``None``: no limit).

    Returns:
        ``splits`` with the filtered train split and the counts recorded
        (:meth:`DatasetSplits.input_report`).

    Raises:
        ValueError: an empty split (before or after filtering), a validation split without
            labels, or a ``max_nodes`` below 1; the message names the split and the dataset.
    """
    if max_nodes is not None and (isinstance(max_nodes, bool) or int(max_nodes) < 1):
        raise ValueError(f"max_nodes must be a positive number of atoms or None, got {max_nodes}")
    name = splits.name
    for part in SPLITS:
        if len(getattr(splits, part)) == 0:
            raise ValueError(f"{name}: the {part} split is empty")

    train = splits.train
    total = len(train)
    unlabelled = ~np.isfinite(target_values(train)).any(axis=1)
    sizes = graph_sizes(train) if max_nodes is not None else np.zeros(total, dtype=np.int64)
    oversize = sizes > max_nodes if max_nodes is not None else np.zeros(total, dtype=bool)
    n_unlabelled = int(unlabelled.sum())
    n_oversize = int((oversize & ~unlabelled).sum())
    if n_unlabelled:
        logger.warning(
            "%s: left %d of %d training graphs out: every target is missing (%s)",
            name,
            n_unlabelled,
            total,
            _where(train, np.flatnonzero(unlabelled)),
        )
    if n_oversize:
        logger.warning(
            "%s: left %d of %d training graphs out: more than max_nodes=%d atoms (largest %d; %s)",
            name,
            n_oversize,
            total,
            max_nodes,
            int(sizes.max()),
            _where(train, np.flatnonzero(oversize & ~unlabelled)),
        )
    keep = np.flatnonzero(~(unlabelled | oversize))
    if keep.size == 0:
        reasons = [f"{n_unlabelled} have no target value"] if n_unlabelled else []
        if n_oversize:
            reasons.append(f"{n_oversize} have more than max_nodes={max_nodes} atoms")
        raise ValueError(
            f"{name}: the train split is empty after filtering: of its {total} graphs "
            + ", ".join(reasons)
        )
    if keep.size < total:
        train = _subset(train, keep)

    valid_y = target_values(splits.valid)
    if not np.isfinite(valid_y).any():
        raise ValueError(
            f"{name}: the valid split ({len(splits.valid)} graphs) has no target value; the "
            "validation metric, which selects the checkpoint, needs labels"
        )
    oversize_eval = {}
    for part in ("valid", "test"):
        ds = getattr(splits, part)
        y = valid_y if part == "valid" else target_values(ds)
        missing = int((~np.isfinite(y).any(axis=1)).sum())
        if missing:
            logger.info(
                "%s: %d of %d %s graphs have no target value; kept (the metrics ignore them)",
                name,
                missing,
                len(ds),
                part,
            )
        oversize_eval[part] = 0
        if max_nodes is not None:
            part_sizes = graph_sizes(ds)
            over = np.flatnonzero(part_sizes > max_nodes)
            oversize_eval[part] = int(over.size)
            if over.size:
                logger.warning(
                    "%s: %d of %d %s graphs have more than max_nodes=%d atoms (largest %d; %s); "
                    "they are kept and evaluated anyway",
                    name,
                    over.size,
                    len(ds),
                    part,
                    max_nodes,
                    int(part_sizes.max()),
                    _where(ds, over),
                )
    return replace(
        splits,
        train=train,
        max_nodes=None if max_nodes is None else int(max_nodes),
        dropped_train_unlabelled=n_unlabelled,
        dropped_train_oversize=n_oversize,
        oversize_valid=oversize_eval["valid"],
        oversize_test=oversize_eval["test"],
    )
