r"""``nci5k``: an embedded molecule set that needs no download.

RDKit ships the first 5,000 molecules of the NCI open database
(``<RDDataDir>/NCI/first_5k.tpsa.csv``: a comment line, then ``SMILES,TPSA`` lines). This
dataset labels each molecule with the ZINC benchmark's target,
:func:`~graphormer_urpe.datasets.zinc_target.penalized_logp`, and featurises it with OGB's
features (NCI has elements and charges outside ZINC's 28 atom types). It is a small, real,
always-available regression task for smoke tests, tutorials and CI.

Molecules whose SMILES do not parse, or whose target cannot be computed, are reported (row and
SMILES) and skipped, with the count logged. The cache is ``<root>/processed/<key>/`` (default
root ``data/nci5k``); the key covers the source file's bytes, the RDKit version (the target
depends on it), the featuriser, ``multi_hop_max_dist`` and ``limit``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

import numpy as np
from rdkit import RDConfig, rdBase
from tqdm.auto import tqdm

from .featurize import InvalidMoleculeError, parse_smiles
from .smiles import MoleculeDataset, MoleculeRecords, SkippedRow, file_digest
from .zinc_target import penalized_logp

__all__ = ["NCI5K_PATH", "NCI5K_DEFAULT_ROOT", "NCI5kDataset", "read_nci_smiles"]

logger = logging.getLogger(__name__)

NCI5K_PATH = os.path.join(RDConfig.RDDataDir, "NCI", "first_5k.tpsa.csv")
"""The NCI file shipped with RDKit."""

NCI5K_DEFAULT_ROOT = os.path.join("data", "nci5k")


def read_nci_smiles(path: str = NCI5K_PATH, limit: int | None = None) -> list[str]:
    """The SMILES of RDKit's NCI file, in file order.

    Args:
        path: the ``SMILES,TPSA`` file (``#`` lines and blank lines are skipped).
        limit: keep only the first ``limit`` molecules.

    Raises:
        FileNotFoundError: when the file is missing (an RDKit build without its Data folder).
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"RDKit's NCI molecule file is missing: {path} (the rdkit package ships it in "
            "rdkit/Data/NCI; reinstall rdkit or pass another source)"
        )
    out: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            out.append(text.rsplit(",", 1)[0].strip() if "," in text else text)
            if limit is not None and len(out) >= limit:
                break
    return out


class NCI5kDataset(MoleculeDataset):
    r"""RDKit's 5,000 NCI molecules labelled with penalized logP (one target).

    Args:
        root: dataset root (default ``data/nci5k``).
        featurizer: ``"ogb"`` (default; NCI has atoms outside ZINC's 28 types, which the
            ``"zinc"`` featuriser would skip).
        multi_hop_max_dist: passed to ``GraphormerFeatures``.
        limit: use only the first ``limit`` molecules (quick tests); ``None`` = all.
        strict: raise instead of skipping invalid molecules.
        transform: PyG ``transform`` applied on access.
        force_reload: re-process even if a cache exists.
        source: the NCI file (default: the one shipped with RDKit).
    """

    target_name = "penalized_logp"

    def __init__(
        self,
        root: str | os.PathLike[str] = NCI5K_DEFAULT_ROOT,
        featurizer: str = "ogb",
        multi_hop_max_dist: int = 20,
        limit: int | None = None,
        strict: bool = False,
        transform=None,
        force_reload: bool = False,
        source: str = NCI5K_PATH,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit}")
        self.limit = limit
        self.source = source
        if not os.path.exists(source):
            read_nci_smiles(source)  # raises the explanatory FileNotFoundError
        self._digest = file_digest(source)
        super().__init__(root, featurizer, multi_hop_max_dist, strict, transform, force_reload)

    def describe(self) -> str:
        return "nci5k" if self.source == NCI5K_PATH else f"nci5k ({self.source})"

    def describe_row(self, row: int) -> str:
        return f"row {row} (line {row + 2})"

    def cache_key(self) -> str:
        options = {
            "content": self._digest,
            "rdkit": rdBase.rdkitVersion,
            "featurizer": self.featurizer,
            "multi_hop_max_dist": self.multi_hop_max_dist,
            "limit": self.limit,
        }
        key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
        size = "all" if self.limit is None else f"first{self.limit}"
        return f"{self.featurizer}-{size}-{key}"

    def read_records(self) -> MoleculeRecords:
        all_smiles = read_nci_smiles(self.source, self.limit)
        rows: list[int] = []
        smiles: list[str] = []
        targets: list[float] = []
        skipped: list[SkippedRow] = []
        for row, s in enumerate(tqdm(all_smiles, desc="nci5k targets", disable=None, leave=False)):
            try:
                y = penalized_logp(parse_smiles(s))
            except InvalidMoleculeError as exc:
                skipped.append(SkippedRow(row, s, str(exc)))
                continue
            except Exception as exc:  # RDKit descriptor failures on exotic molecules
                skipped.append(
                    SkippedRow(row, s, f"penalized logP failed: {type(exc).__name__}: {exc}")
                )
                continue
            if not np.isfinite(y):
                skipped.append(SkippedRow(row, s, f"penalized logP is not finite ({y})"))
                continue
            rows.append(row)
            smiles.append(s)
            targets.append(y)
        return MoleculeRecords(
            rows=rows,
            smiles=smiles,
            targets=np.asarray(targets, dtype=np.float64).reshape(-1, 1),
            target_names=[self.target_name],
            skipped=skipped,
        )
