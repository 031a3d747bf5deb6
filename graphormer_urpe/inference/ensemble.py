"""Loading an ensemble folder for prediction: its members, checked to read and predict the same
thing, and the mean and spread of their predictions."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .loading import LoadedModel, load_model

__all__ = ["ENSEMBLE_FILE", "load_models", "mean_and_std"]

ENSEMBLE_FILE = "ensemble.json"
"""The file naming an ensemble folder's members (written by ``train --ensemble``)."""


def load_models(path: str | Path, device: str = "auto") -> list[LoadedModel]:
    """The model(s) of a checkpoint file, or every member of an ensemble folder.

    Raises:
        ValueError: the members disagree on what they read or predict.
    """
    path = Path(path)
    if not (path.is_dir() and (path / ENSEMBLE_FILE).exists()):
        return [load_model(path, device)]
    spec = json.loads((path / ENSEMBLE_FILE).read_text())
    models = [load_model(path / m / "best.pt", device) for m in spec["members"]]
    first = models[0]
    for m, name in zip(models[1:], spec["members"][1:], strict=True):
        same = (
            m.featurizer == first.featurizer
            and m.target_names == first.target_names
            and m.task_type == first.task_type
            and m.model.config.multi_hop_max_dist == first.model.config.multi_hop_max_dist
            and m.model.config.spatial_pos_max == first.model.config.spatial_pos_max
        )
        if not same:
            raise ValueError(f"{path}: member {name} does not read or predict what the first does")
    return models


def mean_and_std(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[K, T]`` member values → ``([T] mean, [T] population std)``."""
    mean = values.mean(dim=0)
    return mean, values.sub(mean).pow(2).mean(dim=0).sqrt()
