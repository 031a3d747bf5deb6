r"""Applicability domain: is a new molecule like the ones a model was trained on?

A model trained on drug-like molecules still returns a number for ``[Na+].[Cl-]`` or a
400-carbon chain. A run therefore records, from its training split, what its molecules are
made of (:class:`DomainRecord`, kept in the checkpoint under ``"domain"``), and ``predict``
compares every new molecule with it (:meth:`DomainRecord.check`). A molecule is *out of the
domain* for each of these reasons:

==========================  ================================================================
reason                      meaning
==========================  ================================================================
``element Na``              an element no training molecule has
``charge [Cl-]``            an element seen in training, but never with this formal charge
                            (SMILES bracket notation: ``[N+]``, ``[O-]``, ``[Fe+2]``, ``[Na]``)
``fragments 2 > 1``         more disconnected pieces (a salt, a mixture) than any training
                            molecule has
``atoms 400 > 38``          more heavy atoms than any training molecule has
==========================  ================================================================

Beside these, where the training store keeps SMILES, the record holds the Morgan
fingerprints (ECFP4: radius 2, :data:`FINGERPRINT_BITS` bits) of at most
:data:`FINGERPRINT_CAP` training molecules (a sample drawn with :data:`FINGERPRINT_SEED`
beyond that, packed 8 bits a byte: at most 1.25 MiB), and each new molecule gets the
Tanimoto similarity of its nearest one (1: a training molecule's fingerprint; below about
0.3 to 0.4: nothing close was trained on). The similarity is reported, not turned into a
reason: where the line lies depends on the task.

Everything a molecule contributes is read from its graph (the featuriser's atom features,
bonds and atom count), so the training split (read from the store) and new molecules (the
chunk arrays of :func:`~.store.featurize_chunk`) are described by the same code; only the
fingerprints need the RDKit molecule. Graph-only stores (no SMILES) give a record without
fingerprints; :attr:`DomainRecord.checks` says what a record can check. What a molecule is
made of is read by :mod:`.composition`.

Example::

    record = domain_record(splits.train, splits.featurizer)       # when a run starts
    ckpt["domain"] = record.to_dict()                             # plain values + a tensor
    ...
    record = DomainRecord.from_dict(ckpt["domain"])
    mols = []
    arrays, failures, _ = featurize_chunk(smiles, targets, featurizer="ogb", mols=mols)
    result = record.check(arrays, mols)                           # ChunkDomain, [G] each
    result[0].label                                               # "in" or "out: ..."
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .composition import OTHER_CHARGE, GraphFacts, fragment_counts, graph_facts, species_key
from .featurizers.fingerprints import morgan_bits, nearest_index

if TYPE_CHECKING:
    from rdkit import Chem

__all__ = [
    "CHECKS",
    "FINGERPRINT_BITS",
    "FINGERPRINT_CAP",
    "FINGERPRINT_RADIUS",
    "FINGERPRINT_SEED",
    "OTHER_CHARGE",
    "ChunkDomain",
    "DomainCheck",
    "DomainRecord",
    "GraphFacts",
    "domain_record",
    "fragment_counts",
    "graph_facts",
    "morgan_bits",
    "record_of_smiles",
]

log = logging.getLogger(__name__)

FINGERPRINT_RADIUS = 2
"""Morgan radius of the fingerprints (2: ECFP4)."""
FINGERPRINT_BITS = 1024
"""Fingerprint length in bits (128 bytes a molecule, packed)."""
FINGERPRINT_CAP = 10_000
"""Most training molecules whose fingerprints a record keeps: 1.25 MiB packed, and a
nearest-neighbour search that stays small beside the model's forward pass (measured:
docs/results/code-notes.md)."""
FINGERPRINT_SEED = 0
"""Seed of the sample of training molecules kept when there are more than the cap (fixed, so
that the members of an ensemble, which differ in their seed, record the same)."""
CHECKS = ("elements", "charges", "fragments", "atoms", "similarity")
"""What a record can check, in the order of :attr:`DomainRecord.checks`."""

_FORMAT = 1
_BLOCK = 65_536  # training graphs read from the store at a time


# --------------------------------------------------------------------------------------
# The comparison of new molecules with the record
# --------------------------------------------------------------------------------------


class DomainCheck(NamedTuple):
    """One molecule compared with a training record.

    Attributes:
        reasons: why it is out of the domain (``()``: in; see the module's table).
        nearest_similarity: Tanimoto similarity of the nearest recorded training
            fingerprint, or ``None`` (the record has none, or the search was turned off).
        atoms: its heavy atoms.
        fragments: its connected pieces.
    """

    reasons: tuple[str, ...]
    nearest_similarity: float | None
    atoms: int
    fragments: int

    @property
    def in_domain(self) -> bool:
        """No reason to doubt it (the similarity aside)."""
        return not self.reasons

    @property
    def label(self) -> str:
        """``"in"`` or ``"out: <reason>; <reason>"``."""
        return "in" if not self.reasons else "out: " + "; ".join(self.reasons)


@dataclass
class ChunkDomain:
    """``G`` molecules compared with a record (what a featurising process sends back).

    Attributes:
        reasons: ``[G]`` why each is out of the domain (``()``: in).
        similarity: ``[G]`` float32 nearest training similarity, or ``None`` (not searched).
        atoms: ``[G]`` int64 heavy atoms.
        fragments: ``[G]`` int64 connected pieces.
    """

    reasons: list[tuple[str, ...]]
    similarity: np.ndarray | None
    atoms: np.ndarray
    fragments: np.ndarray

    def __len__(self) -> int:
        return len(self.reasons)

    def __getitem__(self, k: int) -> DomainCheck:
        sim = None if self.similarity is None else float(self.similarity[k])
        return DomainCheck(self.reasons[k], sim, int(self.atoms[k]), int(self.fragments[k]))


@dataclass
class DomainRecord:
    """What a model's training molecules are made of (see the module's text).

    Attributes:
        featurizer: the featuriser the graphs were read with.
        molecules: training molecules described.
        species: ``[S, 2]`` int64 sorted (atomic number, formal charge) pairs seen.
        max_fragments: the most connected pieces of a training molecule.
        max_atoms: the most heavy atoms of a training molecule.
        fingerprints: ``[F, bits / 8]`` uint8 packed Morgan fingerprints (bit ``b`` of a
            molecule is bit ``b % 8`` of byte ``b // 8``), or ``None``: no SMILES.
        fingerprint_pool: training molecules the fingerprints were drawn from (``F`` is at
            most :attr:`cap` of them).
        radius: Morgan radius.
        bits: fingerprint length.
        cap: the most fingerprints kept.
        seed: seed of the sample beyond the cap.
    """

    featurizer: str
    molecules: int
    species: np.ndarray
    max_fragments: int
    max_atoms: int
    fingerprints: np.ndarray | None = None
    fingerprint_pool: int = 0
    radius: int = FINGERPRINT_RADIUS
    bits: int = FINGERPRINT_BITS
    cap: int = FINGERPRINT_CAP
    seed: int = FINGERPRINT_SEED
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks this record can make (a subset of :data:`CHECKS`)."""
        base = ("elements", "charges", "fragments", "atoms")
        return (*base, "similarity") if self.fingerprints is not None else base

    @property
    def digest(self) -> str:
        """A short hash of the fingerprints (the key of a process's search index)."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(f"{self.radius}/{self.bits}".encode())
            if self.fingerprints is not None:
                h.update(np.ascontiguousarray(self.fingerprints).tobytes())
            self._digest = h.hexdigest()
        return self._digest

    def summary(self) -> str:
        """One line for a log."""
        fps = (
            f"fingerprints of {len(self.fingerprints)} of {self.fingerprint_pool}"
            if self.fingerprints is not None
            else "no fingerprints (no SMILES)"
        )
        elements = sorted({int(z) for z in self.species[:, 0]})
        return (
            f"{self.molecules} training molecules: {len(elements)} elements, "
            f"{len(self.species)} (element, charge) pairs, at most {self.max_fragments} "
            f"fragments and {self.max_atoms} heavy atoms; {fps}"
        )

    # ----------------------------------------------------------------------------------
    # Checkpoint form
    # ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint form: plain values and one uint8 tensor, which
        ``torch.load(weights_only=True)`` reads."""
        import torch

        fps = None
        if self.fingerprints is not None:
            fps = {
                "kind": "morgan",
                "radius": self.radius,
                "bits": self.bits,
                "cap": self.cap,
                "seed": self.seed,
                "pool": self.fingerprint_pool,
                "packed": torch.from_numpy(np.ascontiguousarray(self.fingerprints, np.uint8)),
            }
        return {
            "format": _FORMAT,
            "featurizer": self.featurizer,
            "molecules": self.molecules,
            "checks": list(self.checks),
            "species": self.species.tolist(),
            "max_fragments": self.max_fragments,
            "max_atoms": self.max_atoms,
            "fingerprints": fps,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DomainRecord:
        """The record of :meth:`to_dict`'s form."""
        fps = d.get("fingerprints")
        extra: dict[str, Any] = {}
        if fps is not None:
            packed = fps["packed"]
            packed = packed.numpy() if hasattr(packed, "numpy") else np.asarray(packed)
            extra = {
                "fingerprints": np.ascontiguousarray(packed, dtype=np.uint8),
                "fingerprint_pool": int(fps["pool"]),
                "radius": int(fps["radius"]),
                "bits": int(fps["bits"]),
                "cap": int(fps["cap"]),
                "seed": int(fps["seed"]),
            }
        species = np.asarray(d["species"], dtype=np.int64).reshape(-1, 2)
        record = cls(
            featurizer=str(d["featurizer"]),
            molecules=int(d["molecules"]),
            species=species,
            max_fragments=int(d["max_fragments"]),
            max_atoms=int(d["max_atoms"]),
            **extra,
        )
        record.digest  # noqa: B018 - computed once here, it travels with the record to workers
        return record

    # ----------------------------------------------------------------------------------
    # Comparison
    # ----------------------------------------------------------------------------------

    def check(
        self,
        arrays: dict[str, np.ndarray],
        mols: Sequence[Chem.Mol] | None = None,
        similarity: bool = True,
    ) -> ChunkDomain:
        """Compare ``G`` new molecules with the record.

        Args:
            arrays: their graphs (:func:`graph_facts`' ``arrays``).
            mols: ``[G]`` their RDKit molecules, for the nearest-neighbour similarity
                (``None``: not searched).
            similarity: search the nearest training fingerprint (where the record has
                fingerprints and ``mols`` are given).

        Returns:
            Their reasons, similarities (``None`` when not searched), atoms and fragments.
        """
        facts = graph_facts(arrays, self.featurizer)
        g = facts.atoms.size
        graph = np.repeat(np.arange(g), facts.atoms)  # [sum atoms] the graph of each atom
        new_element = ~np.isin(facts.atomic_number, self.species[:, 0])
        new_pair = ~np.isin(facts.keys, species_key(self.species[:, 0], self.species[:, 1]))
        new_pair &= ~new_element
        out = np.zeros(g, dtype=bool)
        out[graph[new_element | new_pair]] = True
        out |= facts.fragments > self.max_fragments
        out |= facts.atoms > self.max_atoms
        reasons: list[tuple[str, ...]] = [()] * g
        if out.any():
            ptr = np.zeros(g + 1, dtype=np.int64)
            np.cumsum(facts.atoms, out=ptr[1:])
            for k in np.flatnonzero(out).tolist():
                atoms = slice(ptr[k], ptr[k + 1])
                reasons[k] = self._reasons(
                    facts.atomic_number[atoms][new_element[atoms]],
                    facts.atomic_number[atoms][new_pair[atoms]],
                    facts.charge[atoms][new_pair[atoms]],
                    int(facts.fragments[k]),
                    int(facts.atoms[k]),
                )
        sim = None
        if similarity and mols is not None and self.fingerprints is not None:
            if len(mols) != g:
                raise ValueError(f"{len(mols)} molecules for {g} graphs")
            sim = self.nearest_similarity(morgan_bits(mols, self.radius, self.bits))
        return ChunkDomain(reasons, sim, facts.atoms, facts.fragments)

    def _reasons(
        self,
        new_elements: np.ndarray,
        pair_elements: np.ndarray,
        pair_charges: np.ndarray,
        fragments: int,
        atoms: int,
    ) -> tuple[str, ...]:
        """One molecule's reasons (see the module's table)."""
        out = []
        if new_elements.size:
            names = [_symbol(z) for z in sorted(set(new_elements.tolist()))]
            out.append(f"element {', '.join(names)}")
        if pair_elements.size:
            pairs = sorted(set(zip(pair_elements.tolist(), pair_charges.tolist(), strict=True)))
            out.append(f"charge {', '.join(_charged(z, c) for z, c in pairs)}")
        if fragments > self.max_fragments:
            out.append(f"fragments {fragments} > {self.max_fragments}")
        if atoms > self.max_atoms:
            out.append(f"atoms {atoms} > {self.max_atoms}")
        return tuple(out)

    def nearest_similarity(self, query: np.ndarray) -> np.ndarray:
        """``[Q]`` float32 Tanimoto similarity of each query's nearest recorded fingerprint
        (:class:`~.featurizers.fingerprints.NearestIndex`, built once per process).

        Args:
            query: ``[Q, bits]`` uint8 0 / 1 fingerprints (:func:`morgan_bits`).
        """
        if self.fingerprints is None:
            raise ValueError("the record has no fingerprints")
        return nearest_index(self.digest, self.fingerprints, self.bits).similarities(query)

    def smiles_similarity(self, smiles: Sequence[str]) -> np.ndarray:
        """``[N]`` float64 Tanimoto similarity of each SMILES's nearest recorded fingerprint
        (``NaN`` where RDKit cannot read it), as :meth:`check` gives it for a chunk."""
        mols = _parse(smiles, keep_failures=True)
        ok = [i for i, m in enumerate(mols) if m is not None]
        out = np.full(len(mols), np.nan)
        if ok:
            bits = morgan_bits([mols[i] for i in ok], self.radius, self.bits)
            out[ok] = self.nearest_similarity(bits)
        return out


def split_similarity(
    record: DomainRecord | dict[str, Any] | None, dataset: Any
) -> np.ndarray | None:
    """``[n]`` the nearest training similarity of each molecule of a stored split (in its
    order), ``None`` where the record (or its checkpoint form) has no fingerprints or the store
    keeps no SMILES."""
    if isinstance(record, dict):
        record = DomainRecord.from_dict(record)
    if record is None or record.fingerprints is None:
        return None
    if not getattr(dataset.store, "has_smiles", False):
        return None
    return record.smiles_similarity(dataset.smiles())


def _symbol(atomic_number: int) -> str:
    if atomic_number == 0:
        return "*"
    from rdkit import Chem

    return Chem.GetPeriodicTable().GetElementSymbol(int(atomic_number))


def _charged(atomic_number: int, charge: int) -> str:
    """``[Cl-]``, ``[Fe+2]``, ``[Na]`` (neutral); a charge the featuriser does not encode:
    ``[C charge beyond ±5]``."""
    symbol = _symbol(atomic_number)
    if charge == OTHER_CHARGE:
        return f"[{symbol} charge beyond ±5]"
    sign = "+" if charge > 0 else "-"
    size = "" if abs(charge) == 1 else str(abs(charge))
    return f"[{symbol}{sign}{size}]" if charge else f"[{symbol}]"


# --------------------------------------------------------------------------------------
# The record of a training split
# --------------------------------------------------------------------------------------


def domain_record(
    dataset: Any,
    featurizer: str,
    cap: int = FINGERPRINT_CAP,
    seed: int = FINGERPRINT_SEED,
) -> DomainRecord | None:
    """The record of a training split, read from its store.

    Args:
        dataset: a :class:`~.store.StoreGraphDataset` (anything else: ``None``).
        featurizer: its featuriser (``"ogb"`` or ``"zinc"``).
        cap: the most fingerprints kept (a seeded sample beyond it).
        seed: the sample's seed.

    Returns:
        The record; with fingerprints where the store keeps SMILES.
    """
    from .store import StoreGraphDataset, gather_arrays

    if not isinstance(dataset, StoreGraphDataset) or len(dataset) == 0:
        return None
    arrays, positions = dataset.store.open(), dataset.positions
    blocks = (
        gather_arrays(arrays, positions[start : start + _BLOCK])
        for start in range(0, positions.size, _BLOCK)
    )
    record = _composition(blocks, featurizer)
    if dataset.store.has_smiles:
        pick = _sample(len(dataset), cap, seed)
        smiles = dataset.store.smiles(positions[pick])
        _add_fingerprints(record, _parse(smiles), len(dataset), cap, seed)
    return record


def record_of_smiles(
    smiles: Sequence[str],
    featurizer: str = "ogb",
    cap: int = FINGERPRINT_CAP,
    seed: int = FINGERPRINT_SEED,
) -> DomainRecord:
    """The record of training molecules given as SMILES (those that do not featurise are left
    out), e.g. to give an older checkpoint one: ``ckpt["domain"] = record.to_dict()``.

    Args:
        smiles: ``[M]`` SMILES.
        featurizer: the model's featuriser (``"ogb"`` or ``"zinc"``).
        cap: the most fingerprints kept (a seeded sample beyond it).
        seed: the sample's seed.
    """
    from .store import featurize_chunk

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, len(smiles), _BLOCK):
            part = list(smiles[start : start + _BLOCK])
            yield featurize_chunk(part, np.zeros((len(part), 1)), 0, featurizer)[0]

    record = _composition(blocks(), featurizer)
    pick = _sample(len(smiles), cap, seed)
    _add_fingerprints(record, _parse([smiles[k] for k in pick]), len(smiles), cap, seed)
    return record


def _composition(blocks: Iterable[dict[str, np.ndarray]], featurizer: str) -> DomainRecord:
    """A record without fingerprints of the graphs of chunk or store arrays."""
    keys: set[int] = set()
    molecules = max_fragments = max_atoms = 0
    for arrays in blocks:
        facts = graph_facts(arrays, featurizer)
        keys.update(np.unique(facts.keys).tolist())
        molecules += facts.atoms.size
        max_fragments = max(max_fragments, int(facts.fragments.max(initial=0)))
        max_atoms = max(max_atoms, int(facts.atoms.max(initial=0)))
    pairs = [(k // 1000, k % 1000 - 500) for k in sorted(keys)]  # see species_key
    species = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return DomainRecord(featurizer, molecules, species, max_fragments, max_atoms)


def _sample(n: int, cap: int, seed: int) -> np.ndarray:
    """``[min(n, cap)]`` sorted positions: all of ``0..n-1``, or a seeded sample of ``cap``."""
    if n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))


def _parse(smiles: Sequence[str], keep_failures: bool = False) -> list[Chem.Mol]:
    """The RDKit molecules of SMILES that parse (a store's all do); with ``keep_failures``,
    one per SMILES, ``None`` where it does not parse."""
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mols = [Chem.MolFromSmiles(str(s).strip()) for s in smiles]
    return mols if keep_failures else [m for m in mols if m is not None]


def _add_fingerprints(
    record: DomainRecord, mols: Sequence[Chem.Mol], pool: int, cap: int, seed: int
) -> None:
    """Give ``record`` the packed fingerprints of ``mols``, drawn from ``pool`` molecules
    (none when there are no molecules)."""
    if not mols:
        return
    bits = morgan_bits(mols, record.radius, record.bits)
    record.fingerprints = np.packbits(bits, axis=1, bitorder="little")  # [F, bits / 8]
    record.fingerprint_pool, record.cap, record.seed = pool, cap, seed
    record._digest = None
