r"""Per-molecule features joined to the graph representation: ``--mol-features rdkit2d``.

Chemprop's ``--features_generators rdkit_2d_normalized`` in this library's terms: each
molecule's 202 RDKit 2D descriptors (:mod:`.descriptors`, computed once and cached in the
store with the graphs), normalised with statistics of the *training* split only
(:class:`~.descriptors.DescriptorNormalizer`: robust centring and scaling, clipped to ±5,
missing values 0), reach the model as ``data.mol_x`` ``[1, K]`` / ``batch.mol_features``
``[B, K]``; :class:`~graphormer_urpe.graph.model.Graphormer` joins them to the graph token
before its head (``config.num_mol_features = K``).

A run records what it used (:func:`with_mol_features`'s ``DatasetSplits.mol_features``: the
kind and the normaliser), so that ``evaluate`` and ``predict`` apply the training split's
statistics to new molecules (:func:`mol_features_of_smiles`), never statistics of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .descriptors import DescriptorNormalizer, compute_descriptors
from .splitting import SPLITS
from .store import CachedGraphDataset

if TYPE_CHECKING:
    from .dataset_splits import DatasetSplits

__all__ = ["MOL_FEATURES", "mol_features_of_smiles", "needs_descriptors", "with_mol_features"]

MOL_FEATURES = ("none", "rdkit2d")
"""Choices of ``--mol-features``."""


def needs_descriptors(kind: str) -> bool:
    """Whether molecule features ``kind`` need the store's descriptors (``ValueError`` for an
    unknown kind)."""
    if kind not in MOL_FEATURES:
        raise ValueError(f"unknown molecule features {kind!r}; choose one of {MOL_FEATURES}")
    return kind == "rdkit2d"


def with_mol_features(
    splits: DatasetSplits, kind: str, record: dict[str, Any] | None = None
) -> DatasetSplits:
    """``splits`` whose graphs carry ``mol_x`` ``[1, K]`` (``kind="none"``: ``splits`` as is).

    Args:
        splits: splits over stores built with descriptors (``csv:`` datasets with
            ``mol_features="rdkit2d"``).
        kind: ``"none"`` or ``"rdkit2d"``.
        record: a run's :attr:`DatasetSplits.mol_features` (from its checkpoint): its
            normaliser is applied instead of fitting one on ``splits.train``.

    Returns:
        The splits, with :attr:`DatasetSplits.mol_features` =
        ``{"kind": kind, "descriptors": normaliser.to_dict()}``.
    """
    if not needs_descriptors(kind):
        return splits
    parts = {p: getattr(splits, p) for p in SPLITS}
    for p, ds in parts.items():
        if not (isinstance(ds, CachedGraphDataset) and ds.cache.has_descriptors):
            raise ValueError(
                f"--mol-features {kind}: the {p} split of {splits.name} has no stored "
                "descriptors (molecule features are computed for csv: datasets)"
            )
    train = parts["train"]
    if record is not None:
        norm = DescriptorNormalizer.from_dict(record["descriptors"])
    else:
        norm = DescriptorNormalizer.fit(
            train.cache.descriptors[train.positions], train.cache.descriptor_names
        )
    sets = {
        p: CachedGraphDataset(
            ds.cache, ds.positions, ds.multi_hop_max_dist, ds.name, mol_features=norm
        )
        for p, ds in parts.items()
    }
    return replace(splits, **sets, mol_features={"kind": kind, "descriptors": norm.to_dict()})


def mol_features_of_smiles(smiles: Sequence[str], record: dict[str, Any]) -> np.ndarray:
    """``[N, K]`` float32 molecule features of ``smiles`` as a run recorded them (``record``:
    :attr:`DatasetSplits.mol_features`), with its training split's normalisation."""
    norm = DescriptorNormalizer.from_dict(record["descriptors"])
    return norm.transform(compute_descriptors(smiles))
