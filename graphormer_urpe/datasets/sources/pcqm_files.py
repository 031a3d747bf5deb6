"""The OGB-LSC molecule datasets (PCQM4Mv2, PCQM4M v1) as files: their folders, URLs and
official splits (:class:`LSCInfo`, by name in :data:`LSC_DATASETS`), their raw layout, the
download, safe split loading and the SMILES table (the store and the splits: :mod:`.pcqm`).

* **No prompt.** OGB calls ``input()`` when ``RELEASE_v1.txt`` is missing; here a missing
  release file is logged and the files are used as they are (:func:`ensure_lsc_files`).
* **Safe loading.** ``split_dict.pt`` is a pickle of numpy arrays, loaded with
  ``weights_only=True`` and only numpy's array-reconstruction functions and dtypes
  allow-listed (:func:`load_split_dict`), then checked.
"""

from __future__ import annotations

import http.client
import logging
import os
import tempfile
import urllib.error
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from .download import DatasetUnavailableError, download_file

__all__ = [
    "LSCInfo",
    "LSC_DATASETS",
    "LSC_DEFAULT_ROOT",
    "PCQM4MV2",
    "PCQM4M",
    "lsc_dataset",
    "lsc_layout_help",
    "ensure_lsc_files",
    "load_split_dict",
    "read_lsc_csv",
]

logger = logging.getLogger("graphormer_urpe.datasets.sources.pcqm")  # the dataset's log, as before

LSC_DEFAULT_ROOT = "data"


@dataclass(frozen=True)
class LSCInfo:
    """One OGB-LSC molecule dataset: where its files live and what the official splits are."""

    name: str
    """Name in :func:`~graphormer_urpe.datasets.load_dataset` (``pcqm4mv2``, ``pcqm4m``)."""
    title: str
    folder: str
    """Folder under the root (OGB's name)."""
    url: str
    splits: tuple[str, ...]
    test_splits: tuple[str, ...]
    """Unlabelled splits predicted for a submission."""
    official_sizes: tuple[tuple[str, int], ...]
    evaluator: str
    """Class name in ``ogb.lsc``."""
    download_size: str

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.official_sizes)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    @property
    def dev_test(self) -> str:
        """The split used as ``DatasetSplits.test`` (the first test split)."""
        return self.test_splits[0]

    def submission_file(self, split: str) -> str:
        """File name OGB's ``save_test_submission`` writes for ``split``."""
        if self.name == "pcqm4mv2":
            return f"y_pred_pcqm4m-v2_{split}.npz"
        return "y_pred_pcqm4m.npz"


PCQM4MV2 = LSCInfo(
    name="pcqm4mv2",
    title="PCQM4Mv2",
    folder="pcqm4m-v2",
    url="https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip",
    splits=("train", "valid", "test-dev", "test-challenge"),
    test_splits=("test-dev", "test-challenge"),
    official_sizes=(
        ("train", 3_378_606),
        ("valid", 73_545),
        ("test-dev", 147_037),
        ("test-challenge", 147_432),
    ),
    evaluator="PCQM4Mv2Evaluator",
    download_size="about 60 MB",
)
PCQM4M = LSCInfo(
    name="pcqm4m",
    title="PCQM4M",
    folder="pcqm4m_kddcup2021",
    url="https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m_kddcup2021.zip",
    splits=("train", "valid", "test"),
    test_splits=("test",),
    official_sizes=(("train", 3_045_360), ("valid", 380_670), ("test", 377_423)),
    evaluator="PCQM4MEvaluator",
    download_size="about 60 MB",
)
LSC_DATASETS: dict[str, LSCInfo] = {PCQM4MV2.name: PCQM4MV2, PCQM4M.name: PCQM4M}
"""The OGB-LSC molecule datasets by name."""


def lsc_dataset(name: str) -> LSCInfo:
    """The OGB-LSC dataset called ``name``; a :class:`ValueError` names the choices."""
    try:
        return LSC_DATASETS[name]
    except KeyError:
        raise ValueError(
            f"unknown OGB-LSC dataset {name!r}; choose {sorted(LSC_DATASETS)}"
        ) from None


_NETWORK_ERRORS = (OSError, http.client.HTTPException, zipfile.BadZipFile)


def lsc_root(root: str | os.PathLike[str] | None) -> Path:
    return Path(LSC_DEFAULT_ROOT if root is None else root)


def lsc_layout_help(info: LSCInfo, root: str | os.PathLike[str]) -> str:
    """How to install the dataset's files by hand under ``root``."""
    folder = Path(root) / info.folder
    return (
        f"To install {info.title} by hand, download {info.url} ({info.download_size}) and unzip "
        f"it into {root}, so that {folder / 'raw' / 'data.csv.gz'} (columns idx,smiles,"
        f"homolumogap) and {folder / 'split_dict.pt'} (numpy index arrays "
        f"{', '.join(info.splits)}) exist."
    )


def _download(info: LSCInfo, root: Path, timeout: float, progress: bool) -> None:
    """OGB's download: fetch the zip into ``root`` and unpack it there."""
    root.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s from %s", info.title, info.url)
    fd, part = tempfile.mkstemp(prefix=f".{info.folder}.", suffix=".zip.part", dir=root)
    try:
        download_file(info.url, fd, timeout=timeout, desc=info.title, progress=progress)
        with zipfile.ZipFile(part) as zf:
            zf.extractall(root)
    finally:
        if os.path.exists(part):
            os.remove(part)


