r"""Molecules from SMILES: a cached PyG dataset base, the CSV dataset, and split rules.

:class:`MoleculeDataset` is the shared machinery: it turns a list of records (source row,
SMILES, targets, optional split label) into graphs with a featuriser from
:data:`~graphormer_urpe.datasets.featurize.FEATURIZERS`, adds Graphormer's structural features
(:class:`~graphormer_urpe.graph.features.GraphormerFeatures` as ``pre_transform``) and caches
everything under ``<root>/processed/<key>/`` where ``key`` hashes every option that changes the
result, so changing an option re-processes instead of silently reusing a stale cache.

:class:`SmilesCSVDataset` reads a CSV (or gzipped CSV) with a SMILES column and one or more
numeric target columns:

* **Invalid SMILES** (unparsable, empty, no atoms, or atoms the featuriser cannot encode) are
  reported with their row and string, skipped, and counted in the log; ``strict=True`` turns
  them into an :class:`~graphormer_urpe.datasets.featurize.InvalidMoleculeError` naming the
  file, the rows and the SMILES instead. A file in which no molecule is valid is an error.
* **Missing target values** (empty cells, ``NA``, ``nan``, ...) become ``NaN`` and the molecule
  is kept: training and evaluation mask ``NaN`` targets out, so a multi-target file with gaps
  needs no special handling (:func:`~graphormer_urpe.datasets.load_dataset` leaves training
  rows without any target value out, and logs them). A non-numeric or infinite target value is
  an error naming its row and column.
* **Extra columns** are ignored. A missing column is an error naming the file, the missing
  column(s) and the available ones; a file with a header and no rows is an error.

Rows are numbered from 0 over the data rows (the header excluded); messages also give the file
line (``row + 2``).

Splits (:func:`random_split`, :func:`scaffold_split`, or a split column with values
``train`` / ``valid`` (``val``, ``validation``) / ``test``) are index sets over the processed
dataset, so they cost nothing to change and never touch the cache.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rdkit.Chem.Scaffolds import MurckoScaffold
from torch_geometric.data import Data, InMemoryDataset
from tqdm.auto import tqdm

from ..graph.features import GraphormerFeatures
from .featurize import FEATURIZERS, InvalidMoleculeError, parse_smiles
from .safe_cache import SafeInMemoryDataset, save_processed

__all__ = [
    "SPLITS",
    "DEFAULT_FRACTIONS",
    "normalize_split_name",
    "random_split",
    "scaffold_split",
    "murcko_scaffold",
    "SkippedRow",
    "MoleculeRecords",
    "MoleculeDataset",
    "SmilesCSVDataset",
    "file_digest",
]

logger = logging.getLogger(__name__)

SPLITS: tuple[str, str, str] = ("train", "valid", "test")
DEFAULT_FRACTIONS: tuple[float, float, float] = (0.8, 0.1, 0.1)
_SPLIT_ALIASES = {
    "train": "train",
    "valid": "valid",
    "val": "valid",
    "validation": "valid",
    "test": "test",
}
_CACHE_VERSION = 1
_MAX_LOGGED_SKIPS = 20
# the strings pandas reads as missing by default
_NA_STRINGS = frozenset(
    {
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    }
)


# --------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Cached molecule datasets
# --------------------------------------------------------------------------------------


@dataclass
class SkippedRow:
    """A source row that produced no graph: its row index, SMILES and the reason."""

    row: int
    smiles: str
    reason: str


@dataclass
class MoleculeRecords:
    """What a source provides before featurisation.

    Attributes:
        rows: ``[R]`` source row index of each record.
        smiles: ``[R]`` SMILES strings.
        targets: ``[R, T]`` float64 targets, ``NaN`` = missing.
        target_names: ``[T]`` names.
        split_labels: ``[R]`` ``"train"``/``"valid"``/``"test"`` or ``None`` (no split given).
        skipped: rows the source already rejected (e.g. a target that cannot be computed).
    """

    rows: list[int]
    smiles: list[str]
    targets: np.ndarray
    target_names: list[str]
    split_labels: list[str] | None = None
    skipped: list[SkippedRow] = field(default_factory=list)


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class MoleculeDataset(SafeInMemoryDataset):
    r"""Cached PyG dataset of featurised molecules (base class of the SMILES sources).

    Subclasses set their options, then call ``super().__init__`` and implement
    :meth:`cache_key` (every option that changes the processed data) and
    :meth:`read_records`. Each graph carries

    * ``x`` ``[N, F]`` long, ``edge_index`` ``[2, E]`` long, ``edge_attr`` ``[E]`` or
      ``[E, F_e]`` long (from the featuriser),
    * ``y`` ``[1, T]`` float32 (``NaN`` = missing target),
    * the :class:`~graphormer_urpe.graph.features.GraphormerFeatures` attributes.

    Per-graph metadata lives on the dataset: :attr:`smiles`, :attr:`rows` (source row of each
    graph), :attr:`split_labels`, :attr:`target_names`, and :attr:`skipped` (the rows that
    produced no graph, with reasons); :attr:`was_processed` tells whether this instance built
    the cache (``False``: reused). ``<root>/processed/<key>/`` holds ``data.pt`` and
    ``meta.json``, both written atomically.

    Args:
        root: dataset root.
        featurizer: ``"zinc"`` or ``"ogb"``.
        multi_hop_max_dist: passed to ``GraphormerFeatures``.
        strict: raise on the first report of invalid molecules instead of skipping them (also
            when loading a cache built with skipped rows).
        transform: PyG ``transform`` applied on access.
        force_reload: re-process even if a cache exists.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        featurizer: str = "ogb",
        multi_hop_max_dist: int = 20,
        strict: bool = False,
        transform=None,
        force_reload: bool = False,
    ) -> None:
        if featurizer not in FEATURIZERS:
            raise ValueError(
                f"unknown featurizer {featurizer!r}; choose one of {sorted(FEATURIZERS)}"
            )
        self.featurizer = featurizer
        self.multi_hop_max_dist = int(multi_hop_max_dist)
        self.strict = strict
        self.was_processed = False
        super().__init__(
            os.fspath(root),
            transform=transform,
            pre_transform=GraphormerFeatures(self.multi_hop_max_dist),
            log=False,
            force_reload=force_reload,
        )
        self.load(self.processed_paths[0])
        with open(self.processed_paths[1], encoding="utf-8") as f:
            meta = json.load(f)
        self.target_names: list[str] = list(meta["target_names"])
        self.smiles: list[str] = list(meta["smiles"])
        self.rows: np.ndarray = np.asarray(meta["rows"], dtype=np.int64)
        labels = meta.get("split_labels")
        self.split_labels: list[str] | None = None if labels is None else list(labels)
        self.skipped: list[SkippedRow] = [SkippedRow(**s) for s in meta["skipped"]]
        if self.skipped and not self.was_processed:
            if strict:
                raise InvalidMoleculeError(self._skip_summary(self.skipped), self.skipped[0].smiles)
            logger.info(
                "%s: %d row(s) were skipped when this cache was built (listed in %s)",
                self.describe(),
                len(self.skipped),
                self.processed_paths[1],
            )

    # -- what subclasses provide -------------------------------------------------------

    def cache_key(self) -> str:
        """Folder name under ``<root>/processed`` that identifies the processed content."""
        raise NotImplementedError

    def read_records(self) -> MoleculeRecords:
        """Read the source into records (SMILES, targets, split labels)."""
        raise NotImplementedError

    def describe(self) -> str:
        """Short name of the source for messages (e.g. the file path)."""
        return self.__class__.__name__

    def describe_row(self, row: int) -> str:
        """Where ``row`` is in the source, for messages."""
        return f"row {row}"

    # -- PyG plumbing --------------------------------------------------------------------

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, "processed", self.cache_key())

    @property
    def processed_file_names(self) -> list[str]:
        return ["data.pt", "meta.json"]

    def _skip_summary(self, skipped: Sequence[SkippedRow]) -> str:
        shown = "; ".join(
            f"{self.describe_row(s.row)} {s.smiles!r}: {s.reason}" for s in skipped[:5]
        )
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        return f"{self.describe()}: {len(skipped)} invalid molecule(s): {shown}{more}"

    def process(self) -> None:
        records = self.read_records()
        fn = FEATURIZERS[self.featurizer]
        num_targets = len(records.target_names)
        data_list: list[Data] = []
        kept: list[int] = []
        skipped = list(records.skipped)
        for i in tqdm(
            range(len(records.smiles)),
            desc=f"featurising {self.describe()}",
            disable=None,
            leave=False,
        ):
            smiles = records.smiles[i]
            try:
                data = fn(smiles)
            except InvalidMoleculeError as exc:
                skipped.append(SkippedRow(records.rows[i], str(smiles), str(exc)))
                continue
            y = np.asarray(records.targets[i], dtype=np.float32).reshape(1, num_targets)
            data.y = torch.from_numpy(y)  # [1, T]
            data_list.append(data)
            kept.append(i)
        skipped.sort(key=lambda s: s.row)
        total = len(records.smiles) + len(records.skipped)
        for n, s in enumerate(skipped):
            level = logging.WARNING if n < _MAX_LOGGED_SKIPS else logging.DEBUG
            logger.log(
                level,
                "%s: skipping %s %r: %s",
                self.describe(),
                self.describe_row(s.row),
                s.smiles,
                s.reason,
            )
        if skipped:
            logger.warning(
                "%s: skipped %d of %d rows (invalid molecules); %d graphs kept",
                self.describe(),
                len(skipped),
                total,
                len(data_list),
            )
            if self.strict:
                raise InvalidMoleculeError(self._skip_summary(skipped), skipped[0].smiles)
        if not data_list:
            raise ValueError(
                f"{self.describe()}: no valid molecule among {total} rows"
                + (f"; {self._skip_summary(skipped)}" if skipped else "")
            )
        # the structural features of all graphs at once (batched; same result as per graph)
        data_list = self.pre_transform.apply_many(data_list, progress=None)
        os.makedirs(self.processed_dir, exist_ok=True)
        data_path, meta_path = self.processed_paths
        save_processed(data_list, data_path)
        meta = {
            "cache_version": _CACHE_VERSION,
            "source": self.describe(),
            "featurizer": self.featurizer,
            "multi_hop_max_dist": self.multi_hop_max_dist,
            "target_names": list(records.target_names),
            "rows": [int(records.rows[i]) for i in kept],
            "smiles": [str(records.smiles[i]) for i in kept],
            "split_labels": None
            if records.split_labels is None
            else [records.split_labels[i] for i in kept],
            "skipped": [asdict(s) for s in skipped],
        }
        from ..training.checkpoint import write_atomic

        write_atomic(meta_path, json.dumps(meta))
        self.was_processed = True
        logger.info(
            "%s: processed %d graphs into %s", self.describe(), len(data_list), self.processed_dir
        )

    # -- splits --------------------------------------------------------------------------

    def split_indices(
        self,
        method: str = "random",
        fractions: Sequence[float] = DEFAULT_FRACTIONS,
        seed: int = 0,
    ) -> dict[str, np.ndarray]:
        """Train / valid / test index arrays over this dataset.

        Args:
            method: ``"random"`` (seeded), ``"scaffold"`` (Bemis–Murcko) or ``"column"`` (the
                source's split labels).
            fractions: train / valid / test fractions for ``random`` and ``scaffold``.
            seed: seed for ``random``.

        Returns:
            ``{"train", "valid", "test"}`` → sorted index arrays covering every graph once.
        """
        if method == "random":
            return random_split(len(self), fractions, seed)
        if method == "scaffold":
            return scaffold_split(self.smiles, fractions, seed)
        if method == "column":
            if self.split_labels is None:
                raise ValueError(f"{self.describe()}: no split column was given")
            labels = np.asarray(self.split_labels)
            return {name: np.flatnonzero(labels == name).astype(np.int64) for name in SPLITS}
        raise ValueError(
            f"unknown split method {method!r}; choose 'random', 'scaffold' or 'column'"
        )

    def subsets(self, indices: dict[str, np.ndarray]) -> dict[str, InMemoryDataset]:
        """Views of this dataset for each index array (no copy of the graphs)."""
        return {name: self.index_select(torch.as_tensor(idx)) for name, idx in indices.items()}


