"""Fingerprints of molecules, and the nearest-neighbour Tanimoto search over Morgan bits.

:func:`morgan_bits` gives ``[G, bits]`` 0 / 1 fingerprints of RDKit molecules;
:func:`count_fingerprints` the count fingerprints of SMILES that gradient-boosted trees read
(:data:`COUNT_FINGERPRINTS`: Morgan, Avalon, ErG);
:class:`NearestIndex` finds, for each query fingerprint, the largest Tanimoto similarity to a
set of packed fingerprints (a training record's, :mod:`..domain`).

Example::

    packed = np.packbits(morgan_bits(train_mols, 2, 1024), axis=1, bitorder="little")
    index = NearestIndex(packed, 1024)
    index.similarities(morgan_bits(new_mols, 2, 1024))   # [Q] float32 in [0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rdkit import Chem

__all__ = [
    "COUNT_FINGERPRINTS",
    "MORGAN_COUNTS",
    "NearestIndex",
    "count_fingerprints",
    "molecule_rows",
    "morgan_bits",
    "morgan_generator",
    "nearest_index",
]


def morgan_bits(mols: Sequence[Chem.Mol], radius: int, bits: int) -> np.ndarray:
    """``[G, bits]`` uint8 (0 / 1) Morgan fingerprints of RDKit molecules (RDKit's
    ``GetMorganGenerator(radius, fpSize=bits)``, the same as ``DataStructs`` compares)."""
    out = np.zeros((len(mols), bits), dtype=np.uint8)
    if len(mols):
        gen = morgan_generator(radius, bits)
        for i, mol in enumerate(mols):
            out[i] = gen.GetFingerprintAsNumPy(mol)
    return out


_GENERATORS: dict[tuple[int, int], Any] = {}


def morgan_generator(radius: int, bits: int) -> Any:
    """RDKit's Morgan fingerprint generator of ``radius`` and ``bits`` (one per process)."""
    key = (radius, bits)
    if key not in _GENERATORS:
        from rdkit.Chem import rdFingerprintGenerator

        _GENERATORS[key] = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    return _GENERATORS[key]


def molecule_rows(
    smiles: Sequence[str], width: int, dtype: Any, row: Callable[[Chem.Mol], np.ndarray]
) -> np.ndarray:
    """``[N, width]`` rows of ``dtype``, ``row(mol)`` for each readable SMILES (a SMILES RDKit
    cannot read: a row of zeros)."""
    from rdkit import Chem

    out = np.zeros((len(smiles), width), dtype=dtype)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is not None:
            out[i] = row(mol)
    return out


MORGAN_COUNTS = {"radius": 2, "bits": 2048}
"""The Morgan count fingerprint of :data:`COUNT_FINGERPRINTS`."""


def _morgan_counts(mol: Chem.Mol) -> np.ndarray:
    gen = morgan_generator(MORGAN_COUNTS["radius"], MORGAN_COUNTS["bits"])
    return np.minimum(gen.GetCountFingerprintAsNumPy(mol), 255)


AVALON_BITS = 1024
"""The width of the Avalon count fingerprint of :data:`COUNT_FINGERPRINTS`."""


def _avalon_counts(mol: Chem.Mol) -> np.ndarray:
    from rdkit import DataStructs
    from rdkit.Avalon import pyAvalonTools

    out = np.zeros(AVALON_BITS)
    fp = pyAvalonTools.GetAvalonCountFP(mol, nBits=AVALON_BITS)
    DataStructs.ConvertToNumpyArray(fp, out)
    return out


def _erg(mol: Chem.Mol) -> np.ndarray:
    from rdkit.Chem import rdReducedGraphs

    return rdReducedGraphs.GetErGFingerprint(mol)


COUNT_FINGERPRINTS: dict[str, tuple[int, Callable[[Chem.Mol], np.ndarray]]] = {
    "morgan": (MORGAN_COUNTS["bits"], _morgan_counts),
    "avalon": (AVALON_BITS, _avalon_counts),
    "erg": (315, _erg),
}
"""The count fingerprints :func:`count_fingerprints` makes, by name: their width and how one
molecule's is made. ``morgan``: Morgan (ECFP4) counts of radius 2 folded to 2,048 bits, each
kept at 255 at most; ``avalon``: Avalon's substructure-key counts folded to 1,024 bits;
``erg``: the 315 pharmacophore-pair values of the extended reduced graph (Stiefl et al.,
*J. Chem. Inf. Model.* 2006), fuzzy counts."""


