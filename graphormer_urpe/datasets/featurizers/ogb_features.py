r"""OGB's molecule features (``ogb.utils.smiles2graph``), for one molecule or many at once.

OGB encodes every atom with 9 categorical features (atomic number, chirality tag, total
degree, formal charge, total hydrogens, radical electrons, hybridisation, aromaticity, ring
membership) and every bond with 3 (bond type, stereo, conjugation), each as the index of the
value in OGB's list of allowed values (``ogb.utils.features.allowable_features``), the last
index ("misc") for a value outside the list.

:func:`ogb_graphs` gives exactly ``smiles2graph``'s arrays for a list of molecules,
concatenated (tested equal on thousands of real molecules and on every unusual value: dummy
atoms, large charges, radicals, all chirality and hybridisation tags, bond stereo);
:func:`ogb_mol_graph` is the same for one molecule. It reads each RDKit property into one
integer list for all the molecules and encodes them with lookup tables built from OGB's own
lists, instead of a ``list.index`` search and an enum-to-string conversion per atom and
feature, and instead of a few numpy calls per molecule. What is left is parsing and RDKit's
per-atom accessor calls, which no Python code avoids (measured: docs/results/code-notes.md).

A bond stereo that OGB's list lacks (RDKit's atropisomer tags) raises ``ValueError`` in
:func:`ogb_mol_graph`, as ``smiles2graph`` does; :func:`ogb_graphs` flags the molecule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from ogb.utils.features import allowable_features
from rdkit import Chem

__all__ = ["BAD_STEREO", "ogb_graphs", "ogb_mol_graph", "ogb_smiles_graph"]

BAD_STEREO = "a bond stereo value is not in OGB's list"
"""Why a molecule with an RDKit bond stereo that OGB does not list has no graph."""

_ATOM_GETTERS = (
    Chem.Atom.GetAtomicNum,
    Chem.Atom.GetChiralTag,
    Chem.Atom.GetTotalDegree,
    Chem.Atom.GetFormalCharge,
    Chem.Atom.GetTotalNumHs,
    Chem.Atom.GetNumRadicalElectrons,
    Chem.Atom.GetHybridization,
    Chem.Atom.GetIsAromatic,
    Chem.Atom.IsInRing,
)
_BOND_GETTERS = (
    Chem.Bond.GetBeginAtomIdx,
    Chem.Bond.GetEndAtomIdx,
    Chem.Bond.GetBondType,
    Chem.Bond.GetStereo,
    Chem.Bond.GetIsConjugated,
)


def _index(choices: list[Any], value: Any, strict: bool) -> int:
    """OGB's encoding of ``value``: its index in ``choices``; else the last index ("misc"),
    or ``-1`` where OGB raises (``strict``: a list without "misc")."""
    if value in choices:
        return choices.index(value)
    return -1 if strict else len(choices) - 1


def _int_table(name: str) -> tuple[int, np.ndarray]:
    """``(lowest value, codes)`` of an integer feature; the first and last entries are guards
    that out-of-range values are clipped to (both "misc")."""
    choices = allowable_features[name]
    ints = [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
    lo, hi = min(ints) - 1, max(ints) + 1
    return lo, np.array([_index(choices, v, False) for v in range(lo, hi + 1)], dtype=np.int64)


def _enum_table(name: str, enum: Any, strict: bool = False) -> tuple[int, np.ndarray]:
    """``(0, codes)`` of an RDKit enum feature, by the names OGB lists (``str(value)``)."""
    choices = allowable_features[name]
    values = enum.values
    codes = [_index(choices, str(values[v]), strict) for v in range(max(values) + 1)]
    return 0, np.array(codes, dtype=np.int64)


def _bool_table(name: str) -> tuple[int, np.ndarray]:
    choices = allowable_features[name]
    return 0, np.array([choices.index(False), choices.index(True)], dtype=np.int64)


def _stack(tables: list[tuple[int, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """One flat table for all features: ``(low [F, 1], size [F, 1], start [F, 1], codes)``."""
    lows = np.array([lo for lo, _ in tables], dtype=np.int64)[:, None]
    sizes = np.array([len(t) for _, t in tables], dtype=np.int64)[:, None]
    starts = np.concatenate([[0], np.cumsum(sizes[:-1, 0])])[:, None]
    return lows, sizes, starts, np.concatenate([t for _, t in tables])


_ATOM_TABLE = _stack(
    [
        _int_table("possible_atomic_num_list"),
        _enum_table("possible_chirality_list", Chem.rdchem.ChiralType),
        _int_table("possible_degree_list"),
        _int_table("possible_formal_charge_list"),
        _int_table("possible_numH_list"),
        _int_table("possible_number_radical_e_list"),
        _enum_table("possible_hybridization_list", Chem.rdchem.HybridizationType),
        _bool_table("possible_is_aromatic_list"),
        _bool_table("possible_is_in_ring_list"),
    ]
)
_BOND_TABLE = _stack(
    [
        _enum_table("possible_bond_type_list", Chem.rdchem.BondType),
        _enum_table("possible_bond_stereo_list", Chem.rdchem.BondStereo, strict=True),
        _bool_table("possible_is_conjugated_list"),
    ]
)


def _encode(raw: np.ndarray, table: tuple[np.ndarray, ...]) -> np.ndarray:
    """``[F, K]`` raw property values → ``[K, F]`` OGB codes."""
    lows, sizes, starts, codes = table
    return codes[np.clip(raw - lows, 0, sizes - 1) + starts].T


def ogb_graphs(mols: Sequence[Chem.Mol]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """OGB's graphs of many RDKit molecules at once, concatenated molecule after molecule.

    Each RDKit property is read into one list for all the molecules and encoded in one
    vectorised step, so the cost per molecule is the accessor calls alone (per-molecule
    arrays cost about as much again in numpy call overhead on drug-like molecules).

    Args:
        mols: ``[G]`` sanitised RDKit molecules.

    Returns:
        ``(graphs, bad)``: ``graphs`` holds ``node_feat`` ``[sum N, 9]``, ``edge_index``
        ``[2, sum E]`` (each molecule's own atom numbers; each bond in both directions,
        ``(i, j)`` then ``(j, i)``, in bond order), ``edge_feat`` ``[sum E, 3]``,
        ``num_nodes`` ``[G]`` and ``num_edges`` ``[G]``, all int64, each molecule's rows as
        ``smiles2graph`` gives them; ``bad`` ``[G]`` bool marks the molecules with a bond
        stereo outside OGB's list (``smiles2graph`` raises on them; their rows are present
        but meaningless).
    """
    atom_values: list[list[Any]] = [[] for _ in _ATOM_GETTERS]
    bond_values: list[list[Any]] = [[] for _ in _BOND_GETTERS]
    num_nodes, num_bonds = [], []
    for mol in mols:
        # by index: iterating GetAtoms() / GetBonds() goes through a Python-level wrapper
        atoms = list(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms())))
        for values, get in zip(atom_values, _ATOM_GETTERS, strict=True):
            values.extend(map(get, atoms))
        bonds = list(map(mol.GetBondWithIdx, range(mol.GetNumBonds())))
        for values, get in zip(bond_values, _BOND_GETTERS, strict=True):
            values.extend(map(get, bonds))
        num_nodes.append(len(atoms))
        num_bonds.append(len(bonds))
    node_feat = _encode(_int_array(atom_values), _ATOM_TABLE)  # [sum N, 9]
    bond = _int_array(bond_values)  # [5, M]: begin, end, type, stereo, conjugated
    bond_feat = _encode(bond[2:], _BOND_TABLE)  # [M, 3]
    bonds_per_mol = np.array(num_bonds, dtype=np.int64)
    bad = np.zeros(len(num_nodes), dtype=bool)
    bad[np.repeat(np.arange(bad.size), bonds_per_mol)[(bond_feat < 0).any(axis=1)]] = True
    edge_index = np.empty((2, 2 * bond.shape[1]), dtype=np.int64)
    edge_index[:, 0::2] = bond[:2]
    edge_index[:, 1::2] = bond[1::-1]
    graphs = {
        "node_feat": node_feat,
        "edge_index": edge_index,
        "edge_feat": np.repeat(bond_feat, 2, axis=0),
        "num_nodes": np.array(num_nodes, dtype=np.int64),
        "num_edges": 2 * bonds_per_mol,
    }
    return graphs, bad


def _int_array(values: list[list[Any]]) -> np.ndarray:
    """``[F, K]`` int64 of ``F`` lists of ``K`` integers (RDKit enums and bools included)."""
    k = len(values[0])
    flat = [v for column in values for v in column]
    return np.fromiter(flat, dtype=np.int64, count=len(flat)).reshape(len(values), k)


def ogb_mol_graph(mol: Chem.Mol) -> dict[str, Any]:
    """OGB's graph of an RDKit molecule, as ``smiles2graph`` returns it.

    Args:
        mol: a sanitised RDKit molecule.

    Returns:
        ``node_feat`` ``[N, 9]`` int64, ``edge_index`` ``[2, E]`` int64 (each bond in both
        directions, ``(i, j)`` then ``(j, i)``, in bond order), ``edge_feat`` ``[E, 3]`` int64
        and ``num_nodes`` ``N``.

    Raises:
        ValueError: a bond stereo outside OGB's list.
    """
    graphs, bad = ogb_graphs([mol])
    if bad[0]:
        raise ValueError(BAD_STEREO)
    return {
        "edge_index": graphs["edge_index"],
        "edge_feat": graphs["edge_feat"],
        "node_feat": graphs["node_feat"],
        "num_nodes": int(graphs["num_nodes"][0]),
    }


def ogb_smiles_graph(smiles: str) -> dict[str, Any]:
    """:func:`ogb_mol_graph` of a SMILES string (``smiles2graph``'s drop-in).

    Raises:
        ValueError: RDKit cannot parse ``smiles`` (``smiles2graph`` fails there too).
    """
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse SMILES {smiles!r}")
    return ogb_mol_graph(mol)
