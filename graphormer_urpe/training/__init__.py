"""Training: configs and presets, the loop, checkpoints, inference and plots."""

from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .config import TRAIN_PRESETS, TrainConfig, make_config
from .ensemble import load_models, train_ensemble
from .inference import LoadedModel, evaluate_checkpoint, load_model, predict_smiles
from .loop import Precision, linear_schedule, masked_loss, predict, resolve_device, train
from .plots import plot_run
from .pretrained import (
    InitReport,
    PretrainedSource,
    convert_checkpoint,
    export_huggingface,
    init_from_checkpoint,
    read_graphormer,
)
from .stream import Prediction, iter_predictions, read_smiles

__all__ = [
    "CheckpointError",
    "InitReport",
    "LoadedModel",
    "PretrainedSource",
    "Prediction",
    "Precision",
    "TRAIN_PRESETS",
    "TrainConfig",
    "convert_checkpoint",
    "evaluate_checkpoint",
    "export_huggingface",
    "init_from_checkpoint",
    "iter_predictions",
    "linear_schedule",
    "load_checkpoint",
    "load_model",
    "load_models",
    "make_config",
    "masked_loss",
    "plot_run",
    "predict",
    "predict_smiles",
    "read_graphormer",
    "read_smiles",
    "resolve_device",
    "save_checkpoint",
    "train",
    "train_ensemble",
]