# --------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------


def _safe_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "data"


class SmilesCSVDataset(MoleculeDataset):
    r"""A CSV or gzipped CSV of SMILES and numeric targets, featurised and cached.

    The cache lives in ``<root>/processed/<file stem>-<hash>/`` where the hash covers the file's
    bytes, the column choices, the featuriser and ``multi_hop_max_dist``; editing the file or
    changing any of these re-processes.

    Args:
        root: dataset root (the cache goes below it).
        path: the ``.csv`` / ``.csv.gz`` file (compression inferred from the name).
        smiles_column: column holding the SMILES.
        target_columns: the target columns; ``None`` takes every other column whose non-missing
            values are all numeric (the split column excluded) and logs the choice.
        split_column: optional column of split labels (``train`` / ``valid`` | ``val`` |
            ``validation`` / ``test``) used by ``split_indices("column")``.
        featurizer: ``"ogb"`` (default) or ``"zinc"``.
        multi_hop_max_dist: passed to ``GraphormerFeatures``.
        strict: raise on invalid SMILES instead of reporting and skipping them.
        transform: PyG ``transform`` applied on access.
        force_reload: re-process even if a cache exists.

    Missing target values become ``NaN`` (the molecule is kept; the trainer and
    :meth:`~graphormer_urpe.datasets.DatasetSplits.evaluate` mask them).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        path: str | os.PathLike[str],
        smiles_column: str = "smiles",
        target_columns: Sequence[str] | None = None,
        split_column: str | None = None,
        featurizer: str = "ogb",
        multi_hop_max_dist: int = 20,
        strict: bool = False,
        transform=None,
        force_reload: bool = False,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SMILES CSV file not found: {self.path}")
        self.smiles_column = smiles_column
        self.target_columns = None if target_columns is None else [str(c) for c in target_columns]
        if self.target_columns is not None and not self.target_columns:
            raise ValueError("target_columns is empty; name at least one target column")
        self.split_column = split_column
        self._digest = file_digest(self.path)
        super().__init__(root, featurizer, multi_hop_max_dist, strict, transform, force_reload)

    def describe(self) -> str:
        return str(self.path)

    def describe_row(self, row: int) -> str:
        return f"row {row} (line {row + 2})"

    def cache_key(self) -> str:
        options = {
            "version": _CACHE_VERSION,
            "content": self._digest,
            "smiles_column": self.smiles_column,
            "target_columns": self.target_columns,
            "split_column": self.split_column,
            "featurizer": self.featurizer,
            "multi_hop_max_dist": self.multi_hop_max_dist,
        }
        key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
        return f"{_safe_stem(self.path)}-{key}"

    def _read_table(self) -> pd.DataFrame:
        opener = gzip.open if self.path.name.lower().endswith(".gz") else open
        try:
            with opener(self.path, "rt", encoding="utf-8-sig", newline="") as f:
                return pd.read_csv(
                    f, dtype=str, keep_default_na=False, na_values=[], skipinitialspace=True
                )
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
            raise ValueError(f"{self.path}: cannot read as CSV: {e}") from None

    def _numeric_column(self, df: pd.DataFrame, column: str) -> tuple[np.ndarray, list[int]]:
        """Values as float64 (missing → NaN) and the rows whose value is not a number."""
        text = df[column].str.strip()
        missing = text.isin(_NA_STRINGS).to_numpy()
        values = pd.to_numeric(text.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values) & ~missing)  # text, inf and -inf
        return values, [int(i) for i in bad]

    def read_records(self) -> MoleculeRecords:
        df = self._read_table()
        columns = [str(c) for c in df.columns]
        wanted = [self.smiles_column] + (self.target_columns or [])
        if self.split_column is not None:
            wanted.append(self.split_column)
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise ValueError(
                f"{self.path}: column(s) {missing} not found; available columns: {columns}"
            )
        if len(df) == 0:
            raise ValueError(f"{self.path}: no data rows (only the header {columns})")
        if self.target_columns is None:
            candidates = [c for c in columns if c not in (self.smiles_column, self.split_column)]
            targets = []
            for c in candidates:
                values, bad = self._numeric_column(df, c)
                if not bad and not np.isnan(values).all():
                    targets.append(c)
            if not targets:
                raise ValueError(
                    f"{self.path}: no numeric target column found besides {self.smiles_column!r}; "
                    f"available columns: {columns} (pass target_columns)"
                )
            logger.info("%s: using target column(s) %s", self.path, targets)
        else:
            targets = list(self.target_columns)
        matrix = np.empty((len(df), len(targets)), dtype=np.float64)
        for j, c in enumerate(targets):
            values, bad = self._numeric_column(df, c)
            if bad:
                row = bad[0]
                raise ValueError(
                    f"{self.path}: {self.describe_row(row)}: target column {c!r} holds "
                    f"{df[c].iloc[row]!r}, which is not a finite number ({len(bad)} such "
                    "value(s) in this column; leave a cell empty for a missing value)"
                )
            matrix[:, j] = values
        n_missing = int(np.isnan(matrix).sum())
        if n_missing:
            logger.info(
                "%s: %d missing target value(s) kept as NaN (masked in training and evaluation)",
                self.path,
                n_missing,
            )
        labels = None
        if self.split_column is not None:
            labels = [
                normalize_split_name(v, f"{self.path}: {self.describe_row(i)}")
                for i, v in enumerate(df[self.split_column].tolist())
            ]
        return MoleculeRecords(
            rows=list(range(len(df))),
            smiles=df[self.smiles_column].tolist(),
            targets=matrix,
            target_names=targets,
            split_labels=labels,
        )
