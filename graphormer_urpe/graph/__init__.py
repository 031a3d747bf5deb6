"""Graphormer: structural features, dense batching, encodings and the model.

The public names are imported from their modules on first use (PEP 562).
"""

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".batch": ["GraphormerBatch", "GraphormerCollator", "collate"],
        ".config": ["PRESETS", "GraphormerConfig", "get_preset"],
        ".encodings": ["AttentionBias", "NodeEmbedding", "SpatialScale"],
        ".features": ["GraphStructure", "add_graphormer_features", "graph_structure"],
        ".interop": ["InteropError", "hf_inputs"],
        ".model": ["Graphormer", "GraphormerEncoder", "TransformHead"],
        ".transform": ["GraphormerFeatures"],
    },
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
