r"""Which atoms drive a prediction: per-atom contributions of a trained model (or ensemble).

* :mod:`.explainer`: :class:`~.explainer.Explainer`, which featurises molecules as the model
  was trained and explains them by one of the methods below;
* :mod:`.shapley`: Shapley values of the atoms, by sampled permutations;
* :mod:`.integrated_gradients`: integrated gradients on the atom embeddings, and the masked
  predictions both methods build on;
* :mod:`.faithfulness`: measures of an explanation against a known truth and the model;
* :mod:`.drawing`: pictures of explanations (RDKit);
* :mod:`.writing`: an explanation run's files (``atoms.csv``, ``molecules.csv``, pictures).
"""

from ...utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".explainer": ["METHODS", "Explainer"],
        ".writing": ["write_explanations"],
    },
)
