"""Deprecated: the names once gathered here live in the modules that hold their code, and
still resolve here, with a ``DeprecationWarning``, until the next minor release.

* :mod:`graphormer_urpe.graph.structure`: :func:`~graphormer_urpe.graph.structure.graph_structure`
  and the other per-graph names;
* :mod:`graphormer_urpe.graph.add_features`: ``add_graphormer_features``;
* :mod:`graphormer_urpe.graph.transform`: ``GraphormerFeatures`` (PyG's ``BaseTransform``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import structure

_HOMES = {
    **dict.fromkeys(structure.__all__, "structure"),
    "add_graphormer_features": "add_features",
    "GraphormerFeatures": "transform",
}
"""Name → the module of :mod:`graphormer_urpe.graph` that defines it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"graphormer_urpe.graph.features.{name} is deprecated: import it from "
        f"graphormer_urpe.graph.{home} (the old path goes in the next minor release)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(f".{home}", __package__), name)
