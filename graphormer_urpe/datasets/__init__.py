r"""Molecular datasets: one module per source, one interface for the trainer and the CLI.

Every source yields a :class:`DatasetSplits`: train / valid / test PyG datasets whose graphs
carry integer ``x`` ``[N, F]``, ``edge_index``, integer ``edge_attr``, ``y`` ``[1, T]`` float
(``NaN`` = missing) and the :class:`~graphormer_urpe.graph.features.GraphormerFeatures`
attributes (cached with the processed data), plus the featuriser (which sizes the embedding
tables), the target names, and the selection metric with its evaluator.

================  ===========================================  ==============  ==========
name              source                                       default root    featurizer
================  ===========================================  ==============  ==========
``nci5k``         RDKit's 5k NCI molecules, penalized logP     ``data/nci5k``  ``ogb``
``zinc``          ZINC subset (PyG ``ZINC(subset=True)``)      ``data/ZINC``   ``zinc``
``zinc-full``     full ZINC (PyG ``ZINC(subset=False)``)       ``data/ZINC``   ``zinc``
``csv:PATH``      a SMILES CSV (``.csv`` / ``.csv.gz``)        ``data/csv``    ``ogb``
``csv:A,B,C``     separate train, valid, test CSV files        ``data/csv``    ``ogb``
``pcqm4mv2``      OGB-LSC PCQM4Mv2 (test = test-dev)           ``data``        ``ogb``
``pcqm4m``        OGB-LSC PCQM4M v1 (test: unlabelled)         ``data``        ``ogb``
``ogbg-mol*``     OGB molecule sets (``ogbg-molhiv``, ...)     ``data``        ``ogb``
================  ===========================================  ==============  ==========

``pcqm4mv2`` / ``pcqm4m`` (:mod:`.pcqm`) read a memory-mapped cache built by
:func:`preprocess_lsc` (``graphormer-urpe preprocess``) and score with OGB's LSC evaluators;
``ogbg-mol*`` (:mod:`.ogbg`) go through ``ogb.graphproppred`` and its ``Evaluator`` and carry
their task type (``binary`` classification with BCE, or regression) and metric direction.

Bad input follows one policy (the full table is ``docs/bad_input.md``): a molecule that cannot
be featurised is reported with its row and SMILES and skipped (``strict=True``: an error);
:func:`load_dataset` then drops from the *train* split only the graphs that cannot teach
anything (every target missing) or that exceed ``max_nodes`` atoms, logs how many, and never
drops a valid or test graph. An empty split is an error naming the split and the dataset.

Example::

    from graphormer_urpe.datasets import load_dataset

    splits = load_dataset("nci5k")
    splits.train[0]                      # Data(x=[N, 9], edge_attr=[E, 3], y=[1, 1], ...)
    splits.evaluate(y_pred, y_true)      # {"mae": ..., "rmse": ...}
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset
from torch_geometric.data import Dataset as PyGDataset
from torch_geometric.data import InMemoryDataset

from .featurize import (
    FEATURIZERS,
    ZINC_ATOM_TYPES,
    InvalidMoleculeError,
    UnknownAtomTypeError,
    featurize_smiles,
    ogb_smiles_to_graph,
    zinc_mol_to_graph,
)
from .mmap_cache import CachedGraphDataset, MoleculeCache, build_molecule_cache
from .nci import NCI5K_DEFAULT_ROOT, NCI5kDataset
from .ogbg import OGBGEvaluator, OGBGMolDataset, load_ogbg, ogbg_molecule_names
from .pcqm import LSC_DATASETS, LSCData, LSCEvaluator, load_lsc_splits, open_lsc, preprocess_lsc
from .smiles import (
    DEFAULT_FRACTIONS,
    SPLITS,
    MoleculeDataset,
    SmilesCSVDataset,
    random_split,
    scaffold_split,
)
from .zinc import ZINC_DEFAULT_ROOT, DatasetUnavailableError, load_zinc
from .zinc_target import penalized_logp

__all__ = [
    "DatasetSplits",
    "load_dataset",
    "apply_input_policy",
    "target_values",
    "graph_sizes",
    "load_nci5k",
    "load_csv",
    "load_zinc_splits",
    "regression_metrics",
    "DATASET_NAMES",
    "FEATURIZERS",
    "ZINC_ATOM_TYPES",
    "InvalidMoleculeError",
    "UnknownAtomTypeError",
    "DatasetUnavailableError",
    "featurize_smiles",
    "zinc_mol_to_graph",
    "ogb_smiles_to_graph",
    "penalized_logp",
    "MoleculeDataset",
    "SmilesCSVDataset",
    "NCI5kDataset",
    "load_zinc",
    "random_split",
    "scaffold_split",
    "MoleculeCache",
    "CachedGraphDataset",
    "build_molecule_cache",
    "LSC_DATASETS",
    "LSCData",
    "LSCEvaluator",
    "load_lsc_splits",
    "open_lsc",
    "preprocess_lsc",
    "OGBGEvaluator",
    "OGBGMolDataset",
    "load_ogbg",
    "ogbg_molecule_names",
]

logger = logging.getLogger(__name__)

DATASET_NAMES = (
    "nci5k",
    "zinc",
    "zinc-full",
    "csv:PATH",
    "csv:TRAIN,VALID,TEST",
    "pcqm4mv2",
    "pcqm4m",
    "ogbg-mol*",
)
CSV_DEFAULT_ROOT = os.path.join("data", "csv")
_METRICS = ("mae", "rmse")


def regression_metrics(
    y_pred: Tensor, y_true: Tensor, target_names: Sequence[str] | None = None
) -> dict[str, float]:
    r"""MAE and RMSE over the non-missing targets.

    .. math::

        \mathrm{MAE}_t = \frac{1}{|M_t|}\sum_{i \in M_t} |\hat y_{it} - y_{it}|, \qquad
        \mathrm{MAE} = \frac{1}{T'} \sum_{t} \mathrm{MAE}_t

    where :math:`M_t` are the rows whose target :math:`t` is not ``NaN`` and the average runs
    over the :math:`T'` targets with at least one value (likewise RMSE).

    Args:
        y_pred: ``[N, T]`` (or ``[N]`` for one target) predictions.
        y_true: ``[N, T]`` (or ``[N]``) targets, ``NaN`` = missing (ignored).
        target_names: names for the per-target entries (only reported when ``T > 1``).

    Returns:
        ``{"mae", "rmse"}`` and, for ``T > 1``, ``"mae/<name>"`` and ``"rmse/<name>"``.
        ``NaN`` when no target value is present.
    """
    pred = torch.as_tensor(y_pred).detach().to("cpu", torch.float64)
    true = torch.as_tensor(y_true).detach().to("cpu", torch.float64)
    if pred.dim() == 1:
        pred = pred.unsqueeze(1)
    if true.dim() == 1:
        true = true.unsqueeze(1)
    if pred.shape != true.shape or pred.dim() != 2:
        raise ValueError(
            f"y_pred and y_true must both be [N, T]; got {tuple(y_pred.shape)} and "
            f"{tuple(y_true.shape)}"
        )
    num_targets = true.shape[1]
    names = list(target_names) if target_names is not None else [str(t) for t in range(num_targets)]
    if len(names) != num_targets:
        raise ValueError(f"{len(names)} target names for {num_targets} targets")
    mask = ~torch.isnan(true)
    out: dict[str, float] = {}
    per_mae, per_rmse = [], []
    for t in range(num_targets):
        m = mask[:, t]
        if not bool(m.any()):
            continue
        err = pred[m, t] - true[m, t]
        mae = float(err.abs().mean())
        rmse = float(err.pow(2).mean().sqrt())
        per_mae.append(mae)
        per_rmse.append(rmse)
        if num_targets > 1:
            out[f"mae/{names[t]}"] = mae
            out[f"rmse/{names[t]}"] = rmse
    out["mae"] = sum(per_mae) / len(per_mae) if per_mae else math.nan
    out["rmse"] = sum(per_rmse) / len(per_rmse) if per_rmse else math.nan
    return out


@dataclass
class DatasetSplits:
    """Train / valid / test datasets of one source, with its featuriser and metric.

    Attributes:
        name: ``"nci5k"``, ``"zinc"``, ``"zinc-full"`` or ``"csv:<path>"``.
        train: PyG dataset; each ``Data`` has integer ``x`` ``[N, F]``, ``edge_index``
            ``[2, E]``, integer ``edge_attr``, ``y`` ``[1, T]`` float (``NaN`` = missing) and
            the ``GraphormerFeatures`` attributes.
        valid: as ``train``.
        test: as ``train``.
        featurizer: ``"zinc"`` or ``"ogb"`` (decides the embedding table sizes).
        target_names: ``[T]`` target names.
        metric: the selection metric (a key of :meth:`evaluate`'s result).
        task_type: ``"regression"`` (L1 / MSE loss) or ``"binary"`` (one logit per task,
            BCE-with-logits loss, missing labels masked).
        higher_is_better: direction of ``metric`` (``True`` for ROC-AUC / AP).
        evaluator: ``(y_pred [N, T], y_true [N, T]) -> {metric: value, ...}`` replacing the
            default MAE / RMSE (e.g. OGB's evaluator); ``None`` for the default.
        max_nodes: the ``max_nodes`` the splits were filtered with (``None``: no limit).
        dropped_train_unlabelled: training graphs left out because every target is missing.
        dropped_train_oversize: training graphs left out because they have more than
            ``max_nodes`` atoms (graphs counted above are not counted again).
        oversize_valid: validation graphs with more than ``max_nodes`` atoms (kept).
        oversize_test: test graphs with more than ``max_nodes`` atoms (kept).
    """

    name: str
    train: Dataset
    valid: Dataset
    test: Dataset
    featurizer: str
    target_names: list[str]
    metric: str = "mae"
    task_type: str = "regression"
    higher_is_better: bool = False
    evaluator: Callable[[Tensor, Tensor], dict[str, float]] | None = None
    max_nodes: int | None = None
    dropped_train_unlabelled: int = 0
    dropped_train_oversize: int = 0
    oversize_valid: int = 0
    oversize_test: int = 0

    def __post_init__(self) -> None:
        if self.task_type not in ("regression", "binary"):
            raise ValueError(f"task_type must be 'regression' or 'binary', got {self.task_type!r}")

    @property
    def num_targets(self) -> int:
        """Number of regression targets ``T``."""
        return len(self.target_names)

    def input_report(self) -> dict[str, int | None]:
        """What :func:`apply_input_policy` left out or flagged, for a run's metrics.

        Returns:
            ``{"max_nodes", "dropped_train_unlabelled", "dropped_train_oversize",
            "oversize_valid", "oversize_test"}``.
        """
        return {
            "max_nodes": self.max_nodes,
            "dropped_train_unlabelled": self.dropped_train_unlabelled,
            "dropped_train_oversize": self.dropped_train_oversize,
            "oversize_valid": self.oversize_valid,
            "oversize_test": self.oversize_test,
        }

    def evaluate(self, y_pred: Tensor, y_true: Tensor) -> dict[str, float]:
        """Metrics of predictions ``[N, T]`` against targets ``[N, T]`` (``NaN`` ignored).

        Returns:
            ``{"mae": ..., "rmse": ...}`` (plus per-target entries when ``T > 1``), or what
            :attr:`evaluator` returns when set.
        """
        if self.evaluator is not None:
            return self.evaluator(y_pred, y_true)
        return regression_metrics(y_pred, y_true, self.target_names)

    def __repr__(self) -> str:
        return (
            f"DatasetSplits(name={self.name!r}, train={len(self.train)}, "
            f"valid={len(self.valid)}, test={len(self.test)}, featurizer={self.featurizer!r}, "
            f"targets={self.target_names}, metric={self.metric!r}, task={self.task_type!r})"
        )


def _check_featurizer(featurizer: str | None, default: str) -> str:
    chosen = default if featurizer is None else featurizer
    if chosen not in FEATURIZERS:
        raise ValueError(f"unknown featurizer {chosen!r}; choose one of {sorted(FEATURIZERS)}")
    return chosen


def _split_dataset(
    name: str,
    dataset: MoleculeDataset,
    split: str,
    seed: int,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> DatasetSplits:
    parts = dataset.subsets(dataset.split_indices(split, fractions, seed))
    for part, ds in parts.items():
        if len(ds) == 0:
            why = _why_empty(dataset, split, part, fractions)
            raise ValueError(f"{name}: the {part} split is empty: {why}")
    return DatasetSplits(
        name=name,
        train=parts["train"],
        valid=parts["valid"],
        test=parts["test"],
        featurizer=dataset.featurizer,
        target_names=list(dataset.target_names),
    )


def _why_empty(dataset: MoleculeDataset, method: str, part: str, fractions: Sequence[float]) -> str:
    """Why ``part`` got no graph when ``dataset`` was split by ``method``."""
    if method == "column":
        labels = sorted(set(dataset.split_labels or []))
        column = getattr(dataset, "split_column", None)
        return (
            f"no valid row of {dataset.describe()} has the label {part!r} in split column "
            f"{column!r} (labels present: {labels})"
        )
    return (
        f"a {method} split of {len(dataset)} graph(s) with fractions {tuple(fractions)} "
        f"leaves it none; add molecules or give a split column"
    )


def load_nci5k(
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 20,
    *,
    featurizer: str | None = None,
    split: str = "random",
    seed: int = 0,
    strict: bool = False,
    limit: int | None = None,
) -> DatasetSplits:
    """RDKit's NCI molecules labelled with penalized logP, split 80/10/10.

    Args:
        root: cache root (default ``data/nci5k``).
        multi_hop_max_dist: passed to ``GraphormerFeatures``.
        featurizer: default ``"ogb"``.
        split: ``"random"`` (seeded) or ``"scaffold"``.
        seed: split seed (fixed default 0).
        strict: raise instead of skipping invalid molecules.
        limit: only the first ``limit`` molecules (quick checks).
    """
    dataset = NCI5kDataset(
        NCI5K_DEFAULT_ROOT if root is None else root,
        featurizer=_check_featurizer(featurizer, "ogb"),
        multi_hop_max_dist=multi_hop_max_dist,
        limit=limit,
        strict=strict,
    )
    return _split_dataset("nci5k", dataset, split, seed)


def load_zinc_splits(
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 20,
    *,
    subset: bool = True,
    featurizer: str | None = None,
) -> DatasetSplits:
    """ZINC's official splits (subset or full) as :class:`DatasetSplits`."""
    if featurizer not in (None, "zinc"):
        raise ValueError(
            f"ZINC ships pre-featurised graphs (28 atom types); featurizer must be 'zinc', "
            f"got {featurizer!r}"
        )
    train, valid, test = load_zinc(
        ZINC_DEFAULT_ROOT if root is None else root, subset, multi_hop_max_dist
    )
    return DatasetSplits(
        name="zinc" if subset else "zinc-full",
        train=train,
        valid=valid,
        test=test,
        featurizer="zinc",
        target_names=["penalized_logp"],
    )


def load_csv(
    spec: str,
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 20,
    *,
    strict: bool = False,
    smiles_column: str = "smiles",
    target_columns: list[str] | None = None,
    split_column: str | None = None,
    split: str = "random",
    seed: int = 0,
    featurizer: str | None = None,
) -> DatasetSplits:
    """A SMILES CSV (``PATH``) or three per-split CSVs (``TRAIN,VALID,TEST``).

    One file is split by ``split_column`` when given, else by ``split`` (``"random"`` or
    ``"scaffold"``, 0.8/0.1/0.1, seeded). Three files are used as they are; target columns
    inferred from the train file apply to all three.
    """
    feat = _check_featurizer(featurizer, "ogb")
    cache_root = CSV_DEFAULT_ROOT if root is None else root
    paths = [spec] if os.path.exists(spec) else [p.strip() for p in spec.split(",")]
    options = {
        "smiles_column": smiles_column,
        "featurizer": feat,
        "multi_hop_max_dist": multi_hop_max_dist,
        "strict": strict,
    }
    if len(paths) == 1:
        dataset = SmilesCSVDataset(
            cache_root,
            paths[0],
            target_columns=target_columns,
            split_column=split_column,
            **options,
        )
        method = "column" if split_column is not None else split
        if split_column is not None and split not in ("random", "column"):
            raise ValueError(f"split={split!r} conflicts with split_column={split_column!r}")
        return _split_dataset(f"csv:{spec}", dataset, method, seed)
    if len(paths) != 3:
        raise ValueError(
            f"csv dataset spec {spec!r}: give one CSV path or three comma-separated paths "
            "(train,valid,test)"
        )
    train = SmilesCSVDataset(
        cache_root, paths[0], target_columns=target_columns, split_column=None, **options
    )
    names = list(train.target_names)
    valid = SmilesCSVDataset(cache_root, paths[1], target_columns=names, **options)
    test = SmilesCSVDataset(cache_root, paths[2], target_columns=names, **options)
    return DatasetSplits(
        name=f"csv:{spec}",
        train=train,
        valid=valid,
        test=test,
        featurizer=feat,
        target_names=names,
    )


# --------------------------------------------------------------------------------------
# The split policy: what load_dataset leaves out of train, and what it only reports
# --------------------------------------------------------------------------------------

_MAX_LISTED = 10


def _storage(dataset: Dataset) -> tuple[Any, dict[str, Tensor], np.ndarray] | None:
    """``(collated data, slices, storage index of each graph)`` of an in-memory PyG dataset."""
    if not isinstance(dataset, InMemoryDataset):
        return None
    slices = getattr(dataset, "slices", None)
    if not slices:  # a single stored graph has no slices
        return None
    return dataset._data, slices, np.asarray(dataset.indices(), dtype=np.int64)


def graph_sizes(dataset: Dataset) -> np.ndarray:
    """Number of nodes (atoms) of every graph of ``dataset``.

    Read from the storage without building any graph for the datasets of this package
    (in-memory PyG datasets and their views, memory-mapped caches); other datasets are
    iterated.

    Returns:
        ``[len(dataset)]`` int64 node counts.
    """
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(dataset, CachedGraphDataset):
        ptr = dataset.cache.open()["node_ptr"]
        return (ptr[dataset.positions + 1] - ptr[dataset.positions]).astype(np.int64)
    stored = _storage(dataset)
    if stored is not None and "x" in stored[1]:
        ptr = stored[1]["x"].numpy()
        return (ptr[stored[2] + 1] - ptr[stored[2]]).astype(np.int64)
    return np.array([int(dataset[i].num_nodes) for i in range(len(dataset))], dtype=np.int64)


def target_values(dataset: Dataset) -> np.ndarray:
    """``[len(dataset), T]`` float64 targets (``NaN`` = missing), read without building graphs
    where the storage allows it."""
    if len(dataset) == 0:
        return np.zeros((0, 1), dtype=np.float64)
    if callable(getattr(dataset, "target_matrix", None)):
        return dataset.target_matrix().to(torch.float64).numpy()
    stored = _storage(dataset)
    if stored is not None and "y" in stored[1]:
        data, slices, index = stored
        ptr = slices["y"]
        if bool((ptr[1:] - ptr[:-1] == 1).all()):  # one target row per graph
            y = data.y.to(torch.float64).reshape(ptr.numel() - 1, -1)
            return y[torch.from_numpy(index)].numpy()
    ys = [dataset[i].y.to(torch.float64).reshape(1, -1) for i in range(len(dataset))]
    return torch.cat(ys).numpy()


def _where(dataset: Dataset, positions: np.ndarray) -> str:
    """Where the graphs at ``positions`` of ``dataset`` come from (the first few), for logs."""
    shown = [int(p) for p in positions[:_MAX_LISTED]]
    if isinstance(dataset, CachedGraphDataset):
        source = dataset.source_index
        names = [f"row {int(source[p])}" for p in shown]
    elif isinstance(dataset, MoleculeDataset):
        index = dataset.indices()
        names = [
            f"{dataset.describe_row(int(dataset.rows[index[p]]))} {dataset.smiles[index[p]]!r}"
            for p in shown
        ]
    elif isinstance(dataset, PyGDataset):
        index = dataset.indices()
        names = [f"graph {int(index[p])}" for p in shown]
    else:
        names = [f"graph {p}" for p in shown]
    more = f" and {len(positions) - len(shown)} more" if len(positions) > len(shown) else ""
    return ", ".join(names) + more


def _subset(dataset: Dataset, keep: np.ndarray) -> Dataset:
    """The graphs of ``dataset`` at positions ``keep``, as the same kind of dataset."""
    keep = np.asarray(keep, dtype=np.int64)
    if isinstance(dataset, CachedGraphDataset):
        return CachedGraphDataset(
            dataset.cache, dataset.positions[keep], dataset.multi_hop_max_dist, dataset.name
        )
    if isinstance(dataset, PyGDataset):
        return dataset.index_select(keep)
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


def load_dataset(
    name: str,
    root: str | None = None,
    multi_hop_max_dist: int = 20,
    *,
    strict: bool = False,
    smiles_column: str = "smiles",
    target_columns: list[str] | None = None,
    split_column: str | None = None,
    split: str = "random",
    seed: int = 0,
    featurizer: str | None = None,
    max_nodes: int | None = None,
) -> DatasetSplits:
    """Load a dataset by name: ``nci5k``, ``zinc``, ``zinc-full``, ``csv:PATH``,
    ``csv:TRAIN,VALID,TEST``, ``pcqm4mv2``, ``pcqm4m`` or an ``ogbg-mol*`` name.

    Args:
        name: the source (see the module table).
        root: dataset root; defaults ``data/nci5k``, ``data/ZINC``, ``data/csv``, ``data``
            (OGB sets).
        multi_hop_max_dist: ``GraphormerFeatures(multi_hop_max_dist)``, cached with the data
            (a different value re-processes).
        strict: invalid SMILES raise instead of being reported and skipped.
        smiles_column: CSV: the SMILES column.
        target_columns: CSV: the target columns (``None``: every numeric column).
        split_column: CSV: a column of ``train``/``valid``/``test`` labels.
        split: ``"random"`` or ``"scaffold"`` for ``nci5k`` and single CSV files without a
            split column (ZINC has official splits).
        seed: seed of the random split.
        featurizer: ``"zinc"`` or ``"ogb"``; default ``zinc`` for ZINC, ``ogb`` otherwise
            (OGB sets accept only ``ogb``).
        max_nodes: leave training graphs with more than this many atoms out (logged);
            validation and test graphs are always kept. ``None``: no limit.

    Returns:
        The :class:`DatasetSplits`, filtered by :func:`apply_input_policy` (training graphs
        without any target value, and above ``max_nodes``, left out and counted).

    Raises:
        ValueError: unknown name, featuriser or split method; bad CSV columns; an empty split
            or a validation split without labels (the message names the split and dataset).
        InvalidMoleculeError: with ``strict``, any molecule that cannot be featurised (the
            message names the file, the rows and the SMILES).
        DatasetUnavailableError: ZINC's raw files missing and not downloadable.
    """
    splits: DatasetSplits
    if name == "nci5k":
        splits = load_nci5k(
            root, multi_hop_max_dist, featurizer=featurizer, split=split, seed=seed, strict=strict
        )
    elif name in ("zinc", "zinc-full"):
        splits = load_zinc_splits(
            root, multi_hop_max_dist, subset=name == "zinc", featurizer=featurizer
        )
    elif name in LSC_DATASETS or name.startswith("ogbg-"):
        if featurizer not in (None, "ogb"):
            raise ValueError(
                f"{name} ships OGB features; featurizer must be 'ogb', got {featurizer!r}"
            )
        if name in LSC_DATASETS:
            splits = load_lsc_splits(name, root, multi_hop_max_dist, strict=strict)
        else:
            splits = load_ogbg(name, root, multi_hop_max_dist)
    elif name.startswith("csv:") and len(name) > 4:
        splits = load_csv(
            name[4:],
            root,
            multi_hop_max_dist,
            strict=strict,
            smiles_column=smiles_column,
            target_columns=target_columns,
            split_column=split_column,
            split=split,
            seed=seed,
            featurizer=featurizer,
        )
    else:
        raise ValueError(f"unknown dataset {name!r}; choose one of {list(DATASET_NAMES)}")
    return apply_input_policy(splits, max_nodes)
