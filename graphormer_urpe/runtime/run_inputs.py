"""What a training run is made of: its device and seed, the dataset splits, the model, the
loss and the metric that selects the best checkpoint."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..datasets.spec import names_table
from ..graph.model import Graphormer, GraphormerConfig, fit_tables
from .train_config import TrainConfig, resolve_mol_features

if TYPE_CHECKING:
    from ..datasets import DatasetSplits

__all__ = [
    "seed_everything",
    "resolve_device",
    "dataset_targets",
    "build_model",
    "load_splits",
    "selection_metric",
    "default_loss",
]


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds code that uses the global RNG
    torch.manual_seed(seed)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` → the first CUDA GPU when available, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available")
    return device


def dataset_targets(dataset: Dataset) -> Tensor:
    """All targets of a dataset of graphs as ``[N, T]`` float (``NaN``: missing), read without
    building the graphs where the storage allows it."""
    from ..datasets import target_values

    if len(dataset) == 0:
        raise ValueError("the dataset is empty")
    return torch.from_numpy(target_values(dataset)).float()


def build_model(
    config: GraphormerConfig, featurizer: str, num_targets: int, num_mol_features: int = 0
) -> Graphormer:
    """The model for a dataset: tables grown to fit its featuriser, one output per target,
    ``num_mol_features`` per-molecule features joined before the head."""
    scaling = {} if config.num_targets == num_targets else {"target_mean": None, "target_std": None}
    config = replace(config, num_targets=num_targets, num_mol_features=num_mol_features, **scaling)
    return Graphormer(fit_tables(config, featurizer))


# TrainConfig fields passed to load_dataset under their own names
_DATASET_FIELDS = (
    "strict",
    "smiles_column",
    "target_columns",
    "split_column",
    "task",
    "split",
    "featurizer",
    "max_nodes",
    "store_dir",
    "mol_features",
)


def load_splits(config: TrainConfig, mol_features_record: dict | None = None):
    """The :class:`~graphormer_urpe.datasets.DatasetSplits` a run's config names
    (``mol_features_record``: a checkpoint's ``"mol_features"``, whose normalisation then
    applies instead of the training split's own)."""
    from ..datasets import load_dataset

    config = resolve_mol_features(config)
    return load_dataset(
        config.dataset,
        root=config.data_root,
        multi_hop_max_dist=config.model.multi_hop_max_dist,
        seed=config.split_seed,
        workers=config.preprocess_workers,
        mol_features_record=mol_features_record,
        **{name: getattr(config, name) for name in _DATASET_FIELDS},
    )


def default_loss(splits: DatasetSplits) -> str:
    """The regression loss when none is given: squared error for ``csv:`` datasets (a user's
    own data, as Chemprop), L1 for the benchmarks (whose metric is MAE)."""
    return "mse" if names_table(splits.name) else "l1"


def selection_metric(splits: DatasetSplits, loss: str) -> str:
    """The validation metric that picks the best checkpoint: the dataset's, except that a
    regression trained with ``mse`` on the default metrics selects on RMSE (what it trains
    for) instead of MAE."""
    if splits.task_type == "regression" and splits.evaluator is None and loss == "mse":
        return "rmse"
    return splits.metric
