"""Loading what training wrote: a checkpoint (:func:`load_model`), or an ensemble folder's
members, checked to read and predict the same thing (:func:`load_models`), and evaluating a
checkpoint on a split (:func:`evaluate_checkpoint`).

Checkpoints carry their config, featuriser and target names, so nothing else is needed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..datasets.domain import split_similarity
from ..graph.model import Graphormer
from ..io.checkpoint import incompatible_checkpoint, load_checkpoint
from ..runtime.precision import Precision
from ..runtime.run_inputs import load_splits, resolve_device
from ..runtime.train_config import TrainConfig
from .intervals.calibration import calibration_report, load_calibration
from .prediction import predict_dataset
from .trees import Trees, dataset_inputs, load_embedder, load_trees, trees_folder

if TYPE_CHECKING:
    from ..datasets.domain import DomainRecord

__all__ = [
    "ENSEMBLE_FILE",
    "LoadedModel",
    "load_model",
    "load_models",
    "mean_and_std",
    "evaluate_checkpoint",
    "checkpoint_task_type",
]

log = logging.getLogger(__name__)

ENSEMBLE_FILE = "ensemble.json"
"""The file naming an ensemble folder's members (written by ``train --ensemble``)."""


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
    mol_features: dict | None = None
    """The run's per-molecule features and their normalisation (``--mol-features``), which
    new molecules get too; ``None``: none."""
    domain: DomainRecord | None = None
    """What the training molecules are made of, which new molecules are compared with
    (:mod:`~graphormer_urpe.datasets.domain`); ``None``: an older checkpoint without it."""
    trees: Trees | None = None
    """The trees head blended with the network (:mod:`~graphormer_urpe.inference.trees`);
    ``None``: the network alone."""
    embedder: Graphormer | None = None
    """The model whose graph token the trees read (``None``: none)."""

    def predict_dataset(
        self, dataset, batch_size: int | None = None, progress: bool = False, desc: str = ""
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Predictions ``[N, T]`` and targets (or ``None``) of a whole dataset, in order
        (:func:`~graphormer_urpe.inference.prediction.predict_dataset`, with the run's batch size
        and precision by default), blended with the trees head's where there is one."""
        cfg = self.config
        precision = Precision(cfg.precision, self.device)
        size = batch_size or cfg.batch_size
        pred, y = predict_dataset(self.model, dataset, size, self.device, precision, progress, desc)
        if self.trees is not None:
            x = dataset_inputs(
                dataset, self.embedder, size, self.device, precision, self.trees.fingerprints
            )
            pred = self.trees.blend(pred[None], self.trees.predict(x))[0]
        return pred, y


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
    domain = None
    if ckpt.get("domain"):
        from ..datasets.domain import DomainRecord

        domain = DomainRecord.from_dict(ckpt["domain"])
    trees = load_trees(path)
    embedder = None if trees is None else load_embedder(trees_folder(path), dev)
    return LoadedModel(
        model=model.to(dev).eval(),
        config=config,
        featurizer=ckpt.get("featurizer", "ogb"),
        target_names=list(ckpt.get("target_names", ["y"])),
        metric=ckpt.get("metric", "mae"),
        device=dev,
        task_type=checkpoint_task_type(ckpt),
        mol_features=ckpt.get("mol_features"),
        domain=domain,
        trees=trees,
        embedder=embedder,
    )


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


def evaluate_checkpoint(
    path: str | Path,
    split: str = "test",
    data_root: str | None = None,
    device: str = "auto",
    batch_size: int | None = None,
    progress: bool = True,
    store_dir: str | None = None,
    workers: int = 1,
) -> dict[str, float]:
    """The metric(s) of a checkpoint on ``split`` (``train``, ``valid`` or ``test``), read
    through the dataset's store (built first, with ``workers`` processes, when missing;
    ``store_dir`` overrides the folder the run used); with the checkpoint's calibrator, its
    interval coverage and width at :data:`~graphormer_urpe.inference.intervals.calibration.LEVELS`
    (``coverage_90``, ``width_90``, ...) or, binary tasks, the ECE before and after."""
    if split not in ("train", "valid", "test"):
        raise ValueError(f"split must be train, valid or test, got {split!r}")
    loaded = load_model(path, device)
    cfg = loaded.config
    if data_root is not None:
        cfg = replace(cfg, data_root=data_root)
    if store_dir is not None:
        cfg = replace(cfg, store_dir=store_dir)
    cfg = replace(cfg, preprocess_workers=workers)
    splits = load_splits(cfg, loaded.mol_features)
    dataset = getattr(splits, split)
    pred, y = loaded.predict_dataset(dataset, batch_size, progress, split)
    if y is None or not bool(torch.isfinite(y).any()):
        hint = " (write a submission with graphormer-urpe submit)" if y is not None else ""
        raise ValueError(
            f"the {split} split of {splits.name} has no targets to evaluate against{hint}"
        )
    result = splits.evaluate(pred, y)
    calibration = load_calibration(path)
    if calibration is not None:
        similarity = split_similarity(loaded.domain, dataset)
        result.update(calibration_report(calibration, pred[None], y, similarity=similarity))
    return {"dataset": splits.name, "split": split, "graphs": len(dataset), **result}
