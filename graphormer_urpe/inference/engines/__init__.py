"""Predicting many molecules: SMILES in, one result per input row out, in input order.

* :mod:`.predict_io`: what ``predict`` reads (SMILES files, SD files, tables) and writes (one
  CSV row per input row, :class:`~.predict_io.Prediction`, :class:`~.predict_io.PredictionLayout`);
* :mod:`.stream`: the local engine, memory flat at any length (:func:`~.stream.iter_predictions`,
  :class:`~.stream.StreamModel`), with its featurising processes (:mod:`.workers`);
* :mod:`.embeddings_io`: the head's input of each row into a ``.npy`` file
  (``predict --embeddings``);
* :mod:`.ray`: ``predict --engine ray``, a library of SMILES files on a Ray cluster;
* :mod:`.defaults`: the engines' defaults, plain numbers (no torch) for ``--help``.
"""

from ...utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".predict_io": ["Prediction", "PredictionLayout", "read_smiles"],
        ".stream": ["StreamModel", "iter_predictions", "predict_smiles"],
        ".embeddings_io": ["EmbeddingWriter", "embed_smiles", "write_embeddings"],
    },
)
