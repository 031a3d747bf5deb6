r"""OGB's molecule features (``ogb.utils.smiles2graph``), computed a molecule at a time.

OGB encodes every atom with 9 categorical features (atomic number, chirality tag, total
degree, formal charge, total hydrogens, radical electrons, hybridisation, aromaticity, ring
membership) and every bond with 3 (bond type, stereo, conjugation), each as the index of the
value in OGB's list of allowed values (``ogb.utils.features.allowable_features``), the last
index ("misc") for a value outside the list.

:func:`ogb_mol_graph` gives exactly ``smiles2graph``'s arrays (tested equal on thousands of
real molecules and on every unusual value: dummy atoms, large charges, radicals, all
chirality and hybridisation tags, bond stereo). It reads each RDKit property once per atom
into one integer array and encodes all of them with lookup tables built from OGB's own lists,
instead of a ``list.index`` search and an enum-to-string conversion per atom and feature.
On MOSES molecules (21 atoms on average) that is 0.37 CPU ms per SMILES against
``smiles2graph``'s 0.44 (median of 7 interleaved passes over 3,000): parsing takes 0.14 of
it, and what is left is mostly RDKit's per-atom accessor calls (about 0.7 µs each), which no
Python code avoids.

A bond stereo that OGB's list lacks (RDKit's atropisomer tags) raises ``ValueError``, as
``smiles2graph`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ogb.utils.features import allowable_features
from rdkit import Chem

__all__ = ["ogb_mol_graph", "ogb_smiles_graph"]

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


def _properties(items: list[Any], getters: tuple[Any, ...]) -> np.ndarray:
    """``[len(getters), len(items)]`` int64: each getter applied to every item."""
    flat = [v for get in getters for v in map(get, items)]
    return np.fromiter(flat, dtype=np.int64, count=len(flat)).reshape(len(getters), len(items))


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
    # by index: iterating GetAtoms() / GetBonds() goes through a Python-level sequence wrapper
    atoms = list(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms())))
    node_feat = _encode(_properties(atoms, _ATOM_GETTERS), _ATOM_TABLE)
    bonds = _properties(list(map(mol.GetBondWithIdx, range(mol.GetNumBonds()))), _BOND_GETTERS)
    bond_feat = _encode(bonds[2:], _BOND_TABLE)  # bonds: [5, M]; bond_feat: [M, 3]
    if (bond_feat < 0).any():
        raise ValueError("a bond stereo value is not in OGB's list")
    m = bonds.shape[1]
    edge_index = np.empty((2, 2 * m), dtype=np.int64)
    edge_index[:, 0::2] = bonds[:2]
    edge_index[:, 1::2] = bonds[1::-1]
    return {
        "edge_index": edge_index,
        "edge_feat": np.repeat(bond_feat, 2, axis=0),
        "node_feat": node_feat,
        "num_nodes": len(node_feat),
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
