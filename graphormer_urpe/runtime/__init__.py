"""Runtime: what training and prediction both need. Run configs (:mod:`.train_config`), numeric
precision (:mod:`.precision`), captured forwards and steps as CUDA graphs (:mod:`.capture`),
the device and data inputs (:mod:`.run_inputs`), loaders, batch samplers and collate functions
(:mod:`.loaders`, :mod:`.sampler`) and the process group (:mod:`.distributed`).

The public names are imported from their modules on first use (PEP 562).
"""

from ..utils.lazy import lazy_exports, moved_modules

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".train_config": ["TRAIN_PRESETS", "TrainConfig", "make_config"],
        ".precision": ["Precision"],
        ".run_inputs": ["resolve_device"],
        ".loaders": ["loader_workers", "make_loader"],
        ".sampler": ["EpochBatchSampler"],
    },
)

# the old paths of renamed modules, deprecated
moved_modules(__name__, {"config": "train_config", "inputs": "run_inputs"})
