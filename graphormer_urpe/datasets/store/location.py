r"""Where stores live: one folder for all of them, and each source's store in it.

One store folder for all stores: ``store_dir`` when given (the CLI's ``--store-dir``), else
the ``GRAPHORMER_URPE_STORE`` environment variable, else ``$XDG_CACHE_HOME/graphormer-urpe``
(``~/.cache/graphormer-urpe``: stores can always be rebuilt, so they live with the user's
caches). A store's folder is ``<store_dir>/<kind>/<label>-<key>/`` where ``key`` hashes the
source's identity (the SHA-256 of its file(s)) with every option that changes the stored graphs
(featuriser, columns, limit, the format version): the same file with the same options reuses
its store, anything changed builds a new one next to it. Deleting a store's folder is always
safe: the next use builds it again.

The environment variable's previous name, ``GRAPHORMER_URPE_CACHE``, is still read (with a
logged warning) until the next minor release.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from .format import STORE_FORMAT

__all__ = ["STORE_ENV", "default_store_dir", "file_digest", "store_folder"]

logger = logging.getLogger(__name__)

STORE_ENV = "GRAPHORMER_URPE_STORE"
"""Environment variable naming the store folder (overridden by an explicit ``store_dir``)."""

OLD_STORE_ENV = "GRAPHORMER_URPE_CACHE"
"""The variable's previous name, read when :data:`STORE_ENV` is not set (deprecated: it goes
in the next minor release)."""


@functools.cache
def _warn_old_env() -> None:
    """Say once per process that :data:`OLD_STORE_ENV` is deprecated."""
    logger.warning("%s is deprecated: set %s instead", OLD_STORE_ENV, STORE_ENV)


def default_store_dir(store_dir: str | os.PathLike[str] | None = None) -> Path:
    """The store folder: ``store_dir``, else ``$GRAPHORMER_URPE_STORE`` (else the deprecated
    ``$GRAPHORMER_URPE_CACHE``), else ``$XDG_CACHE_HOME/graphormer-urpe``
    (``~/.cache/graphormer-urpe``)."""
    if store_dir is not None:
        return Path(store_dir).expanduser()
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    if os.environ.get(OLD_STORE_ENV):
        _warn_old_env()
        return Path(os.environ[OLD_STORE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "graphormer-urpe"


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def store_folder(
    kind: str, label: str, identity: dict[str, Any], store_dir: str | os.PathLike[str] | None
) -> Path:
    """The folder of a source's store: ``<store_dir>/<kind>/<label>-<hash of identity>``.

    Args:
        kind: the source kind (``csv``, ``nci5k``, ``zinc``, ``ogbg``, ``pcqm``).
        label: a readable name (e.g. the file's stem), sanitised.
        identity: everything the stored graphs depend on (file digests, options).
        store_dir: the folder of all stores (see :func:`default_store_dir`).
    """
    payload = json.dumps({"format": STORE_FORMAT, **identity}, sort_keys=True, default=str)
    key = hashlib.sha256(payload.encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:60] or "data"
    return default_store_dir(store_dir) / kind / f"{safe}-{key}"
