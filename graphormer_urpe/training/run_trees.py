"""A run's trees head (:mod:`~graphormer_urpe.inference.trees`): fitted when the run is set
up, before the first step, so that a time limit counts it as it counts loading the data, and
blended with the network once the best checkpoint is known."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..datasets.metrics import classification_metrics, regression_metrics
from ..inference.trees import (
    FINGERPRINTS,
    TREES_DIR,
    TREES_FILE,
    Trees,
    dataset_inputs,
    fit_trees,
    load_embedder,
    save_embedder,
)
from ..runtime.run_inputs import dataset_targets

__all__ = ["RunTrees", "blend_run_trees", "fit_run_trees"]

log = logging.getLogger(__name__)


@dataclass
class RunTrees:
    """A run's fitted trees (kept in ``folder``), their outputs ``[n, T]`` on the validation
    and test splits, and the seconds they took."""

    trees: Trees
    folder: Path
    outputs: dict[str, np.ndarray]
    seconds: float


def fit_run_trees(
    splits: Any,
    model: torch.nn.Module,
    out: Path,
    seed: int,
    starting_model: bool,
    batch_size: int,
    precision: Any,
) -> RunTrees:
    """The trees of the run writing into ``out``: fitted on ``splits`` (and kept in
    ``out/trees``) or, where a resumed run already kept them, read back.

    Args:
        splits: the run's :class:`~graphormer_urpe.datasets.DatasetSplits` (a table of SMILES).
        model: the run's model before its first step (its graph token is the embedder's).
        out: the run folder.
        seed: the trees' random seed.
        starting_model: the model starts from a checkpoint (``init_from``): keep it as the
            embedder; else the trees read no graph token (a random network's means nothing).
        batch_size: graphs per batch of the embedder's passes.
        precision: the run's :class:`~graphormer_urpe.runtime.precision.Precision`.
    """
    start = time.perf_counter()
    folder = out / TREES_DIR
    device = next(model.parameters()).device
    embedder = load_embedder(folder, device)  # a resumed run's
    if embedder is None and starting_model and not (folder / TREES_FILE).exists():
        folder.mkdir(parents=True, exist_ok=True)
        save_embedder(folder, model)
        embedder = model
    training = model.training
    kept = Trees.load(folder) if (folder / TREES_FILE).exists() else None  # a resumed run's
    parts = ("valid", "test") if kept is not None else ("train", "valid", "test")
    fingerprints = FINGERPRINTS if kept is None else kept.fingerprints
    x = {
        p: dataset_inputs(getattr(splits, p), embedder, batch_size, device, precision, fingerprints)
        for p in parts
    }
    model.train(training)
    if kept is None:
        y = {p: dataset_targets(getattr(splits, p)) for p in ("train", "valid")}
        dim = 0 if embedder is None else embedder.config.hidden_dim
        threads = torch.get_num_threads()  # the run's (--threads)
        trees = fit_trees(x, y, splits.task_type, splits.target_names, seed, dim, threads)
        trees.save(folder)
    else:
        trees = kept
    outputs = {p: trees.predict(x[p]) for p in ("valid", "test")}
    seconds = time.perf_counter() - start
    return RunTrees(trees, folder, outputs, seconds)


def blend_run_trees(
    run_trees: RunTrees, valid: Tensor, y_valid: Tensor, task_type: str, metric: str, higher: bool
) -> dict[str, Any]:
    """Choose each target's network weight on the validation split (``valid``: the network's
    outputs ``[n, T]``, ``y_valid`` the targets), keep it in ``trees/trees.json`` and return
    what ``metrics.json`` records of the trees."""
    metrics = classification_metrics if task_type == "binary" else regression_metrics
    trees = run_trees.trees
    trees.choose_weights(
        valid, run_trees.outputs["valid"], y_valid, lambda p, y: metrics(p, y)[metric], higher
    )
    trees.save(run_trees.folder)
    return {
        "net_weight": trees.net_weight,
        "valid": trees.valid,
        "seconds": round(run_trees.seconds, 2),
    }
