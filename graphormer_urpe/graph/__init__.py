"""Graphormer: structural features, dense batching, encodings and the model.

The public names are imported from their modules on first use (PEP 562).
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".batch": ["GraphormerBatch", "GraphormerCollator", "collate"],
        ".config": ["PRESETS", "GraphormerConfig", "get_preset"],
        ".encodings": ["AttentionBias", "NodeEmbedding", "SpatialScale"],
        ".structure": ["GraphStructure", "graph_structure"],
        ".add_features": ["add_graphormer_features"],
        ".published_weights": ["InteropError", "hf_inputs"],
        ".model": ["Graphormer", "GraphormerEncoder", "TransformHead"],
        ".transform": ["GraphormerFeatures"],
    },
)
