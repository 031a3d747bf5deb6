"""The defaults of the prediction engines: streaming (:mod:`.stream`) and Ray (:mod:`.ray`).

Plain numbers, no torch: ``graphormer-urpe predict --help`` shows them without importing the
model.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_OBJECT_STORE_MIB",
    "DEFAULT_ROWS_PER_BLOCK",
    "DEFAULT_WORKERS",
]

DEFAULT_BATCH_SIZE = 256
"""Valid molecules per model batch."""
DEFAULT_CHUNK_SIZE = 1000
"""SMILES per featurisation task sent to a worker process."""
DEFAULT_WORKERS = 2
"""Featurisation processes (0: featurise in the calling process)."""
DEFAULT_ROWS_PER_BLOCK = 4096
"""The Ray engine (:mod:`.ray.engine`): input rows an actor featurises and predicts per call."""
DEFAULT_OBJECT_STORE_MIB = 512
"""The Ray engine: the object store of a cluster it starts (MiB), which bounds the blocks in
flight."""
