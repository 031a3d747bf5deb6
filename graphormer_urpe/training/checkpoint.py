"""Checkpoints, where they were first: the code is in :mod:`graphormer_urpe.io.checkpoint`
(below ``training`` and ``sequence``, which both write them)."""

from ..io.checkpoint import (
    FORMAT,
    SHIPPED,
    WEIGHTS,
    CheckpointError,
    CheckpointKeeper,
    TrainingInterrupted,
    folder_problem,
    incompatible_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    stop_requests,
    torch_load_problem,
    write_atomic,
)

__all__ = [
    "CheckpointError",
    "CheckpointKeeper",
    "FORMAT",
    "SHIPPED",
    "TrainingInterrupted",
    "WEIGHTS",
    "folder_problem",
    "incompatible_checkpoint",
    "load_checkpoint",
    "resolve_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "stop_requests",
    "torch_load_problem",
    "write_atomic",
]
