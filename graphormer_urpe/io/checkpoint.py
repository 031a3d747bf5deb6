"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain Python values (no pickled objects): the run's
config as JSON, the model / optimizer / scheduler / grad-scaler states, the RNG states, and
the training position (epoch, step, best validation metric).

Checkpoints that ship inside the package are named in :data:`SHIPPED`: wherever a checkpoint
path is read, such a name (``pretrained``) stands for the shipped file, unless a file or
folder of that name exists.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .files import atomic_write_with as _atomic
from .files import torch_load_problem, write_atomic

__all__ = [
    "CheckpointError",
    "FORMAT",
    "write_atomic",
    "save_checkpoint",
    "load_checkpoint",
    "SHIPPED",
    "folder_problem",
    "resolve_checkpoint",
    "rng_state",
    "set_rng_state",
    "CheckpointKeeper",
    "incompatible_checkpoint",
    "torch_load_problem",
    "TrainingInterrupted",
    "stop_requests",
]

FORMAT = "graphormer-urpe/1"

SHIPPED: dict[str, str] = {"pretrained": "urpe-small-moses.pt"}
"""Names of the checkpoints shipped in ``graphormer_urpe/weights/`` (docs/guides/pretraining.md
says how each was made)."""
WEIGHTS = Path(__file__).resolve().parents[1] / "weights"


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """``path``, or the shipped file when ``path`` is a :data:`SHIPPED` name and no file or
    folder of that name exists.

    Raises:
        CheckpointError: a shipped name whose file is missing from this installation.
    """
    p = Path(path)
    if p.exists() or str(path) not in SHIPPED:
        return p
    shipped = WEIGHTS / SHIPPED[str(path)]
    if not shipped.is_file():
        raise CheckpointError(
            f"the shipped checkpoint {str(path)!r} ({shipped}) is missing from this installation"
        )
    return shipped


log = logging.getLogger(__name__)


