"""Graphormer: structural features, dense batching, encodings and the model."""

from .batch import GraphormerBatch, GraphormerCollator, collate
from .encodings import AttentionBias, NodeEmbedding, SpatialScale
from .features import (
    GraphormerFeatures,
    GraphStructure,
    add_graphormer_features,
    graph_structure,
)
from .model import PRESETS, Graphormer, GraphormerConfig, GraphormerEncoder, get_preset

__all__ = [
    "AttentionBias",
    "Graphormer",
    "GraphormerBatch",
    "GraphormerCollator",
    "GraphormerConfig",
    "GraphormerEncoder",
    "GraphormerFeatures",
    "GraphStructure",
    "NodeEmbedding",
    "PRESETS",
    "SpatialScale",
    "add_graphormer_features",
    "collate",
    "get_preset",
    "graph_structure",
]
