"""graphormer-urpe: Universal RPE attention and Graphormer on PyTorch Geometric.

The public API::

    from graphormer_urpe import (
        URPEAttention, urpe_attention,            # the attention core
        Encoder, EncoderLayer,                    # transformer stacks threading B and C
        GraphormerFeatures,                       # PyG transform (pre_transform or transform)
        collate, GraphormerCollator, GraphormerBatch,
        Graphormer, GraphormerEncoder, GraphormerConfig, PRESETS, get_preset,
        read_graphormer, convert_checkpoint,      # published weights (Hugging Face, fairseq)
        export_huggingface, init_from_checkpoint,
        iter_predictions, Prediction,             # stream predictions for any SMILES iterable
    )
"""

from . import _clock  # noqa: F401 - first: the package's import time, before torch
from .attention import URPEAttention, urpe_attention
from .encoder import Encoder, EncoderLayer
from .graph import (
    PRESETS,
    Graphormer,
    GraphormerBatch,
    GraphormerCollator,
    GraphormerConfig,
    GraphormerEncoder,
    GraphormerFeatures,
    add_graphormer_features,
    collate,
    get_preset,
    graph_structure,
)
from .training.pretrained import (
    convert_checkpoint,
    export_huggingface,
    init_from_checkpoint,
    read_graphormer,
)
from .training.stream import Prediction, iter_predictions

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "Encoder",
    "EncoderLayer",
    "Graphormer",
    "GraphormerBatch",
    "GraphormerCollator",
    "GraphormerConfig",
    "GraphormerEncoder",
    "GraphormerFeatures",
    "Prediction",
    "URPEAttention",
    "add_graphormer_features",
    "collate",
    "convert_checkpoint",
    "export_huggingface",
    "get_preset",
    "graph_structure",
    "init_from_checkpoint",
    "iter_predictions",
    "read_graphormer",
    "urpe_attention",
    "__version__",
]
