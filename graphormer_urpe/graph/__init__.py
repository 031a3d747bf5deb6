"""Graphormer: structural features, dense batching, encodings and the model.

The public names are imported from their modules on first use (PEP 562).
"""

from ..utils.lazy import lazy_exports, moved_modules

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".batch": ["GraphormerBatch", "GraphormerCollator", "collate"],
        ".model_config": ["PRESETS", "GraphormerConfig", "get_preset"],
        ".encodings": ["AttentionBias", "NodeEmbedding", "SpatialScale"],
        ".structure": ["GraphStructure", "graph_structure"],
        ".add_features": ["add_graphormer_features"],
        ".published_weights": ["InteropError", "hf_inputs"],
        ".model": ["Graphormer", "GraphormerEncoder", "TransformHead"],
        ".transform": ["GraphormerFeatures"],
    },
)

# the old paths of renamed modules, deprecated
moved_modules(__name__, {"config": "model_config"})
