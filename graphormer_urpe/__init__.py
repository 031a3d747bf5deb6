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

from .utils import clock  # noqa: F401 - first: the package's import time, before torch
from .utils.lazy import lazy_exports

# Every public name is imported from its module on first use (PEP 562): importing the package,
# or its command line, costs nothing until a name is needed.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".attention.multihead": ["URPEAttention"],
        ".attention.core": ["urpe_attention"],
        ".encoder": ["Encoder", "EncoderLayer"],
        ".graph.batch": ["GraphormerBatch", "GraphormerCollator", "collate"],
        ".graph.model_config": ["PRESETS", "GraphormerConfig", "get_preset"],
        ".graph.add_features": ["add_graphormer_features"],
        ".graph.structure": ["graph_structure"],
        ".graph.model": ["Graphormer", "GraphormerEncoder"],
        ".graph.transform": ["GraphormerFeatures"],
        ".training.pretrained": [
            "convert_checkpoint",
            "export_huggingface",
            "init_from_checkpoint",
            "read_graphormer",
        ],
        ".inference.engines.predict_io": ["Prediction"],
        ".inference.engines.stream": ["iter_predictions"],
    },
)

__version__ = "0.1.0"

__all__ += ["__version__"]
