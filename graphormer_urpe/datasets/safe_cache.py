"""Processed PyG caches read without unpickling anything but tensors and plain values.

PyTorch Geometric's ``InMemoryDataset`` reads its ``pre_transform.pt`` / ``pre_filter.pt``
records with ``torch.load(weights_only=False)`` and, when a processed file needs a global that
``weights_only=True`` does not allow, falls back to ``weights_only=False`` as well: a crafted
cache file would then run code. :class:`SafeInMemoryDataset` closes both doors:

* the two records are checked with ``weights_only=True`` before PyG looks at them; a record
  that is unreadable or differs from this dataset's ``pre_transform`` makes the dataset
  re-process (PyG then never loads it);
* the processed ``(data, slices, data_cls)`` file is loaded with ``weights_only=True`` only;
  a file that cannot be loaded that way is an error naming it (delete it to re-process).
"""

from __future__ import annotations

import logging
import os
import os.path as osp
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.data import BaseData

__all__ = ["SafeInMemoryDataset", "pyg_repr", "record_matches", "load_processed", "save_processed"]

logger = logging.getLogger(__name__)


def pyg_repr(obj: object) -> str:
    """The string PyG stores in ``pre_transform.pt`` for ``obj`` (``"None"`` for ``None``)."""
    return "None" if obj is None else re.sub(r"(<.*?)\s.*(>)", r"\1\2", str(obj))


def record_matches(path: str, expected: str) -> bool:
    """Whether the PyG record at ``path`` is, read safely, the plain string ``expected``."""
    try:
        return torch.load(path, weights_only=True) == expected
    except Exception:
        return False


def load_processed(path: str, what: str) -> tuple[Any, dict]:
    """``(data, slices)`` of a PyG processed file, read with ``weights_only=True`` only.

    Args:
        path: the processed ``.pt`` file.
        what: the dataset's name, for the error message.

    Raises:
        ValueError: the file cannot be loaded safely (names the file and the problem).
    """
    try:
        out = torch.load(path, weights_only=True)
        if len(out) == 3:
            data, slices, data_cls = out
        else:
            (data, slices), data_cls = out, Data
        if isinstance(data, dict):
            data = data_cls.from_dict(data)
        return data, slices
    except Exception as exc:
        from ..training.checkpoint import torch_load_problem

        raise ValueError(
            f"processed {what} file {path} cannot be loaded safely: "
            f"{torch_load_problem(path, exc)}; delete it to re-process"
        ) from None


def save_processed(data_list: Sequence[BaseData], path: str) -> None:
    """Collate ``data_list`` and write it to ``path`` as PyG does, atomically (temporary file
    and rename), so an interrupted processing run never leaves a half-written cache."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        InMemoryDataset.save(data_list, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class SafeInMemoryDataset(InMemoryDataset):
    """An ``InMemoryDataset`` whose processed cache is only ever read with
    ``weights_only=True`` (see the module docstring). Subclasses keep PyG's API."""

    def _process(self) -> None:
        for record, expected in (
            ("pre_transform.pt", self.pre_transform),
            ("pre_filter.pt", self.pre_filter),
        ):
            path = osp.join(self.processed_dir, record)
            if not self.force_reload and osp.exists(path):
                if not record_matches(path, pyg_repr(expected)):
                    logger.warning(
                        "%s: re-processing (its record %s differs)", type(self).__name__, path
                    )
                    self.force_reload = True
        super()._process()

    def load(self, path: str, data_cls: type = Data) -> None:
        """Load ``(data, slices)`` from ``path`` safely (never ``weights_only=False``)."""
        self.data, self.slices = load_processed(path, type(self).__name__)
