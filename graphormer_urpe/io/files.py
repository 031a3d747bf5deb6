"""Atomic writes, and why a safe ``torch.load`` failed (imports nothing from this library)."""

from __future__ import annotations

import os
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write_with", "write_atomic", "torch_load_problem"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_with(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(file)`` on a temporary file in the same folder, flushed to
    disk, then renamed over ``path``: readers see the old or the new file, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (``str``: as UTF-8) to ``path`` through a temporary file in the same
    folder, flushed to disk, then renamed over ``path``: readers see the old or the new file,
    never a part of it."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    atomic_write_with(path, lambda fh: fh.write(raw))


def torch_load_problem(path: str | os.PathLike, exc: BaseException) -> str:
    """What is wrong with a file that ``torch.load(path, weights_only=True)`` failed on, in
    words (``exc`` is its exception): empty, not a PyTorch file, a truncated or damaged zip
    archive, or pickled content that safe loading refuses (naming the refused global)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as err:
        return f"the file cannot be opened ({err.strerror or err})"
    if size == 0:
        return "the file is empty (0 bytes)"
    text = str(exc)
    if head.startswith(b"PK"):  # torch.save's zip container
        try:
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            return (
                f"the zip archive is truncated or damaged ({size:,} bytes; {err}); "
                "the file was cut short or overwritten"
            )
        if bad is not None:
            return f"the zip archive is damaged: its member {bad} fails the CRC check"
    elif not head.startswith(b"\x80"):  # neither a zip archive nor a pickle
        return (
            f"it is not a PyTorch file (it starts with {head!r}; torch.save writes a zip "
            "archive starting with b'PK')"
        )
    if m := re.search(r"GLOBAL ([\w.]+)", text):
        return (
            f"it holds a pickled Python object ({m.group(1)}), which safe loading "
            "(weights_only=True) refuses as unsafe; only tensors and plain values are loaded, "
            "so it was not written by this library or was altered"
        )
    if m := re.search(r"Unsupported operand (\d+)", text):
        return (
            f"it holds pickle instructions that safe loading (weights_only=True) refuses "
            f"(opcode {int(m.group(1))}); it is not a plain tensor file"
        )
    first = text.strip().splitlines()[0] if text.strip() else ""
    if isinstance(exc, KeyError) or not first or first.isdigit():
        return f"its contents are corrupted ({type(exc).__name__} while unpickling)"
    return f"its contents are corrupted ({type(exc).__name__}: {first})"
