r"""Where stores live: one folder for all of them, and each source's store in it.

One cache folder for all stores: ``cache_dir`` when given (the CLI's ``--cache-dir``), else
the ``GRAPHORMER_URPE_CACHE`` environment variable, else ``$XDG_CACHE_HOME/graphormer-urpe``
(``~/.cache/graphormer-urpe``). A store's folder is ``<cache>/<kind>/<label>-<key>/`` where
``key`` hashes the source's identity (the SHA-256 of its file(s)) with every option that
changes the stored graphs (featuriser, columns, limit, the format version): the same file with
the same options reuses its store, anything changed builds a new one next to it. Deleting a
store's folder is always safe: the next use builds it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from .format import CACHE_FORMAT

__all__ = ["CACHE_ENV", "default_cache_dir", "file_digest", "store_dir"]

CACHE_ENV = "GRAPHORMER_URPE_CACHE"
"""Environment variable naming the cache folder (overridden by an explicit ``cache_dir``)."""


def default_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$GRAPHORMER_URPE_CACHE``, else
    ``$XDG_CACHE_HOME/graphormer-urpe`` (``~/.cache/graphormer-urpe``)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "graphormer-urpe"


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def store_dir(
    kind: str, label: str, identity: dict[str, Any], cache_dir: str | os.PathLike[str] | None
) -> Path:
    """The folder of a source's store: ``<cache>/<kind>/<label>-<hash of identity>``.

    Args:
        kind: the source kind (``csv``, ``nci5k``, ``zinc``, ``ogbg``, ``pcqm``).
        label: a readable name (e.g. the file's stem), sanitised.
        identity: everything the stored graphs depend on (file digests, options).
        cache_dir: the cache folder (see :func:`default_cache_dir`).
    """
    payload = json.dumps({"format": CACHE_FORMAT, **identity}, sort_keys=True, default=str)
    key = hashlib.sha256(payload.encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:60] or "data"
    return default_cache_dir(cache_dir) / kind / f"{safe}-{key}"
