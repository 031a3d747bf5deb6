"""Runtime: what training and prediction both need. Run configs (:mod:`.config`), numeric
precision (:mod:`.precision`), captured forwards and steps as CUDA graphs (:mod:`.capture`),
the device and data inputs (:mod:`.inputs`), loaders, batch samplers and collate functions
(:mod:`.loaders`, :mod:`.sampler`) and the process group (:mod:`.distributed`).

The public names are imported from their modules on first use (PEP 562).
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".config": ["TRAIN_PRESETS", "TrainConfig", "make_config"],
        ".precision": ["Precision"],
        ".inputs": ["resolve_device"],
        ".loaders": ["loader_workers", "make_loader"],
        ".sampler": ["EpochBatchSampler"],
    },
)
