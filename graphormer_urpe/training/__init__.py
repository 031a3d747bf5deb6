"""Training: the loop, its budget and checkpoints, ensembles, pretrained weights and plots.

What prediction needs lives one layer down: :mod:`graphormer_urpe.inference` (loading a
checkpoint, predicting) over :mod:`graphormer_urpe.runtime` (configs, precision, captured
forwards, devices, loaders). Their public names are re-exported here, as before they moved.
The public names are imported from their modules on first use (PEP 562).
"""

from .._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".checkpoint": ["CheckpointError", "load_checkpoint", "save_checkpoint"],
        "..runtime.config": ["TRAIN_PRESETS", "TrainConfig", "make_config"],
        ".ensemble": ["train_ensemble"],
        "..inference.loading": ["LoadedModel", "evaluate_checkpoint", "load_model", "load_models"],
        "..runtime.precision": ["Precision"],
        ".steps": ["linear_schedule", "masked_loss"],
        "..inference.prediction": ["predict"],
        "..inference.engines.predict_io": ["Prediction", "read_smiles"],
        "..inference.engines.stream": ["iter_predictions", "predict_smiles"],
        "..runtime.inputs": ["resolve_device"],
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
    },
)
