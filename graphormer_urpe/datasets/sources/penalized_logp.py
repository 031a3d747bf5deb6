r"""The ZINC benchmark's regression target: penalized logP ("constrained solubility").

.. math::

    y = 0.6976318\,\mathrm{logP} - 1.1981676\,\mathrm{SA}
        - 3.47513914\,\mathrm{cycle} + 2.11182998

* ``logP``: RDKit's Crippen ``MolLogP``;
* ``SA``: the synthetic accessibility score of RDKit's Contrib ``SA_Score`` (``sascorer``);
* ``cycle = max(0, L - 6)`` with ``L`` the size of the largest cycle in the *classic* cycle
  basis of the molecular graph (:func:`cycle_basis`: depth-first from the smallest atom index,
  neighbours in ascending order, as networkx computed it when the benchmark was built).

The coefficients are the standardisation of the three terms over ZINC-250k; the result matches
the ``y`` of the official ZINC-subset graphs to 5e-7. Computed on the molecule as parsed from
its original SMILES (stereochemistry changes the SA score).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from types import ModuleType

import numpy as np
from rdkit import Chem, RDConfig
from rdkit.Chem import Crippen, rdmolops

from ..featurizers.smiles import InvalidMoleculeError, parse_smiles

__all__ = [
    "LOGP_COEF",
    "SA_COEF",
    "CYCLE_COEF",
    "OFFSET",
    "cycle_basis",
    "largest_ring_penalty",
    "sa_score",
    "penalized_logp",
]

LOGP_COEF = 0.6976318
SA_COEF = -1.1981676
CYCLE_COEF = -3.47513914
OFFSET = 2.11182998


def cycle_basis(adjacency: np.ndarray | Sequence[Sequence[int]]) -> list[list[int]]:
    """The classic cycle basis of an undirected graph (Paton's algorithm, as in networkx < 3.x).

    Spanning trees are grown depth-first from the smallest not yet visited node, with a stack
    (last pushed explored first) and neighbours visited in ascending order; every non-tree
    edge closes one basis cycle through the tree.

    Args:
        adjacency: ``[N, N]`` symmetric adjacency matrix (non-zero = edge; the diagonal is
            ignored).

    Returns:
        The basis cycles, each a list of node indices.
    """
    adj = np.asarray(adjacency)
    n = adj.shape[0]
    neighbours = [[int(j) for j in np.flatnonzero(adj[i]) if j != i] for i in range(n)]
    remaining = set(range(n))
    cycles: list[list[int]] = []
    while remaining:
        root = min(remaining)
        stack = [root]
        pred = {root: root}
        used: dict[int, set[int]] = {root: set()}
        while stack:
            z = stack.pop()
            z_used = used[z]
            for nbr in neighbours[z]:
                if nbr not in used:  # new node: tree edge
                    pred[nbr] = z
                    stack.append(nbr)
                    used[nbr] = {z}
                elif nbr not in z_used:  # non-tree edge closes a cycle
                    seen_from_nbr = used[nbr]
                    cycle = [nbr, z]
                    p = pred[z]
                    while p not in seen_from_nbr:
                        cycle.append(p)
                        p = pred[p]
                    cycle.append(p)
                    cycles.append(cycle)
                    used[nbr].add(z)
        remaining -= set(pred)
    return cycles


def largest_ring_penalty(mol: Chem.Mol) -> int:
    """``max(0, L - 6)`` for ``L`` the largest cycle of :func:`cycle_basis` (0 if acyclic)."""
    cycles = cycle_basis(rdmolops.GetAdjacencyMatrix(mol))
    largest = max((len(c) for c in cycles), default=0)
    return max(0, largest - 6)


@lru_cache(maxsize=1)
def _sascorer() -> ModuleType:
    path = os.path.join(RDConfig.RDContribDir, "SA_Score", "sascorer.py")
    if not os.path.exists(path):
        raise ImportError(
            f"RDKit's Contrib SA_Score is missing (looked for {path}); the ZINC target needs "
            "rdkit's Contrib/SA_Score/sascorer.py and fpscores.pkl.gz"
        )
    spec = importlib.util.spec_from_file_location("_rdkit_contrib_sascorer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sa_score(mol: Chem.Mol) -> float:
    """Synthetic accessibility score (Ertl & Schuffenhauer 2009), 1 (easy) .. 10 (hard)."""
    return float(_sascorer().calculateScore(mol))


def penalized_logp(smiles: str | Chem.Mol) -> float:
    """The ZINC benchmark target ``y`` of one molecule.

    Args:
        smiles: the molecule's original SMILES (or an RDKit molecule parsed from it).

    Returns:
        ``0.6976318 logP - 1.1981676 SA - 3.47513914 cycle + 2.11182998``.

    Raises:
        InvalidMoleculeError: when the SMILES does not parse (the message names it).
    """
    if isinstance(smiles, Chem.Mol):
        mol = smiles
        if mol.GetNumAtoms() == 0:
            raise InvalidMoleculeError("molecule has no atoms")
    else:
        mol = parse_smiles(smiles)
    logp = Crippen.MolLogP(mol)
    sa = sa_score(mol)
    cycle = largest_ring_penalty(mol)
    return LOGP_COEF * logp + SA_COEF * sa + CYCLE_COEF * cycle + OFFSET
