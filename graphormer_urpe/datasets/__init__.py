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
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import Dataset

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

    def __post_init__(self) -> None:
        if self.task_type not in ("regression", "binary"):
            raise ValueError(f"task_type must be 'regression' or 'binary', got {self.task_type!r}")

    @property
    def num_targets(self) -> int:
        """Number of regression targets ``T``."""
        return len(self.target_names)

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
            logger.warning("%s: the %s split is empty", name, part)
    return DatasetSplits(
        name=name,
        train=parts["train"],
        valid=parts["valid"],
        test=parts["test"],
        featurizer=dataset.featurizer,
        target_names=list(dataset.target_names),
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

    Returns:
        The :class:`DatasetSplits`.

    Raises:
        ValueError: unknown name, featuriser or split method; bad CSV columns.
        DatasetUnavailableError: ZINC's raw files missing and not downloadable.
    """
    if name == "nci5k":
        return load_nci5k(
            root, multi_hop_max_dist, featurizer=featurizer, split=split, seed=seed, strict=strict
        )
    if name in ("zinc", "zinc-full"):
        return load_zinc_splits(
            root, multi_hop_max_dist, subset=name == "zinc", featurizer=featurizer
        )
    if name in LSC_DATASETS or name.startswith("ogbg-"):
        if featurizer not in (None, "ogb"):
            raise ValueError(
                f"{name} ships OGB features; featurizer must be 'ogb', got {featurizer!r}"
            )
        if name in LSC_DATASETS:
            return load_lsc_splits(name, root, multi_hop_max_dist, strict=strict)
        return load_ogbg(name, root, multi_hop_max_dist)
    if name.startswith("csv:") and len(name) > 4:
        return load_csv(
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
    raise ValueError(f"unknown dataset {name!r}; choose one of {list(DATASET_NAMES)}")
