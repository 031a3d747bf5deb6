r"""Graphormer's per-graph structural features: the public names, from the modules that hold
the code.

* :mod:`.structure`: shortest paths (``spatial_pos``, 510 when unreachable), path bond
  features (``edge_input``) and degrees of one graph, exactly as Microsoft's Graphormer
  preprocessing computes them, in vectorised numpy (:func:`graph_structure`);
* :mod:`.add_features`: the same for many graphs at once (:func:`add_graphormer_features`,
  through the batched code of :mod:`.fast_features`);
* :mod:`.transform`: :class:`GraphormerFeatures`, the PyG ``BaseTransform`` that stores them
  (imported on first use: the rest needs no ``torch_geometric``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import structure
from .add_features import add_graphormer_features
from .structure import *  # noqa: F403 - the public names of the per-graph code

if TYPE_CHECKING:
    from .transform import GraphormerFeatures

__all__ = [*structure.__all__, "GraphormerFeatures", "add_graphormer_features"]


def __getattr__(name: str) -> Any:
    """:class:`GraphormerFeatures`, a PyG ``BaseTransform``, from
    :mod:`graphormer_urpe.graph.transform` on first use: the structural features here need no
    ``torch_geometric``, the transform does."""
    if name == "GraphormerFeatures":
        from .transform import GraphormerFeatures

        return GraphormerFeatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
