"""Training: the loop (a :class:`~graphormer_urpe.training.trainer.Trainer` made of its budget,
checkpoints, epoch loop and report), ensembles, pretrained weights and plots.

What prediction needs lives one layer down: :mod:`graphormer_urpe.inference` (loading a
checkpoint, predicting) over :mod:`graphormer_urpe.runtime` (configs, precision, captured
forwards, devices, loaders). Their public names are re-exported here, as before they moved.
The public names are imported from their modules on first use (PEP 562).
"""

from .._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "..io.checkpoint": ["CheckpointError", "load_checkpoint", "save_checkpoint"],
        "..runtime.config": ["TRAIN_PRESETS", "TrainConfig", "make_config"],
        ".ensemble": ["train_ensemble"],
        "..inference.ensemble": ["load_models"],
        "..inference.loading": ["LoadedModel", "evaluate_checkpoint", "load_model"],
        "..runtime.precision": ["Precision"],
        ".steps": ["linear_schedule", "masked_loss"],
        "..inference.prediction": ["predict"],
        "..runtime.inputs": ["resolve_device"],
        ".loop": ["train"],
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
        "..inference.stream": ["Prediction", "iter_predictions", "predict_smiles", "read_smiles"],
    },
)
