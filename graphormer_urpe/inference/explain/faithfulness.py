r"""Is an explanation faithful? Measures against a known truth and against the model itself.

* **Against a known decomposition.** Crippen's logP (RDKit ``Crippen.MolLogP``) is a sum of
  per-atom terms; :func:`crippen_atom_contributions` gives them per heavy atom (each hydrogen's
  term added to its heavy atom), so a model trained on logP can be checked atom by atom:
  the Spearman correlation per molecule between its contributions and Crippen's
  (:func:`~graphormer_urpe.inference.rank_correlation.spearman`).
* **Against the model.** :func:`deletion_curve`: how much the prediction moves when the ``k``
  atoms with the largest contributions are set to the baseline, beside ``k`` random atoms. A
  faithful ranking moves it more.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolDescriptors

__all__ = ["crippen_atom_contributions", "deletion_curve"]


def crippen_atom_contributions(smiles: str) -> np.ndarray:
    """``[n]`` Crippen logP contribution of each heavy atom of ``smiles`` (RDKit's atom
    order), with its hydrogens' terms; the sum is ``Crippen.MolLogP``.

    Raises:
        ValueError: when RDKit cannot read ``smiles``.
    """
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse SMILES {smiles!r}")
    heavy = mol.GetNumAtoms()
    full = Chem.AddHs(mol)  # MolLogP's own view: explicit hydrogens after the heavy atoms
    terms = [logp for logp, _ in rdMolDescriptors._CalcCrippenContribs(full)]
    out = np.array(terms[:heavy], dtype=np.float64)
    for atom in list(full.GetAtoms())[heavy:]:
        out[atom.GetNeighbors()[0].GetIdx()] += terms[atom.GetIdx()]
    return out


def deletion_curve(
    predict_masked: Callable[[np.ndarray], np.ndarray],
    scores: np.ndarray,
    ks: list[int],
    rng: np.random.Generator,
    random_draws: int = 4,
) -> dict[str, np.ndarray]:
    """Prediction drops when atoms are masked, in the order of ``scores`` and at random.

    Args:
        predict_masked: masks ``[M, n]`` (``True`` = masked) → outputs ``[M]`` of the target.
        scores: ``[n]`` the atoms' contributions; the largest are masked first.
        ks: how many atoms to mask (each ``<= n``).
        rng: draws the random atoms.
        random_draws: random masks per ``k``, averaged.

    Returns:
        ``{"ranked": [len(ks)], "random": [len(ks)]}``: the unmasked output minus the masked
        one (a drop), for each ``k``.
    """
    n = len(scores)
    order = np.argsort(-np.asarray(scores), kind="stable")
    masks = [np.zeros(n, dtype=bool)]
    for k in ks:
        m = np.zeros(n, dtype=bool)
        m[order[:k]] = True
        masks.append(m)
    for k in ks:
        for _ in range(random_draws):
            m = np.zeros(n, dtype=bool)
            m[rng.choice(n, size=k, replace=False)] = True
            masks.append(m)
    out = np.asarray(predict_masked(np.stack(masks)), dtype=np.float64)
    full, ranked = out[0], out[1 : 1 + len(ks)]
    rand = out[1 + len(ks) :].reshape(len(ks), random_draws).mean(1)
    return {"ranked": full - ranked, "random": full - rand}
