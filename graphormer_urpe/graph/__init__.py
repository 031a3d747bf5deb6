"""Graphormer: structural features, dense batching, encodings and the model."""

from .batch import GraphormerBatch, GraphormerCollator, collate
from .encodings import AttentionBias, NodeEmbedding, SpatialScale
from .features import (
    GraphormerFeatures,
    GraphStructure,
    add_graphormer_features,
    graph_structure,
)
from .interop import InteropError, hf_inputs
from .model import (
    PRESETS,
    Graphormer,
    GraphormerConfig,
    GraphormerEncoder,
    TransformHead,
    get_preset,
)

__all__ = [
    "AttentionBias",
    "Graphormer",
    "GraphormerBatch",
    "GraphormerCollator",
    "GraphormerConfig",
    "GraphormerEncoder",
    "GraphormerFeatures",
    "GraphStructure",
    "InteropError",
    "NodeEmbedding",
    "PRESETS",
    "SpatialScale",
    "TransformHead",
    "add_graphormer_features",
    "collate",
    "get_preset",
    "graph_structure",
    "hf_inputs",
]
