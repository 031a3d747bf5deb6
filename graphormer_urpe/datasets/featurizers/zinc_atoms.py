r"""The ZINC benchmark's featuriser: its 28 atom types and the Kekulé bond orders it was built with.

:func:`zinc_mol_to_graph` gives the ZINC benchmark graphs (PyG ``ZINC``, benchmarking-gnns):
one categorical node feature, the atom type id among :data:`ZINC_ATOM_TYPES` (28 types), and
one bond feature, the Kekulé bond order (1 single, 2 double, 3 triple).

* **Atom type** = element symbol, then ``" H<n>"`` when the atom is written as a bracket
  atom with ``n`` explicit hydrogens in the canonical (isomeric) SMILES, then ``" +"`` /
  ``" -"`` for a positive / negative formal charge: ``[C@@H]`` → ``"C H1"``, ``[NH3+]`` →
  ``"N H3 +"``, ``[O-]`` → ``"O -"``. Aromatic ``[nH]`` counts as ``"N"``: kekulisation
  drops the explicit hydrogen of neutral aromatic N/P, as it did when the benchmark was
  built. The bracket hydrogens are read from the canonical SMILES, so the type does not
  depend on how the input SMILES happened to be written.
* **Bond orders** come from :func:`legacy_kekule_bond_orders`, which re-implements the
  Kekulé assignment of the RDKit releases that built the benchmark (atom-order driven
  search with back-tracking) instead of today's RDKit ``Kekulize``, which picks a
  different but equally valid alternation in many of them (counted:
  docs/results/code-notes.md).
* Nodes follow RDKit's atom order of the SMILES; ``edge_index`` stores both directions,
  sorted by (source, target) as PyG's ``ZINC`` stores them.

On the 1,000 official ZINC-subset validation molecules this reproduces the official
graphs (types, edges, bond orders) on 998 up to node order (835 with the very same node
order); the other two were built from differently ordered SMILES whose Kekulé
alternation cannot be recovered from the canonical string.

An atom outside the 28 types raises :class:`UnknownAtomTypeError` naming the SMILES, the atom
index and its type.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import torch
from rdkit import Chem, rdBase

from .smiles import InvalidMoleculeError, MolOrSmiles, as_mol

if TYPE_CHECKING:  # imported where a graph is built
    from torch_geometric.data import Data

__all__ = [
    "ZINC_ATOM_TYPES",
    "ZINC_BOND_TYPES",
    "UnknownAtomTypeError",
    "zinc_atom_type",
    "legacy_kekule_bond_orders",
    "zinc_mol_to_graph",
]

logger = logging.getLogger(__name__)


ZINC_ATOM_TYPES: tuple[str, ...] = (
    "C",
    "O",
    "N",
    "F",
    "C H1",
    "S",
    "Cl",
    "O -",
    "N H1 +",
    "Br",
    "N H3 +",
    "N H2 +",
    "N +",
    "N -",
    "S -",
    "I",
    "P",
    "O H1 +",
    "N H1 -",
    "O +",
    "S +",
    "P H1",
    "P H2",
    "C H2 -",
    "P +",
    "S H1 +",
    "C H1 -",
    "P H1 +",
)
"""The ZINC benchmark's 28 atom types; the position is the type id stored in ``x``."""

_ZINC_TYPE_ID = {name: i for i, name in enumerate(ZINC_ATOM_TYPES)}

ZINC_BOND_TYPES: dict[Chem.BondType, int] = {
    Chem.BondType.SINGLE: 1,
    Chem.BondType.DOUBLE: 2,
    Chem.BondType.TRIPLE: 3,
}
"""Kekulé bond type → the ZINC ``edge_attr`` value."""


class UnknownAtomTypeError(InvalidMoleculeError):
    """An atom outside the ZINC benchmark's 28 atom types."""


# --------------------------------------------------------------------------------------
# ZINC atom types
# --------------------------------------------------------------------------------------


def _type_name(symbol: str, hydrogens: int, charge: int) -> str:
    name = symbol
    if hydrogens:
        name += f" H{hydrogens}"
    if charge > 0:
        name += " +"
    elif charge < 0:
        name += " -"
    return name


def _bracket_hydrogens(mol: Chem.Mol) -> list[int]:
    """Explicit (bracket) hydrogen count of every atom as written in the canonical SMILES.

    Returns:
        ``[N]`` counts in ``mol``'s atom order, after kekulisation (which drops the ``H`` of
        neutral aromatic ``[nH]`` / ``[pH]``).
    """
    with rdBase.BlockLogs():
        canonical = Chem.MolToSmiles(mol)
        order = list(
            mol.GetPropsAsDict(includePrivate=True, includeComputed=True)["_smilesAtomOutputOrder"]
        )
        reparsed = Chem.MolFromSmiles(canonical)
    kek = reparsed if reparsed is not None and len(order) == mol.GetNumAtoms() else None
    if kek is None:  # pragma: no cover - canonical SMILES that RDKit cannot read back
        kek, order = Chem.Mol(mol), list(range(mol.GetNumAtoms()))
    kek = Chem.Mol(kek)
    Chem.Kekulize(kek, clearAromaticFlags=True)
    hs = [0] * mol.GetNumAtoms()
    for pos, idx in enumerate(order):
        hs[int(idx)] = kek.GetAtomWithIdx(pos).GetNumExplicitHs()
    return hs


