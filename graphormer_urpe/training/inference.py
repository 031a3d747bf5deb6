"""Using a trained checkpoint: evaluate a split, predict molecules from SMILES.

Checkpoints carry their config, featuriser and target names, so nothing else is needed.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch_geometric.data import Data

from ..graph.features import GraphormerFeatures
from ..graph.model import Graphormer
from .checkpoint import incompatible_checkpoint, load_checkpoint
from .config import TrainConfig
from .loop import Precision, load_splits, make_loader, predict, resolve_device

__all__ = [
    "LoadedModel",
    "load_model",
    "evaluate_checkpoint",
    "predict_smiles",
    "checkpoint_task_type",
]

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A model restored from a checkpoint, with what is needed to feed it."""

    model: Graphormer
    config: TrainConfig
    featurizer: str
    target_names: list[str]
    metric: str
    device: torch.device
    task_type: str = "regression"
    """``binary`` (the model outputs one logit per task) or ``regression``."""


def checkpoint_task_type(ckpt: dict) -> str:
    """``binary`` or ``regression`` for a loaded checkpoint (older checkpoints, which do not
    record it, are binary when selected on ROC-AUC or AP)."""
    if "task_type" in ckpt:
        return str(ckpt["task_type"])
    return "binary" if ckpt.get("metric") in ("rocauc", "ap") else "regression"


def load_model(path: str | Path, device: str = "auto") -> LoadedModel:
    """Restore the model of a checkpoint (``best.pt`` or ``last.pt``) in eval mode."""
    ckpt = load_checkpoint(path)
    with incompatible_checkpoint(path):
        config = TrainConfig.from_dict(ckpt["config"])
        model = Graphormer(config.model)
        model.load_state_dict(ckpt["model"])
    dev = resolve_device(device)
    return LoadedModel(
        model=model.to(dev).eval(),
        config=config,
        featurizer=ckpt.get("featurizer", "ogb"),
        target_names=list(ckpt.get("target_names", ["y"])),
        metric=ckpt.get("metric", "mae"),
        device=dev,
        task_type=checkpoint_task_type(ckpt),
    )


def evaluate_checkpoint(
    path: str | Path,
    split: str = "test",
    data_root: str | None = None,
    device: str = "auto",
    batch_size: int | None = None,
    progress: bool = True,
) -> dict[str, float]:
    """The metric(s) of a checkpoint on ``split`` (``train``, ``valid`` or ``test``)."""
    if split not in ("train", "valid", "test"):
        raise ValueError(f"split must be train, valid or test, got {split!r}")
    lm = load_model(path, device)
    cfg = lm.config
    if data_root is not None:
        cfg = replace(cfg, data_root=data_root)
    splits = load_splits(cfg)
    dataset = getattr(splits, split)
    loader = make_loader(dataset, lm.model.config, batch_size or cfg.batch_size, shuffle=False)
    pred, y = predict(
        lm.model, loader, lm.device, Precision(cfg.precision, lm.device), progress, split
    )
    if y is None or not bool(torch.isfinite(y).any()):
        hint = " (write a submission with graphormer-urpe submit)" if y is not None else ""
        raise ValueError(
            f"the {split} split of {splits.name} has no targets to evaluate against{hint}"
        )
    result = splits.evaluate(pred, y)
    return {"dataset": splits.name, "split": split, "graphs": len(dataset), **result}


def predict_smiles(
    path: str | Path,
    smiles: list[str],
    device: str = "auto",
    batch_size: int = 256,
    progress: bool = True,
) -> tuple[torch.Tensor, list[str | None]]:
    """Predict every SMILES; invalid ones are reported and get NaN predictions.

    Returns:
        ``(pred [len(smiles), T], errors)`` where ``errors[i]`` is ``None`` or the reason row
        ``i`` could not be featurised.
    """
    from ..datasets import featurize_smiles

    lm = load_model(path, device)
    transform = GraphormerFeatures(lm.model.config.multi_hop_max_dist)
    graphs: list[Data] = []
    keep: list[int] = []
    errors: list[str | None] = [None] * len(smiles)
    for i, smi in enumerate(smiles):
        try:
            g = featurize_smiles(smi, lm.featurizer)
        except ValueError as exc:
            errors[i] = str(exc)
            log.warning("row %d: %s", i, exc)
            continue
        graphs.append(transform(g))
        keep.append(i)
    out = torch.full((len(smiles), lm.model.config.num_targets), math.nan)
    if graphs:
        loader = make_loader(graphs, lm.model.config, batch_size, shuffle=False)
        pred, _ = predict(
            lm.model, loader, lm.device, Precision(lm.config.precision, lm.device), progress
        )
        out[torch.tensor(keep)] = pred
    return out, errors
