"""Inference: what runs after training, a folder or a module per feature.

* :mod:`.loading`: a checkpoint or an ensemble folder, loaded (:func:`~.loading.load_model`,
  :func:`~.loading.load_models`), and a checkpoint evaluated on a split;
* :mod:`.prediction`: a model's predictions over a loader, a dataset, or a split shared among
  processes;
* :mod:`.embeddings`: the graph-level vector the head reads; :mod:`.trees`: the trees head
  blended with the network;
* :mod:`.intervals`: how sure a prediction is (calibrators, intervals, calibrated
  probabilities);
* :mod:`.engines`: predicting many molecules: SMILES in, rows out, in input order, in this
  machine's processes (:mod:`.engines.stream`) or on a Ray cluster (:mod:`.engines.ray`);
* :mod:`.explain`: which atoms drive a prediction;
* :mod:`.calibrate_csv`: calibrating a checkpoint on a CSV with targets; :mod:`.submit`: OGB-LSC
  submissions.

The layers run in that order, from the bottom up: nothing imports a feature above it
(``pyproject.toml`` holds the contract). It builds on :mod:`graphormer_urpe.runtime` and never
imports :mod:`graphormer_urpe.training` (which may import it). The public names are imported
from their modules on first use (PEP 562)::

    from graphormer_urpe.inference import Explainer, load_model, predict_smiles
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".loading": [
            "LoadedModel",
            "evaluate_checkpoint",
            "load_model",
            "load_models",
            "mean_and_std",
        ],
        ".prediction": ["predict", "predict_dataset"],
        ".intervals.calibration": ["fit_calibration"],
        ".engines.predict_io": ["Prediction", "read_smiles"],
        ".engines.stream": ["iter_predictions", "predict_smiles"],
        ".engines.embeddings_io": ["embed_smiles", "write_embeddings"],
        ".engines.ray.predictor": ["Predictor"],
        ".engines.ray.engine": ["predict_on_ray"],
        ".explain.explainer": ["Explainer"],
        ".explain.writing": ["write_explanations"],
        ".submit": ["submit_checkpoint"],
    },
)
