r"""Molecule → PyG graph featurisers: the ZINC benchmark's atom types and OGB's features.

Two featurisers are registered in :data:`FEATURIZERS`:

``"zinc"`` (:func:`~.zinc_atoms.zinc_mol_to_graph`)
    The ZINC benchmark graphs (PyG ``ZINC``, benchmarking-gnns): one categorical node
    feature, the atom type id among the 28 ZINC types, and one bond feature, the Kekulé bond
    order (1 single, 2 double, 3 triple); how they are read is in :mod:`.zinc_atoms`.

``"ogb"`` (:func:`ogb_smiles_to_graph`)
    OGB's ``smiles2graph``: ``x`` ``[N, 9]`` and ``edge_attr`` ``[E, 3]`` categorical features
    (every element, charges, chirality, ...), the featuriser of PCQM4Mv2 / ogbg-mol*.

:func:`featurize_smiles` parses and featurises one SMILES, raising
:class:`~.smiles.InvalidMoleculeError` (a ``ValueError``) that names the SMILES when it cannot.

Edge cases, the same for both featurisers:

* an empty SMILES (``""``, blanks) or a molecule without atoms raises
  :class:`~.smiles.InvalidMoleculeError`;
* a single atom (``"C"``, ``"[Na+]"``) is a valid graph with one node and no edges;
* disconnected molecules (salts and mixtures, ``"CC(=O)[O-].[Na+]"``) stay **one** graph with
  several components; no fragment is removed. Pairs of atoms in different components get the
  shortest-path distance 510 ("unreachable") and no path bond features, as in Graphormer's
  preprocessing; the model embeds that distance with the spatial table's last row (like any
  long distance) and masks the pair only when ``spatial_pos_max`` is at most 510. Strip salts
  before featurising (e.g. with RDKit's ``SaltRemover``) to keep only the largest fragment;
* an atom outside the ZINC benchmark's 28 types (another element such as ``[U]``, or a charge
  or hydrogen state ZINC does not have, such as ``[C-]``) raises
  :class:`~.zinc_atoms.UnknownAtomTypeError` naming the SMILES, the atom index and its type
  (``"ogb"`` encodes every element).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .smiles import MolOrSmiles, as_mol
from .zinc_atoms import zinc_mol_to_graph

if TYPE_CHECKING:  # imported where a graph is built (parsing SMILES needs no PyG)
    from torch_geometric.data import Data

__all__ = ["FEATURIZERS", "featurize_smiles", "ogb_smiles_to_graph"]


def ogb_smiles_to_graph(mol_or_smiles: MolOrSmiles) -> Data:
    """Featurise a molecule with OGB's ``smiles2graph`` features
    (:func:`~graphormer_urpe.datasets.featurizers.ogb_features.ogb_mol_graph`).

    Args:
        mol_or_smiles: a SMILES string or an RDKit molecule.

    Returns:
        ``Data`` with ``x`` ``[N, 9]`` long, ``edge_index`` ``[2, E]`` long (both directions)
        and ``edge_attr`` ``[E, 3]`` long.

    Raises:
        InvalidMoleculeError: unparsable or empty SMILES.
    """
    from torch_geometric.data import Data

    from .ogb_features import ogb_mol_graph

    mol, _ = as_mol(mol_or_smiles)
    graph = ogb_mol_graph(mol)
    return Data(
        x=torch.from_numpy(graph["node_feat"]),
        edge_index=torch.from_numpy(graph["edge_index"]),
        edge_attr=torch.from_numpy(graph["edge_feat"]),
        num_nodes=graph["num_nodes"],
    )


FEATURIZERS: dict[str, Callable[[MolOrSmiles], Data]] = {
    "zinc": zinc_mol_to_graph,
    "ogb": ogb_smiles_to_graph,
}
"""Featuriser name → function from a SMILES string (or RDKit molecule) to a PyG ``Data``."""


def featurize_smiles(smiles: str, featurizer: str) -> Data:
    """Parse and featurise one SMILES string.

    Args:
        smiles: the SMILES string.
        featurizer: a key of :data:`FEATURIZERS` (``"zinc"`` or ``"ogb"``).

    Returns:
        The molecule's graph (see :func:`zinc_mol_to_graph` / :func:`ogb_smiles_to_graph`).

    Raises:
        InvalidMoleculeError: naming the SMILES when it does not parse, has no atoms or (for
            ``"zinc"``) contains an atom outside the 28 ZINC types.
        ValueError: for an unknown featuriser name.
    """
    try:
        fn = FEATURIZERS[featurizer]
    except KeyError:
        raise ValueError(
            f"unknown featurizer {featurizer!r}; choose one of {sorted(FEATURIZERS)}"
        ) from None
    return fn(smiles)