def folder_problem(path: Path) -> str:
    """Why the folder ``path`` is not a checkpoint, naming the file it may mean."""
    files = [f for f in ("best.pt", "last.pt") if (path / f).is_file()]
    if files:
        return f"{path} is a run folder, not a checkpoint file: give {path / files[0]}" + (
            f" (or {path / files[1]})" if len(files) > 1 else ""
        )
    return (
        f"{path} is a folder that holds no checkpoint (no best.pt, last.pt or ensemble.json): "
        "give a best.pt / last.pt file or the folder of a train --ensemble run"
    )


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupted or from an incompatible version."""


def rng_state(device: torch.device | str | None = None) -> dict[str, Any]:
    """Python, numpy and torch RNG states as weights-only-loadable values.

    Args:
        device: the device the run computes on. For a CUDA device the state of that GPU's
            generator is included (``"cuda"``, a ``uint8`` tensor); other GPUs are not
            touched, so that no process initialises CUDA on a GPU it does not use.
    """
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
    cuda = _cuda_device(device)
    if cuda is not None:
        state["cuda"] = torch.cuda.get_rng_state(cuda)
    return state


def _cuda_device(device: torch.device | str | None) -> torch.device | None:
    """``device`` as a CUDA device with its index (``None`` for other devices)."""
    if device is None or torch.device(device).type != "cuda":
        return None
    device = torch.device(device)
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def set_rng_state(state: dict[str, Any], device: torch.device | str | None = None) -> None:
    """Restore the states captured by :func:`rng_state`.

    The CUDA state goes to ``device``'s generator, and only when ``device`` is a CUDA device.
    Checkpoints written before the CUDA state was per device hold a list with one state per
    GPU of the writing machine; ``device``'s entry is used where there is one.
    """
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
    cuda = _cuda_device(device)
    saved = state.get("cuda")
    if cuda is None or saved is None:
        return
    if isinstance(saved, (list, tuple)):  # one state per GPU of the machine that wrote it
        if cuda.index >= len(saved):
            msg = "the checkpoint holds no RNG state for %s; its generator keeps its state"
            log.warning(msg, cuda)
            return
        saved = saved[cuda.index]
    torch.cuda.set_rng_state(saved, cuda)


@contextlib.contextmanager
def incompatible_checkpoint(path: str | os.PathLike) -> Iterator[None]:
    """Turn a failure to restore a checkpoint's contents into a one-line :class:`CheckpointError`.

    Wrap the code that rebuilds a config and loads state dicts from a checkpoint: missing keys,
    unknown config fields and mismatched tensor shapes then read
    ``checkpoint PATH does not match its config: <first line of the error>``.
    """
    try:
        yield
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        if isinstance(exc, KeyError) and exc.args:
            first = f"it has no {exc.args[0]!r} entry"
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {path} does not match its config: {first}") from exc


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
    path = resolve_checkpoint(path)
    if path.is_dir():
        raise CheckpointError(folder_problem(path))
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, random bytes, pickled objects, ...
        problem = torch_load_problem(path, exc)
        raise CheckpointError(f"checkpoint {path} cannot be read: {problem}") from exc
    if not isinstance(ckpt, dict) or "format" not in ckpt:
        what = (
            f"a dict without a 'format' entry (keys: {', '.join(map(str, list(ckpt)[:6]))})"
            if isinstance(ckpt, dict)
            else f"a {type(ckpt).__name__}"
        )
        raise CheckpointError(
            f"{path} is not a graphormer-urpe checkpoint: it is a PyTorch file holding {what}"
        )
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


class CheckpointKeeper:
    """The rolling training checkpoints of a run folder.

    Every save writes ``checkpoints/step-<step>.pt`` atomically, points ``last.pt`` at it (a
    hard link, or a copy where links are not supported) and deletes all but the newest ``keep``
    step files. :meth:`latest` finds the checkpoint to resume from: ``last.pt``, or, when it
    is missing or unreadable, the newest readable step file.

    Args:
        out: the run folder.
        keep: step checkpoints to keep (at least 1).
    """

    _NAME = re.compile(r"^step-(\d+)\.pt$")

    def __init__(self, out: str | os.PathLike, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep_checkpoints must be at least 1, got {keep}")
        self.out = Path(out)
        self.dir = self.out / "checkpoints"
        self.keep = keep

    @property
    def last(self) -> Path:
        return self.out / "last.pt"

    def step_files(self) -> list[Path]:
        """Step checkpoints, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [
            (int(m.group(1)), f) for f in self.dir.iterdir() if (m := self._NAME.match(f.name))
        ]
        return [f for _, f in sorted(found)]

    def save(self, state: dict[str, Any], step: int) -> Path:
        """Write ``state`` as the checkpoint of ``step``; returns its path."""
        path = self.dir / f"step-{step:09d}.pt"
        save_checkpoint(path, state)
        fd, tmp = tempfile.mkstemp(prefix=".last.pt.", suffix=".tmp", dir=self.out)
        os.close(fd)
        os.unlink(tmp)
        try:
            os.link(path, tmp)
        except OSError:  # no hard links here: copy instead
            shutil.copyfile(path, tmp)
        os.replace(tmp, self.last)
        for old in self.step_files()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def latest(self) -> tuple[Path, dict] | None:
        """``(path, checkpoint)`` to resume from, or ``None`` when the run has none.

        Raises:
            CheckpointError: checkpoints exist but none of them can be read.
        """
        candidates = [self.last] if self.last.exists() else []
        candidates += self.step_files()[::-1]
        errors = []
        for path in candidates:
            try:
                return path, load_checkpoint(path)
            except CheckpointError as exc:
                log.warning("%s; trying an older checkpoint", exc)
                errors.append(str(exc))
        if errors:
            raise CheckpointError(errors[0])
        return None


class TrainingInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT stopped training; a checkpoint of the exact position was saved.

    Attributes:
        signum: the signal received.
        checkpoint: the checkpoint written before stopping (``None`` on processes other than
            rank 0, which do not write).
    """

    def __init__(self, signum: int, checkpoint: Path | None) -> None:
        self.signum = signum
        self.checkpoint = checkpoint
        name = signal.Signals(signum).name
        where = f"checkpoint saved to {checkpoint}" if checkpoint else "checkpoint saved by rank 0"
        super().__init__(f"{name} received: {where}; continue with --resume")


@contextlib.contextmanager
def stop_requests() -> Iterator[dict[str, int]]:
    """Turn SIGTERM / SIGINT into a request to stop after the current step (twice: at once).

    Yields ``{"signal": signum}``, 0 until a signal arrives; the handlers are restored on exit
    (outside the main thread, where signals cannot be handled, nothing is installed)."""
    flag = {"signal": 0}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        if flag["signal"]:  # asked twice: stop now, without a checkpoint
            raise KeyboardInterrupt
        flag["signal"] = signum
        log.warning("%s received: saving a checkpoint after this step", signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
