"""Graphormer: structural features, dense batching, encodings and the model."""

from .batch import GraphormerBatch, GraphormerCollator, collate
from .encodings import AttentionBias, NodeEmbedding, SpatialScale
from .features import GraphormerFeatures, GraphStructure, graph_structure
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
    "collate",
    "get_preset",
    "graph_structure",
]
