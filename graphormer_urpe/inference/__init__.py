"""Inference: what runs after training. Loading a checkpoint or an ensemble folder, predicting
a dataset or a stream of SMILES, evaluating a checkpoint on a split, OGB-LSC submissions;
explaining predictions atom by atom (:mod:`graphormer_urpe.inference.explain`); embeddings for
other models (:mod:`graphormer_urpe.inference.embeddings`).

It builds on :mod:`graphormer_urpe.runtime` and never imports :mod:`graphormer_urpe.training`
(which may import it). The public names are imported from their modules on first use (PEP 562).
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".loading": ["LoadedModel", "evaluate_checkpoint", "load_model"],
        ".ensemble": ["load_models", "mean_and_std"],
        ".prediction": ["predict", "predict_dataset"],
        ".stream": ["Prediction", "iter_predictions", "predict_smiles", "read_smiles"],
        ".submit": ["submit_checkpoint"],
        ".embeddings_io": ["embed_smiles", "write_embeddings"],
    },
)