def ensure_lsc_files(
    info: LSCInfo,
    root: str | os.PathLike[str] | None = None,
    *,
    download: bool = True,
    timeout: float = 30.0,
    progress: bool = True,
) -> Path:
    """The dataset folder, downloading the files first when none is present.

    Args:
        info: the dataset.
        root: the root (default ``data``).
        download: fetch OGB's zip when both files are absent.
        timeout: socket timeout (seconds) of the download.
        progress: show a download progress bar.

    Returns:
        ``<root>/<info.folder>``.

    Raises:
        DatasetUnavailableError: files missing and not downloadable, or only one of the two
            present (the message says where to put them).
    """
    root = lsc_root(root)
    folder = root / info.folder
    needed = [folder / "raw" / "data.csv.gz", folder / "split_dict.pt"]
    missing = [p for p in needed if not p.is_file()]
    if missing and len(missing) < len(needed):
        raise DatasetUnavailableError(
            f"{info.title} folder {folder} is incomplete: missing "
            f"{', '.join(str(p) for p in missing)}. (Not downloading over it.) "
            + lsc_layout_help(info, root)
        )
    if missing:
        if not download:
            raise DatasetUnavailableError(
                f"{info.title} files not found in {folder}. " + lsc_layout_help(info, root)
            )
        try:
            _download(info, root, timeout, progress)
        except _NETWORK_ERRORS as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise DatasetUnavailableError(
                f"{info.title} files not found in {folder} and downloading {info.url} failed "
                f"({type(exc).__name__}: {reason}). " + lsc_layout_help(info, root)
            ) from None
        still = [p for p in needed if not p.is_file()]
        if still:
            raise DatasetUnavailableError(
                f"the {info.title} download did not contain {', '.join(map(str, still))}. "
                + lsc_layout_help(info, root)
            )
    if not (folder / "RELEASE_v1.txt").is_file():
        logger.warning(
            "%s has no RELEASE_v1.txt (OGB would ask whether to re-download an older "
            "release); using its files as they are",
            folder,
        )
    return folder


def _numpy_safe_globals() -> list[Any]:
    """numpy's array-reconstruction functions and dtypes, under both module paths."""
    core = getattr(np, "_core", None)
    multiarray = core.multiarray if core is not None else np.core.multiarray  # type: ignore
    reconstruct = multiarray._reconstruct
    allowed: list[Any] = [
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),  # files pickled by numpy 1.x
        (reconstruct, "numpy._core.multiarray._reconstruct"),  # files pickled by numpy 2.x
        np.ndarray,
        np.dtype,
    ]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        # integer dtypes for the indices; float dtypes only so that a float "index" array
        # is reported as such rather than as an unsafe file
        for name in (
            "Int64DType",
            "Int32DType",
            "Int16DType",
            "Int8DType",
            "UInt64DType",
            "UInt32DType",
            "UInt16DType",
            "UInt8DType",
            "Float64DType",
            "Float32DType",
        ):
            if hasattr(dtypes, name):
                allowed.append(getattr(dtypes, name))
    return allowed


def load_split_dict(path: str | os.PathLike[str], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Load an OGB ``split_dict.pt`` without running arbitrary pickled code.

    ``torch.load(weights_only=True)`` with only numpy's array reconstruction and integer
    dtypes allow-listed; torch tensors are accepted too.

    Args:
        path: the file.
        names: the split names it must hold.

    Returns:
        ``{name: [K] int64 array}``.

    Raises:
        ValueError: unreadable or unsafe file, missing splits, or values that are not 1-D
            integer index arrays (the message names the file and the split).
    """
    path = Path(path)
    try:
        with torch.serialization.safe_globals(_numpy_safe_globals()):
            raw = torch.load(path, weights_only=True)
    except Exception as exc:
        from ...io import torch_load_problem

        raise ValueError(
            f"split file {path} cannot be loaded safely (only numpy/torch index arrays are "
            f"accepted): {torch_load_problem(path, exc)}"
        ) from None
    if not isinstance(raw, dict):
        raise ValueError(f"split file {path} holds a {type(raw).__name__}, not a dict of splits")
    missing = [n for n in names if n not in raw]
    if missing:
        raise ValueError(
            f"split file {path} lacks split(s) {missing}; it has {sorted(map(str, raw))}"
        )
    out = {}
    for name in names:
        value = raw[name]
        arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"split file {path}: split {name!r} must be a 1-D integer index array, got "
                f"dtype {arr.dtype} and shape {arr.shape}"
            )
        out[name] = arr.astype(np.int64)
    return out


def read_lsc_csv(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray]:
    """SMILES and HOMO-LUMO gaps (``NaN`` where empty) of ``data.csv.gz``, by row.

    Raises:
        ValueError: missing columns, an ``idx`` column that is not ``0..R-1`` in order, or a
            non-numeric gap (the message names the file and the row).
    """
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"smiles": str}, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{path}: cannot read as CSV: {e}") from None
    for column in ("idx", "smiles", "homolumogap"):
        if column not in df.columns:
            raise ValueError(
                f"{path}: column {column!r} not found; columns are {list(map(str, df.columns))}"
            )
    idx = pd.to_numeric(df["idx"], errors="coerce").to_numpy()
    bad = np.flatnonzero(idx != np.arange(len(df)))
    if bad.size:
        r = int(bad[0])
        raise ValueError(
            f"{path}: row {r} (line {r + 2}) has idx {df['idx'].iloc[r]!r}; the idx column must "
            "count 0, 1, 2, ... (split indices refer to rows)"
        )
    gap = pd.to_numeric(df["homolumogap"], errors="coerce").to_numpy(dtype=np.float64)
    not_number = np.flatnonzero(np.isnan(gap) & df["homolumogap"].notna().to_numpy())
    if not_number.size:
        r = int(not_number[0])
        raise ValueError(
            f"{path}: row {r} (line {r + 2}) has homolumogap "
            f"{df['homolumogap'].iloc[r]!r}, which is not a number"
        )
    smiles = df["smiles"].fillna("").astype(str).tolist()
    return smiles, gap
