r"""Per-molecule features joined to the graph representation: ``--mol-features``.

Two kinds, alone or together (``rdkit2d+morgan``: descriptors first, then counts):

* ``rdkit2d``: Chemprop's ``--features_generators rdkit_2d_normalized`` in this library's
  terms: each molecule's 202 RDKit 2D descriptors (:mod:`.featurizers.descriptors`, computed
  once and stored in the store with the graphs), normalised with statistics of the *training*
  split only (:class:`~.featurizers.descriptors.DescriptorNormalizer`: robust centring and
  scaling, clipped to
  ±5, missing values 0);
* ``morgan``: Chemprop's ``morgan_count`` featurizer: the 2048-bit Morgan count fingerprint
  of radius 2 (ECFP4 counts, what the small-data benchmark's random forest reads as bits),
  as ``log(1 + count)``; computed from the store's SMILES the first time a graph is read,
  then kept in memory (2 KB a molecule), nothing fitted.

They reach the model as ``data.mol_x`` ``[1, K]`` / ``batch.mol_features`` ``[B, K]``;
:class:`~graphormer_urpe.graph.model.Graphormer` joins them to the graph token before its
head (``config.num_mol_features = K``).

A run records what it used (:meth:`MolFeatureMaker.record`, kept as
``DatasetSplits.mol_features``: the kind, the normaliser, the fingerprint's size), so that
``evaluate`` and ``predict`` compute the same features of new molecules with the training
split's statistics (:func:`mol_features_of_smiles`), never statistics of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .featurizers.descriptors import DescriptorNormalizer, compute_descriptors
from .split_indices import SPLITS
from .store import MoleculeStore, StoreGraphDataset

if TYPE_CHECKING:
    from .dataset_splits import DatasetSplits

__all__ = [
    "MOL_FEATURES",
    "MolFeatureMaker",
    "mol_features_of_smiles",
    "needs_descriptors",
    "with_mol_features",
]

MOL_FEATURES = ("none", "rdkit2d", "morgan", "rdkit2d+morgan")
"""Choices of ``--mol-features``."""

MORGAN = {"radius": 2, "bits": 2048}
"""The count fingerprint of ``--mol-features morgan`` (Chemprop's ``morgan_count``)."""


def _parts(kind: str) -> list[str]:
    if kind not in MOL_FEATURES:
        raise ValueError(f"unknown molecule features {kind!r}; choose one of {MOL_FEATURES}")
    return [] if kind == "none" else kind.split("+")


def needs_descriptors(kind: str) -> bool:
    """Whether molecule features ``kind`` need the store's descriptors (``ValueError`` for an
    unknown kind)."""
    return "rdkit2d" in _parts(kind)


def morgan_counts(smiles: Sequence[str], radius: int, bits: int) -> np.ndarray:
    """``[N, bits]`` uint8 Morgan count fingerprints of ``smiles``, counts above 255 kept at
    255 (a SMILES RDKit cannot read: a row of zeros)."""
    from .featurizers.fingerprints import molecule_rows, morgan_generator

    gen = morgan_generator(radius, bits)
    return molecule_rows(
        smiles, bits, np.uint8, lambda mol: np.minimum(gen.GetCountFingerprintAsNumPy(mol), 255)
    )


@dataclass(frozen=True)
class MolFeatureMaker:
    """One run's molecule features ``[n, K]``, of store positions or of SMILES.

    Attributes:
        kind: one of :data:`MOL_FEATURES` other than ``"none"``.
        descriptors: the training split's normaliser (kinds with ``rdkit2d``).
        morgan: ``{"radius", "bits"}`` of the count fingerprint (kinds with ``morgan``).
    """

    kind: str
    descriptors: DescriptorNormalizer | None = None
    morgan: dict[str, int] | None = None
    _counts: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    """Morgan counts ``[bits]`` uint8 by store position, computed once per process (epochs
    read the same molecules again; 2 KB a molecule)."""

    @classmethod
    def fit(cls, kind: str, train: StoreGraphDataset) -> MolFeatureMaker:
        """The features ``kind`` with statistics of the training split ``train``."""
        norm = None
        if needs_descriptors(kind):
            raw = train.store.descriptors[train.positions]  # [N, 202]
            norm = DescriptorNormalizer.fit(raw, train.store.descriptor_names)
        return cls(kind, norm, dict(MORGAN) if "morgan" in _parts(kind) else None)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> MolFeatureMaker:
        """The features a run recorded (:meth:`record`)."""
        norm = record.get("descriptors")
        return cls(
            record["kind"],
            None if norm is None else DescriptorNormalizer.from_dict(norm),
            record.get("morgan"),
        )

    def record(self) -> dict[str, Any]:
        """A JSON-friendly record (a run's ``DatasetSplits.mol_features``)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.descriptors is not None:
            out["descriptors"] = self.descriptors.to_dict()
        if self.morgan is not None:
            out["morgan"] = dict(self.morgan)
        return out

    def check(self, store: MoleculeStore) -> None:
        """``ValueError`` unless ``store`` holds what these features are computed from."""
        if self.descriptors is not None and list(self.descriptors.names) != (
            store.descriptor_names
        ):
            raise ValueError(
                f"{store.folder}: its descriptors are not those of the molecule-feature "
                "normaliser (a store built with descriptors=True of the same descriptor set)"
            )
        if self.morgan is not None and not store.has_smiles:
            raise ValueError(f"{store.folder}: Morgan features need the store's SMILES")

    def of_smiles(self, smiles: Sequence[str], raw: np.ndarray | None = None) -> np.ndarray:
        """``[N, K]`` float32 features of ``smiles`` (``raw``: their raw descriptors
        ``[N, 202]`` where already computed)."""
        counts = self._morgan(smiles) if self.morgan is not None else None
        return self._join(lambda: compute_descriptors(smiles) if raw is None else raw, counts)

    def of_store(self, store: MoleculeStore, positions: Sequence[int]) -> np.ndarray:
        """``[n, K]`` float32 features of the graphs at store ``positions``."""
        pos = np.asarray(positions, dtype=np.int64)
        counts = None
        if self.morgan is not None:
            new = [int(p) for p in pos if int(p) not in self._counts]
            if new:
                self._counts.update(zip(new, self._morgan(store.smiles(new)), strict=True))
            counts = np.stack([self._counts[int(p)] for p in pos])
        return self._join(lambda: store.descriptors[pos], counts)

    def _morgan(self, smiles: Sequence[str]) -> np.ndarray:
        assert self.morgan is not None
        return morgan_counts(smiles, self.morgan["radius"], self.morgan["bits"])

    def _join(self, raw_descriptors: Any, counts: np.ndarray | None) -> np.ndarray:
        parts = []
        if self.descriptors is not None:
            parts.append(self.descriptors.transform(raw_descriptors()))
        if counts is not None:
            parts.append(np.log1p(counts, dtype=np.float32))
        return np.concatenate(parts, axis=1)


def with_mol_features(
    splits: DatasetSplits, kind: str, record: dict[str, Any] | None = None
) -> DatasetSplits:
    """``splits`` whose graphs carry ``mol_x`` ``[1, K]`` (``kind="none"``: ``splits`` as is).

    Args:
        splits: splits over stores of SMILES (``csv:`` datasets), built with descriptors
            for kinds with ``rdkit2d``.
        kind: one of :data:`MOL_FEATURES`.
        record: a run's :attr:`DatasetSplits.mol_features` (from its checkpoint): applied
            as it is instead of fitting a normaliser on ``splits.train``.

    Returns:
        The splits, with :attr:`DatasetSplits.mol_features` = the maker's record.
    """
    if not _parts(kind):
        return splits
    parts = {p: getattr(splits, p) for p in SPLITS}
    for p, ds in parts.items():
        if not isinstance(ds, StoreGraphDataset) or not ds.store.has_smiles:
            raise ValueError(
                f"--mol-features {kind}: the {p} split of {splits.name} is not a store of "
                "SMILES (molecule features are computed for csv: datasets)"
            )
        if needs_descriptors(kind) and not ds.store.has_descriptors:
            raise ValueError(
                f"--mol-features {kind}: the {p} split of {splits.name} has no stored "
                "descriptors (molecule features are computed for csv: datasets)"
            )
    if record is not None:
        maker = MolFeatureMaker.from_record(record)
    else:
        maker = MolFeatureMaker.fit(kind, parts["train"])
    sets = {
        p: StoreGraphDataset(
            ds.store, ds.positions, ds.multi_hop_max_dist, ds.name, mol_features=maker
        )
        for p, ds in parts.items()
    }
    return replace(splits, **sets, mol_features=maker.record())


def mol_features_of_smiles(
    smiles: Sequence[str], record: dict[str, Any], raw: np.ndarray | None = None
) -> np.ndarray:
    """``[N, K]`` float32 molecule features of ``smiles`` as a run recorded them (``record``:
    :attr:`DatasetSplits.mol_features`), with its training split's normalisation (``raw``:
    their raw descriptors ``[N, 202]`` where already computed)."""
    return MolFeatureMaker.from_record(record).of_smiles(smiles, raw)