def zinc_atom_type(atom: Chem.Atom, bracket_hydrogens: int) -> str:
    """The ZINC type name of ``atom`` (``"C"``, ``"C H1"``, ``"N H3 +"``, ...).

    Args:
        atom: the RDKit atom.
        bracket_hydrogens: its explicit hydrogen count in the canonical SMILES.
    """
    return _type_name(atom.GetSymbol(), bracket_hydrogens, atom.GetFormalCharge())


# --------------------------------------------------------------------------------------
# Kekulé bond orders as the benchmark's RDKit assigned them
# --------------------------------------------------------------------------------------


def _fused_ring_systems(
    rings: list[tuple[int, ...]], bond_rings: list[set[int]]
) -> list[list[int]]:
    """Group ring indices into fused systems (rings sharing a bond), depth-first."""
    n = len(rings)
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if bond_rings[i] & bond_rings[j]:
                neighbours[i].append(j)
                neighbours[j].append(i)
    seen = [False] * n
    systems = []
    for start in range(n):
        if seen[start]:
            continue
        system: list[int] = []
        stack = [start]
        while stack:  # iterative version of a recursive pre-order DFS
            r = stack.pop()
            if seen[r]:
                continue
            seen[r] = True
            system.append(r)
            stack.extend(reversed([k for k in neighbours[r] if not seen[k]]))
        systems.append(system)
    return systems


def _kekulize_system(
    mol: Chem.Mol,
    atoms: list[int],
    candidates: set[int],
    done: list[int],
    order: list[int],
    max_backtracks: int,
) -> bool:
    """Assign double bonds inside one fused aromatic system (modifies ``order`` in place).

    A queue walk from the system's first atom: each atom that still needs a double bond takes
    it with its first eligible neighbour (in bond order) and remembers the alternatives; when
    an atom finds no partner the walk backs up to the last atom with an alternative.
    """
    in_system = set(atoms)
    queue: deque[int] = deque()
    options: dict[int, deque[int]] = {}
    branch_points: list[int] = []
    last_option = -1
    backtracks = 0
    added: set[int] = set()
    while len(done) < len(atoms) or queue:
        if queue:
            curr = queue.popleft()
        else:
            curr = next(a for a in atoms if a not in done)
        done.append(curr)
        wants_double = curr in candidates
        if curr in options:
            opts = deque(options[curr])
        else:
            opts = deque()
            pending: deque[int] = deque()
            for bond in mol.GetAtomWithIdx(curr).GetBonds():
                nbr = bond.GetOtherAtomIdx(curr)
                if nbr in done or nbr not in in_system:
                    continue
                if nbr not in queue:
                    pending.appendleft(nbr)
                if wants_double and nbr in candidates and bond.GetIsAromatic():
                    opts.append(nbr)
            queue.extend(pending)
        if not wants_double:
            continue
        if opts:
            partner = opts.popleft()
            bond_idx = mol.GetBondBetweenAtoms(curr, partner).GetIdx()
            order[bond_idx] = 2
            candidates.discard(curr)
            candidates.discard(partner)
            added.add(bond_idx)
            if curr in options:
                if opts:
                    options[curr] = opts
                else:
                    del options[curr]
                    branch_points.pop()
                    last_option = branch_points[-1] if branch_points else -1
            elif opts:
                last_option = curr
                branch_points.append(curr)
                options[curr] = opts
        elif last_option >= 0 and backtracks < max_backtracks:
            cut = done.index(last_option)
            kept = done[:cut]
            for a in reversed(done[cut:]):
                queue.appendleft(a)
            for bond_idx in sorted(added):
                bond = mol.GetBondWithIdx(bond_idx)
                a1, a2 = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
                if a1 not in kept and a2 not in kept:
                    added.discard(bond_idx)
                    order[bond_idx] = 1
                    candidates.update((a1, a2))
            done[:] = kept
            backtracks += 1
        else:
            return False
    return True


