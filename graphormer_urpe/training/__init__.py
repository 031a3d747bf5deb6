"""Training: configs and presets, the loop, checkpoints, inference and plots.

The public names are imported from their modules on first use (PEP 562).
"""

from .._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".checkpoint": ["CheckpointError", "load_checkpoint", "save_checkpoint"],
        ".config": ["TRAIN_PRESETS", "TrainConfig", "make_config"],
        ".ensemble": ["load_models", "train_ensemble"],
        ".inference": ["LoadedModel", "evaluate_checkpoint", "load_model"],
        ".steps": ["Precision", "linear_schedule", "masked_loss"],
        ".prediction": ["predict"],
        ".inputs": ["resolve_device"],
        ".loop": ["train"],
        ".plots": ["plot_run"],
        ".pretrained": [
            "InitReport",
            "PretrainedSource",
            "convert_checkpoint",
            "export_huggingface",
            "init_from_checkpoint",
            "read_graphormer",
        ],
        ".stream": ["Prediction", "iter_predictions", "predict_smiles", "read_smiles"],
    },
)