def count_fingerprints(smiles: Sequence[str], kinds: Sequence[str]) -> np.ndarray:
    """``[N, F]`` float32: the count fingerprints ``kinds`` (names of
    :data:`COUNT_FINGERPRINTS`) of ``smiles`` side by side, in that order (a SMILES RDKit
    cannot read: a row of zeros)."""
    unknown = [k for k in kinds if k not in COUNT_FINGERPRINTS]
    if unknown:
        raise ValueError(f"unknown fingerprints {unknown}; choose from {list(COUNT_FINGERPRINTS)}")
    width = sum(COUNT_FINGERPRINTS[k][0] for k in kinds)
    makers = [COUNT_FINGERPRINTS[k][1] for k in kinds]
    return molecule_rows(
        smiles, width, np.float32, lambda mol: np.concatenate([make(mol) for make in makers])
    )


class NearestIndex:
    """Packed fingerprints laid out for a nearest-neighbour Tanimoto search.

    The search reads the fingerprints by bit: the bits a query shares with every fingerprint
    are the sum of the query's on-bit rows (about 40 for a drug-like molecule), added 8 bytes
    at a time, not a popcount of every word of every fingerprint. The similarity
    ``c / (n + t - c)`` of a query with ``n`` bits set grows with the shared bits ``c`` among
    fingerprints with the same ``t`` bits set, so only each such group's largest ``c`` is
    divided.

    Attributes:
        by_bit: ``[bits, F']`` uint8 0 / 1, column ``j`` the ``j``-th fingerprint by bits
            set, ``F'`` = ``F`` rounded up to a multiple of 8 with empty fingerprints.
        wide: ``by_bit`` as ``[bits, F' / 8]`` uint64: one add sums 8 fingerprints' bytes.
        starts: ``[K]`` first column of each group of equal bits set.
        set_bits: ``[K]`` float32 those groups' bits set.
    """

    def __init__(self, packed: np.ndarray, bits: int) -> None:
        unpacked = np.unpackbits(packed, axis=1, count=bits, bitorder="little")  # [F, bits]
        pad = -len(unpacked) % 8
        unpacked = np.concatenate([np.zeros((pad, bits), np.uint8), unpacked])
        counts = unpacked.sum(axis=1, dtype=np.int64)
        order = np.argsort(counts, kind="stable")
        self.by_bit = np.ascontiguousarray(unpacked[order].T)
        self.wide = self.by_bit.view(np.uint64)
        set_bits, self.starts = np.unique(counts[order], return_index=True)
        self.set_bits = set_bits.astype(np.float32)

    def nearest(self, on: np.ndarray) -> float:
        """The largest similarity of the query with on-bits ``on`` (``[n]``, ``n`` >= 1)."""
        if on.size < 256:  # a byte holds every count: 8 of them a uint64 add
            common = np.add.reduce(np.take(self.wide, on, axis=0), axis=0).view(np.uint8)
        else:
            common = np.add.reduce(self.by_bit[on], axis=0, dtype=np.uint16)
        best = np.maximum.reduceat(common, self.starts).astype(np.float32)  # [K]
        return float((best / (self.set_bits + on.size - best)).max())

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """``[Q]`` float32 similarity of each query's nearest fingerprint (0: no bit set).

        Args:
            query: ``[Q, bits]`` uint8 0 / 1 fingerprints (:func:`morgan_bits`).
        """
        rows, cols = np.nonzero(query)
        sizes = np.bincount(rows, minlength=len(query))
        ends = np.cumsum(sizes)
        out = np.zeros(len(query), dtype=np.float32)
        for q, (n, end) in enumerate(zip(sizes.tolist(), ends.tolist(), strict=True)):
            if n:  # no bit set: nothing in common with anything
                out[q] = self.nearest(cols[end - n : end])
        return out


_INDEX: dict[str, NearestIndex] = {}


def nearest_index(key: str, packed: np.ndarray, bits: int) -> NearestIndex:
    """The search index of ``packed`` (``[F, bits / 8]`` uint8, bit ``b`` of a fingerprint is
    bit ``b % 8`` of byte ``b // 8``), kept under ``key`` for the last fingerprints this
    process searched (a process builds it once, not per chunk)."""
    if key not in _INDEX:
        _INDEX.clear()
        _INDEX[key] = NearestIndex(packed, bits)
    return _INDEX[key]
