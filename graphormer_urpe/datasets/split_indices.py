r"""Train / valid / test splits: seeded random, Bemis–Murcko scaffold (deterministic or
seeded and balanced), or given labels.

Splits are index sets over a store's graphs, so they cost nothing to change and never touch
the store. Labels from a file (a CSV's split column, OGB's split files) are stored with the
graphs as split codes (:data:`SPLITS` positions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .featurizers.smiles import parse_smiles

__all__ = [
    "SPLITS",
    "DEFAULT_FRACTIONS",
    "normalize_split_name",
    "split_code",
    "random_split",
    "scaffold_split",
    "balanced_scaffold_split",
    "murcko_scaffold",
]

SPLITS: tuple[str, str, str] = ("train", "valid", "test")
DEFAULT_FRACTIONS: tuple[float, float, float] = (0.8, 0.1, 0.1)
_SPLIT_ALIASES = {
    "train": "train",
    "valid": "valid",
    "val": "valid",
    "validation": "valid",
    "test": "test",
}


def split_code(name: str) -> int:
    """The stored code of a split name: ``0`` train, ``1`` valid, ``2`` test."""
    return SPLITS.index(name)


def normalize_split_name(value: object, where: str = "") -> str:
    """Map a split label to ``"train"`` / ``"valid"`` / ``"test"``.

    Accepts ``train``, ``valid``, ``val``, ``validation`` and ``test`` in any case, with
    surrounding spaces.

    Raises:
        ValueError: for anything else (the message names ``where`` and the value).
    """
    key = str(value).strip().lower() if isinstance(value, str) else None
    if key not in _SPLIT_ALIASES:
        prefix = f"{where}: " if where else ""
        raise ValueError(
            f"{prefix}unknown split label {value!r}; expected one of {sorted(_SPLIT_ALIASES)}"
        )
    return _SPLIT_ALIASES[key]


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    if len(fractions) != 3:
        raise ValueError(f"need three split fractions (train, valid, test), got {fractions!r}")
    f = tuple(float(v) for v in fractions)
    if min(f) < 0 or abs(sum(f) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions!r}")
    return f  # type: ignore[return-value]


def _sizes(num: int, fractions: Sequence[float]) -> tuple[int, int]:
    f = _check_fractions(fractions)
    n_train = int(np.floor(f[0] * num + 1e-9))
    n_valid = min(int(np.floor(f[1] * num + 1e-9)), num - n_train)
    return n_train, n_valid


def random_split(
    num: int, fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> dict[str, np.ndarray]:
    """A seeded random split of ``range(num)``.

    Args:
        num: number of items.
        fractions: train / valid / test fractions (sum to 1); train and valid sizes are
            rounded down and the test split takes the rest.
        seed: seed of the permutation (same seed, same split).

    Returns:
        ``{"train", "valid", "test"}`` → sorted ``int64`` index arrays that cover every item
        exactly once.
    """
    n_train, n_valid = _sizes(num, fractions)
    perm = np.random.default_rng(seed).permutation(num)
    parts = (perm[:n_train], perm[n_train : n_train + n_valid], perm[n_train + n_valid :])
    return {name: np.sort(p).astype(np.int64) for name, p in zip(SPLITS, parts, strict=True)}


def murcko_scaffold(smiles: str) -> str:
    """Bemis–Murcko scaffold SMILES of a molecule (``""`` for acyclic molecules)."""
    from rdkit.Chem.Scaffolds import MurckoScaffold  # imports RDKit's AllChem: only when used

    return MurckoScaffold.MurckoScaffoldSmiles(mol=parse_smiles(smiles), includeChirality=False)


def scaffold_split(
    smiles: Sequence[str], fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Bemis–Murcko scaffold split: the training molecules of the MoleculeNet / OGB rule, the
    scaffold families it holds out dealt alike to validation and test.

    Molecules are grouped by scaffold; groups are taken largest first (ties: first
    appearance), each going to train while it fits in the train fraction, as in the
    MoleculeNet / OGB rule. The groups left, the rarer scaffolds, are then dealt in a seeded
    random order: to valid while it fits, else to test. Validation and test molecules are so
    new scaffolds of the same kind, and what the validation split measures (the checkpoint's
    error, the intervals' calibration) carries over to the test split; under the MoleculeNet
    rule valid took the larger held-out families and test the rarest, the hardest.
    Molecules sharing a scaffold never straddle splits; the training split does not depend
    on ``seed``.

    Args:
        smiles: the molecules.
        fractions: train / valid / test fractions (sum to 1).
        seed: seed of the order in which held-out families are dealt to valid and test.

    Returns:
        ``{"train", "valid", "test"}`` → sorted ``int64`` index arrays covering every
        molecule exactly once.
    """
    groups = sorted(_scaffold_groups(smiles), key=lambda g: (-len(g), g[0]))
    n_train, n_valid = _sizes(len(smiles), fractions)
    train: list[int] = []
    held: list[list[int]] = []
    for group in groups:
        if len(train) + len(group) <= n_train:
            train += group
        else:
            held.append(group)
    order = np.random.default_rng(seed).permutation(len(held))
    parts = _fill([held[i] for i in order], 0, n_valid)
    parts["train"] = np.sort(np.asarray(train, dtype=np.int64))
    return parts


def balanced_scaffold_split(
    smiles: Sequence[str], fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded, balanced Bemis–Murcko scaffold split (Chemprop's ``scaffold_balanced``).

    Scaffold groups larger than half the valid or the test size come first, then the others,
    each part in a seeded random order; each group goes to train while it fits, else to valid
    while valid fits, else to test. Different seeds give different splits, and large groups
    stay in train, so the valid and test sets hold many small scaffold families.

    Args:
        smiles: the molecules.
        fractions: train / valid / test fractions (sum to 1).
        seed: seed of the group orders.

    Returns:
        ``{"train", "valid", "test"}`` → sorted ``int64`` index arrays covering every
        molecule exactly once.
    """
    groups = _scaffold_groups(smiles)
    num = len(smiles)
    n_train, n_valid = _sizes(num, fractions)
    half = min(n_valid, num - n_train - n_valid) / 2
    rng = np.random.default_rng(seed)
    big = [g for g in groups if len(g) > half]
    small = [g for g in groups if len(g) <= half]
    ordered = [part[i] for part in (big, small) for i in rng.permutation(len(part))]
    return _fill(ordered, n_train, n_valid)


def _scaffold_groups(smiles: Sequence[str]) -> list[list[int]]:
    """The molecules' indices grouped by scaffold, groups in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(murcko_scaffold(s), []).append(i)
    return list(groups.values())


def _fill(ordered: Sequence[list[int]], n_train: int, n_valid: int) -> dict[str, np.ndarray]:
    """Groups to train while it fits, then to valid while it fits, else to test."""
    train: list[int] = []
    valid: list[int] = []
    test: list[int] = []
    for group in ordered:
        if len(train) + len(group) <= n_train:
            train += group
        elif len(valid) + len(group) <= n_valid:
            valid += group
        else:
            test += group
    return {
        name: np.sort(np.asarray(part, dtype=np.int64))
        for name, part in zip(SPLITS, (train, valid, test), strict=True)
    }
