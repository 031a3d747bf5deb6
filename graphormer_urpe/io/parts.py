"""A checkpoint written as several part files of bounded size, and read back whole.

Some transfers and stores take files of limited size only (for example at most 16 MiB a file):
:func:`save_in_parts` writes ``torch.save(state)`` (zlib-compressed, so that runs of zeros such
as the optimizer moments of embedding rows never used take little room) as ``<name>.part000``,
``<name>.part001``, ... of at most ``part_bytes`` each, then ``<name>.parts.json``, the
manifest: every part's size and SHA-256 and the whole stream's. The manifest is written last,
each file atomically, so a reader sees a complete set or an error, never a mixture.
:func:`load_from_parts` checks every part against the manifest, joins them, and loads the
state with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zlib
from pathlib import Path
from typing import Any

import torch

from .checkpoint import CheckpointError
from .files import torch_load_problem, write_atomic

__all__ = ["PART_BYTES", "PARTS_FORMAT", "save_in_parts", "load_from_parts", "parts_manifest"]

PART_BYTES = 15 * 2**20
"""Default largest part (15 MiB: under a 16 MiB limit per file)."""
PARTS_FORMAT = "graphormer-urpe/parts-1"
_LEVEL = 1  # zlib's fastest: fp32 weights do not compress at any level, zeros do at all


def _manifest_path(folder: Path, name: str) -> Path:
    return folder / f"{name}.parts.json"


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def save_in_parts(
    folder: str | os.PathLike,
    name: str,
    state: dict[str, Any],
    part_bytes: int = PART_BYTES,
) -> dict[str, Any]:
    """Write ``state`` (tensors and plain values) as parts of at most ``part_bytes`` bytes.

    Args:
        folder: where the parts and the manifest go (created).
        name: the files' stem: ``<name>.part<k>`` and ``<name>.parts.json``.
        state: what ``torch.save`` can write and ``torch.load(weights_only=True)`` can read.
        part_bytes: the largest part, in bytes (at least 1).

    Returns:
        The manifest (also written): ``format``, ``compression``, ``raw_bytes`` (the
        ``torch.save`` stream), ``bytes`` and ``sha256`` of the stored stream, and ``parts``,
        one ``{"file", "bytes", "sha256"}`` per part.
    """
    if part_bytes < 1:
        raise ValueError(f"part_bytes must be at least 1, got {part_bytes}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    raw = buf.getbuffer()
    stored = zlib.compress(raw, _LEVEL)
    view = memoryview(stored)
    parts = []
    for k, start in enumerate(range(0, max(len(stored), 1), part_bytes)):
        chunk = view[start : start + part_bytes]
        file = f"{name}.part{k:03d}"
        write_atomic(folder / file, bytes(chunk))
        parts.append({"file": file, "bytes": len(chunk), "sha256": _sha256(chunk)})
    manifest = {
        "format": PARTS_FORMAT,
        "compression": "zlib",
        "raw_bytes": len(raw),
        "bytes": len(stored),
        "sha256": _sha256(stored),
        "parts": parts,
    }
    write_atomic(_manifest_path(folder, name), json.dumps(manifest, indent=1))
    keep = {p["file"] for p in parts}
    for old in folder.glob(f"{name}.part[0-9][0-9][0-9]"):  # left by a larger earlier state
        if old.name not in keep:
            old.unlink(missing_ok=True)
    return manifest


def parts_manifest(folder: str | os.PathLike, name: str) -> dict[str, Any] | None:
    """The manifest of ``name`` in ``folder``, or ``None`` when there is none.

    Raises:
        CheckpointError: the manifest is not valid JSON or not of :data:`PARTS_FORMAT`.
    """
    path = _manifest_path(Path(folder), name)
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} cannot be read: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != PARTS_FORMAT:
        raise CheckpointError(f"{path} is not a manifest of format {PARTS_FORMAT!r}")
    return manifest


def load_from_parts(
    folder: str | os.PathLike, name: str, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """The state that :func:`save_in_parts` wrote as ``name`` in ``folder``.

    Raises:
        CheckpointError: no manifest, a part missing, of the wrong size or content (the file
            is named), or a stream that safe loading refuses.
    """
    folder = Path(folder)
    manifest = parts_manifest(folder, name)
    if manifest is None:
        raise CheckpointError(f"no {_manifest_path(folder, name).name} in {folder}")
    chunks = []
    for part in manifest["parts"]:
        path = folder / part["file"]
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (listed in {name}.parts.json)")
        data = path.read_bytes()
        if len(data) != part["bytes"] or _sha256(data) != part["sha256"]:
            raise CheckpointError(
                f"{path} is not the part its manifest lists ({len(data)} bytes, expected "
                f"{part['bytes']}, or different content): copy the whole set again"
            )
        chunks.append(data)
    stored = b"".join(chunks)
    if _sha256(stored) != manifest["sha256"]:
        raise CheckpointError(f"the parts of {name} in {folder} do not join to the saved stream")
    raw = zlib.decompress(stored) if manifest["compression"] == "zlib" else stored
    try:
        state = torch.load(io.BytesIO(raw), map_location=map_location, weights_only=True)
    except Exception as exc:
        problem = torch_load_problem(folder / manifest["parts"][0]["file"], exc)
        raise CheckpointError(f"the state {name} in {folder} cannot be read: {problem}") from exc
    return state
