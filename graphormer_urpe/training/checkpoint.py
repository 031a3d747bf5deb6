"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain Python values (no pickled objects): the run's
config as JSON, the model / optimizer / scheduler / grad-scaler states, the RNG states, and
the training position (epoch, step, best validation metric).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CheckpointError",
    "FORMAT",
    "atomic_write_bytes",
    "atomic_write_text",
    "save_checkpoint",
    "load_checkpoint",
    "rng_state",
    "set_rng_state",
]

FORMAT = "graphormer-urpe/1"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupted or from an incompatible version."""


def _atomic(path: str | os.PathLike, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename."""
    _atomic(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) RNG states as weights-only-loadable values."""
    np_state = np.random.get_state()  # noqa: NPY002 - the global RNG is what we restore
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the states captured by :func:`rng_state`."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state(  # noqa: NPY002
        (
            "MT19937",
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Save ``state`` (plus the format tag) atomically to ``path``."""
    payload = {"format": FORMAT, **state}
    _atomic(path, lambda fh: torch.save(payload, fh))


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint safely (``weights_only=True``), with one-line errors.

    Raises:
        CheckpointError: the file is missing, unreadable, not a checkpoint of this library, or
            of an incompatible format version.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, random bytes, pickled objects, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {path} cannot be read (truncated, corrupted or unsafe): {first}"
        ) from exc
    if not isinstance(ckpt, dict) or "format" not in ckpt:
        raise CheckpointError(f"{path} is not a graphormer-urpe checkpoint")
    if ckpt["format"] != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} has format {ckpt['format']!r}; this version reads {FORMAT!r}"
        )
    if "config" in ckpt and isinstance(ckpt["config"], str):
        try:
            ckpt["config"] = json.loads(ckpt["config"])
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"checkpoint {path} holds an unreadable config: {exc}") from exc
    return ckpt
