r"""Train / valid / test splits: seeded random, Bemis–Murcko scaffold, or given labels.

Splits are index sets over a store's graphs, so they cost nothing to change and never touch
the store. Labels from a file (a CSV's split column, OGB's split files) are stored with the
graphs as split codes (:data:`SPLITS` positions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rdkit.Chem.Scaffolds import MurckoScaffold

from .featurize import parse_smiles

__all__ = [
    "SPLITS",
    "DEFAULT_FRACTIONS",
    "normalize_split_name",
    "split_code",
    "random_split",
    "scaffold_split",
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
    return MurckoScaffold.MurckoScaffoldSmiles(mol=parse_smiles(smiles), includeChirality=False)


def scaffold_split(
    smiles: Sequence[str], fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Deterministic Bemis–Murcko scaffold split (the MoleculeNet / OGB rule).

    Molecules are grouped by scaffold; groups are taken largest first (ties: first
    appearance) and each goes to train while it fits in the train fraction, then to valid
    while train + valid fit, else to test. Molecules sharing a scaffold never straddle splits.

    Args:
        smiles: the molecules.
        fractions: train / valid / test fractions (sum to 1).
        seed: unused (the rule is deterministic); accepted so every split rule has the same
            signature.

    Returns:
        ``{"train", "valid", "test"}`` → sorted ``int64`` index arrays covering every
        molecule exactly once.
    """
    del seed
    num = len(smiles)
    n_train, n_valid = _sizes(num, fractions)
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(murcko_scaffold(s), []).append(i)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    train: list[int] = []
    valid: list[int] = []
    test: list[int] = []
    for group in ordered:
        if len(train) + len(group) <= n_train:
            train += group
        elif len(train) + len(valid) + len(group) <= n_train + n_valid:
            valid += group
        else:
            test += group
    return {
        name: np.sort(np.asarray(part, dtype=np.int64))
        for name, part in zip(SPLITS, (train, valid, test), strict=True)
    }