def legacy_kekule_bond_orders(mol: Chem.Mol, max_backtracks: int = 100) -> list[int]:
    """Kekulé bond orders (1/2/3) as the RDKit releases that built ZINC assigned them.

    Which aromatic atoms need a double bond is fixed by valence (read off RDKit's own
    kekulisation); *which* alternation they get follows the older RDKit search: rings ordered
    by their sorted atom indices and grouped into fused systems, each system walked from its
    first aromatic atom, every atom pairing with its first candidate neighbour in bond order,
    with back-tracking. Falls back to today's RDKit assignment if that search fails.

    Args:
        mol: a sanitised molecule (aromatic flags set, as from ``MolFromSmiles``).
        max_backtracks: back-tracking budget per fused system (RDKit's default, 100).

    Returns:
        ``[num_bonds]`` bond orders in RDKit bond order.

    Raises:
        InvalidMoleculeError: for bonds that are not single, double, triple or aromatic.
    """
    kek = Chem.Mol(mol)
    Chem.Kekulize(kek, clearAromaticFlags=True)
    modern = []
    for bond in kek.GetBonds():
        bt = ZINC_BOND_TYPES.get(bond.GetBondType())
        if bt is None:
            raise InvalidMoleculeError(
                f"bond {bond.GetIdx()} ({bond.GetBeginAtom().GetSymbol()}-"
                f"{bond.GetEndAtom().GetSymbol()}) has unsupported type {bond.GetBondType()}"
            )
        modern.append(bt)
    order = list(modern)
    candidates_all: set[int] = set()
    aromatic_bonds = [b.GetIdx() for b in mol.GetBonds() if b.GetIsAromatic()]
    if not aromatic_bonds:
        return order
    for idx in aromatic_bonds:
        order[idx] = 1
        if modern[idx] == 2:
            bond = mol.GetBondWithIdx(idx)
            candidates_all.update((bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))

    info = mol.GetRingInfo()
    rings = list(zip(info.AtomRings(), (set(r) for r in info.BondRings()), strict=True))
    rings.sort(key=lambda ring: sorted(ring[0]))
    atom_rings = [r[0] for r in rings]
    systems = _fused_ring_systems(atom_rings, [r[1] for r in rings])
    for system in systems:
        atoms: list[int] = []
        for r in system:
            for a in atom_rings[r]:
                if a not in atoms:
                    atoms.append(a)
        aromatic = [mol.GetAtomWithIdx(a).GetIsAromatic() for a in atoms]
        if not any(aromatic):
            continue
        done = [a for a, arom in zip(atoms, aromatic, strict=True) if not arom]
        candidates = {a for a, arom in zip(atoms, aromatic, strict=True) if arom} & candidates_all
        if not _kekulize_system(mol, atoms, candidates, done, order, max_backtracks):
            logger.debug("legacy kekulisation failed; using RDKit's current assignment")
            return modern
    # sanity check: every atom keeps its valence (same number of double bonds per atom)
    doubles_modern = np.zeros(mol.GetNumAtoms(), dtype=np.int64)
    doubles_legacy = np.zeros(mol.GetNumAtoms(), dtype=np.int64)
    for bond in mol.GetBonds():
        ends = [bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()]
        doubles_modern[ends] += modern[bond.GetIdx()]
        doubles_legacy[ends] += order[bond.GetIdx()]
    if not np.array_equal(doubles_modern, doubles_legacy):  # pragma: no cover - defensive
        logger.debug("legacy kekulisation changed a valence; using RDKit's current assignment")
        return modern
    return order


def zinc_mol_to_graph(mol_or_smiles: MolOrSmiles) -> Data:
    """Featurise a molecule exactly as the ZINC benchmark's graphs.

    Args:
        mol_or_smiles: a SMILES string or a sanitised RDKit molecule (no explicit H atoms).

    Returns:
        ``Data`` with ``x`` ``[N, 1]`` long (type id in :data:`ZINC_ATOM_TYPES`),
        ``edge_index`` ``[2, E]`` long (both directions, sorted by source then target) and
        ``edge_attr`` ``[E]`` long (1 single, 2 double, 3 triple).

    Raises:
        InvalidMoleculeError: unparsable SMILES or an unsupported bond type.
        UnknownAtomTypeError: an atom outside the 28 ZINC types (the message names the
            SMILES, the atom index and its type).
    """
    from torch_geometric.data import Data

    mol, smiles = as_mol(mol_or_smiles)
    hydrogens = _bracket_hydrogens(mol)
    x = np.empty(mol.GetNumAtoms(), dtype=np.int64)
    for atom in mol.GetAtoms():
        name = zinc_atom_type(atom, hydrogens[atom.GetIdx()])
        type_id = _ZINC_TYPE_ID.get(name)
        if type_id is None:
            hint = " (remove explicit hydrogens first)" if atom.GetAtomicNum() == 1 else ""
            raise UnknownAtomTypeError(
                f"SMILES {smiles!r}: atom {atom.GetIdx()} has type {name!r}, which is not one "
                f"of the 28 ZINC atom types{hint}; use the 'ogb' featuriser for molecules "
                "outside ZINC's chemistry",
                smiles,
            )
        x[atom.GetIdx()] = type_id
    try:
        orders = legacy_kekule_bond_orders(mol)
    except InvalidMoleculeError as exc:
        raise InvalidMoleculeError(f"SMILES {smiles!r}: {exc}", smiles) from None
    n = mol.GetNumAtoms()
    adj = np.zeros((n, n), dtype=np.int64)  # bond type matrix, like the raw ZINC pickles
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        adj[i, j] = adj[j, i] = orders[bond.GetIdx()]
    src, dst = np.nonzero(adj)
    return Data(
        x=torch.from_numpy(x).view(-1, 1),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)).view(2, -1),
        edge_attr=torch.from_numpy(adj[src, dst].astype(np.int64)),
        num_nodes=n,
    )
