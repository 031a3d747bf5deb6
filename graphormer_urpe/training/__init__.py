"""Training: the loop (a :class:`~graphormer_urpe.training.trainer.Trainer` made of its budget,
checkpoints, epoch loop and report), ensembles, pretrained weights and plots.

What prediction needs lives one layer down: :mod:`graphormer_urpe.inference` (loading a
checkpoint, predicting) over :mod:`graphormer_urpe.runtime` (configs, precision, devices,
loaders), and checkpoints are :mod:`graphormer_urpe.io.checkpoint`'s. Their names were once
re-exported here: they still are (:data:`MOVED`), with a ``DeprecationWarning`` that names
their package. The public names are imported from their modules on first use (PEP 562).
"""

import importlib
import warnings
from typing import Any

from ..utils.lazy import lazy_exports, moved_modules

MOVED = {
    **dict.fromkeys(
        ["CheckpointError", "load_checkpoint", "save_checkpoint"], "graphormer_urpe.io.checkpoint"
    ),
    **dict.fromkeys(
        ["TRAIN_PRESETS", "TrainConfig", "make_config", "Precision", "resolve_device"],
        "graphormer_urpe.runtime",
    ),
    **dict.fromkeys(
        [
            "LoadedModel",
            "evaluate_checkpoint",
            "load_model",
            "load_models",
            "predict",
            "Prediction",
            "iter_predictions",
            "predict_smiles",
            "read_smiles",
        ],
        "graphormer_urpe.inference",
    ),
}
"""Names importable from here that belong to another package (name → that package):
deprecated here, to be imported from there."""

_exported, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".ensemble": ["train_ensemble"],
        ".steps": ["linear_schedule", "masked_loss"],
        ".run": ["train"],
        ".trainer": ["Trainer"],
        ".plots": ["plot_run"],
        ".pretrained": [
            "InitReport",
            "PretrainedSource",
            "convert_checkpoint",
            "export_huggingface",
            "init_from_checkpoint",
            "read_graphormer",
        ],
    },
)

# the old paths of renamed modules, deprecated
moved_modules(__name__, {"budget": "pacing", "loop": "run"})


def __getattr__(name: str) -> Any:
    """This package's public names (imported on first use), and the :data:`MOVED` ones with a
    ``DeprecationWarning``."""
    home = MOVED.get(name)
    if home is None:
        return _exported(name)
    warnings.warn(
        f"graphormer_urpe.training.{name} is deprecated: import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
