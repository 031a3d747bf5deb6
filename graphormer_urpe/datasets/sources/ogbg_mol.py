r"""OGB graph-property molecule sets (``ogbg-molhiv``, ``ogbg-molpcba``, ``ogbg-mol*``).

OGB's own pieces: its ``master.csv`` metadata, raw layout and download address, its raw reader
(``ogb.io.read_graph_raw.read_csv_graph_raw``), its split files and its ``Evaluator`` (ROC-AUC,
AP or RMSE as ``master.csv`` says; :class:`OGBGEvaluator`). The graphs go into one store
(:func:`open_ogbg`), with the official split of each graph stored as its split code.

Raw layout (what OGB's zip unpacks to), e.g. for ``ogbg-molhiv`` under ``root``::

    <root>/ogbg_molhiv/RELEASE_v1.txt
    <root>/ogbg_molhiv/raw/{edge,edge-feat,node-feat,num-node-list,num-edge-list,graph-label}.csv.gz
    <root>/ogbg_molhiv/split/scaffold/{train,valid,test}.csv.gz
    <root>/ogbg_molhiv/mapping/mol.csv.gz        (optional: SMILES and task names)

OGB 1.3.6's ``PygGraphPropPredDataset`` calls ``input()`` when ``RELEASE_v<version>.txt`` is
missing and when a download is over 1 GB, ``exit()`` when declined, and ``print`` throughout.
Here nothing prompts; a missing release file is logged; the download (``master.csv``'s URL)
runs under a socket timeout and, offline, fails fast with a
:class:`~.download.DatasetUnavailableError` that says where to put the
files; OGB's prints go to the debug log. A ``split_dict.pt`` shortcut is loaded with
``weights_only=True`` and only numpy's index arrays allow-listed.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import logging
import os
import os.path as osp
import shutil
import tempfile
import urllib.error
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..split_indices import SPLITS
from ..store import MoleculeStore
from ..store.location import file_digest, store_folder
from ..store.records import MoleculeRecords, open_store
from .download import DatasetUnavailableError, download_file

__all__ = [
    "OGBG_DEFAULT_ROOT",
    "OGBG_RAW_FILES",
    "OGBGInfo",
    "ogbg_molecule_names",
    "ogbg_layout_help",
    "ensure_ogbg_files",
    "read_ogbg_split",
    "read_ogbg",
    "ogbg_info",
    "open_ogbg",
    "OGBGEvaluator",
]

logger = logging.getLogger(__name__)

OGBG_DEFAULT_ROOT = "data"
OGBG_RAW_FILES: tuple[str, ...] = (
    "edge.csv.gz",
    "edge-feat.csv.gz",
    "node-feat.csv.gz",
    "num-node-list.csv.gz",
    "num-edge-list.csv.gz",
    "graph-label.csv.gz",
)
_HIGHER_IS_BETTER = {"rocauc": True, "ap": True, "acc": True, "rmse": False}


@lru_cache(maxsize=1)
def _master() -> pd.DataFrame:
    import ogb.graphproppred

    path = osp.join(osp.dirname(ogb.graphproppred.__file__), "master.csv")
    return pd.read_csv(path, index_col=0, keep_default_na=False)


def ogbg_molecule_names() -> list[str]:
    """The ``ogbg-mol*`` datasets OGB's ``master.csv`` knows (molecules, CSV raw format)."""
    m = _master()
    return [c for c in m.columns if m[c]["data type"] == "mol" and m[c]["binary"] == "False"]


def _meta(name: str) -> pd.Series:
    names = ogbg_molecule_names()
    if name not in names:
        raise ValueError(f"unknown OGB molecule dataset {name!r}; choose one of {names}")
    return _master()[name]


def _dir_name(name: str, root: str) -> str:
    dir_name = "_".join(name.split("-"))
    if osp.exists(osp.join(root, dir_name + "_pyg")):  # OGB's rule for older downloads
        dir_name += "_pyg"
    return dir_name


def ogbg_layout_help(name: str, root: str | os.PathLike[str]) -> str:
    """How to install an ``ogbg-mol*`` dataset's files by hand under ``root``."""
    meta = _meta(name)
    folder = Path(root) / _dir_name(name, os.fspath(root))
    return (
        f"To install {name} by hand, download {meta['url']}, unzip it and rename its "
        f"'{meta['download_name']}' folder to {folder}, so that {folder / 'raw'} holds "
        f"{', '.join(OGBG_RAW_FILES)} and {folder / 'split' / meta['split']} holds "
        "train.csv.gz, valid.csv.gz and test.csv.gz."
    )


class _LogWriter(io.TextIOBase):
    """A text stream that sends complete lines to ``logger.debug`` (for OGB's prints)."""

    def __init__(self) -> None:
        self.buffer_text = ""

    def write(self, text: str) -> int:
        self.buffer_text += text
        *lines, self.buffer_text = self.buffer_text.split("\n")
        for line in lines:
            if line.strip():
                logger.debug("ogb: %s", line.strip())
        return len(text)


@contextlib.contextmanager
def _ogb_prints_to_log() -> Iterator[None]:
    with contextlib.redirect_stdout(_LogWriter()):
        yield


@dataclass
class OGBGInfo:
    """What OGB's ``master.csv`` says of an ``ogbg-mol*`` set, and where its files are.

    Attributes:
        name: e.g. ``ogbg-molhiv``.
        folder: ``<root>/<name with _>/`` (``raw/``, ``split/``, ``mapping/``).
        num_tasks: ``T``.
        metric: OGB's evaluation metric (``rocauc``, ``ap``, ``rmse``).
        binary: classification (one logit per task, BCE with missing labels masked).
        task_names: ``[T]`` from ``mapping/mol.csv.gz`` when present, else ``task0``...
    """

    name: str
    folder: Path
    num_tasks: int
    metric: str
    binary: bool
    task_names: list[str]

    @property
    def higher_is_better(self) -> bool:
        return _HIGHER_IS_BETTER.get(self.metric, False)


def _download(name: str, root: Path, folder: Path, timeout: float) -> None:
    """OGB's download (``master.csv``'s URL → unzip → rename), timed and prompt-free."""
    meta = _meta(name)
    url = meta["url"]
    root.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{folder.name}.", dir=root)
    try:
        part = osp.join(tmp, "download.zip")
        logger.info("downloading %s from %s", name, url)
        download_file(url, part, timeout=timeout, desc=name)
        with zipfile.ZipFile(part) as zf:
            zf.extractall(tmp)
        src = osp.join(tmp, meta["download_name"])
        folder.mkdir(parents=True, exist_ok=True)
        for entry in os.listdir(src):
            dst = folder / entry
            if dst.is_dir() and not os.listdir(dst):
                os.rmdir(dst)
            shutil.move(osp.join(src, entry), dst)
    except (OSError, http.client.HTTPException, zipfile.BadZipFile) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise DatasetUnavailableError(
            f"{name} raw files not found in {folder / 'raw'} and downloading {url} "
            f"failed ({type(exc).__name__}: {reason}). " + ogbg_layout_help(name, root)
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_ogbg_files(
    name: str,
    root: str | os.PathLike[str] = OGBG_DEFAULT_ROOT,
    *,
    download: bool = True,
    download_timeout: float = 30.0,
) -> Path:
    """The dataset's folder with every raw file, downloaded when all are absent.

    Raises:
        DatasetUnavailableError: some raw files missing, or all missing and not downloadable.
    """
    meta = _meta(name)
    root = Path(root)
    folder = root / _dir_name(name, os.fspath(root))
    raw = folder / "raw"
    present = [f for f in OGBG_RAW_FILES if (raw / f).is_file()]
    if present and len(present) < len(OGBG_RAW_FILES):
        missing = [f for f in OGBG_RAW_FILES if f not in present]
        raise DatasetUnavailableError(
            f"{name} raw folder {raw} is incomplete: missing {', '.join(missing)}. "
            "(Not downloading over it.) " + ogbg_layout_help(name, root)
        )
    if not present:
        if not download:
            raise DatasetUnavailableError(
                f"{name} raw files not found in {raw}. " + ogbg_layout_help(name, root)
            )
        _download(name, root, folder, download_timeout)
    release = folder / f"RELEASE_v{meta['version']}.txt"
    if not release.is_file():
        logger.warning(
            "%s has no %s (OGB would ask whether to re-download a newer release); using its "
            "files as they are",
            folder,
            release.name,
        )
    return folder


def read_ogbg_split(name: str, folder: Path) -> dict[str, np.ndarray]:
    """OGB's split (``split/<type>/{train,valid,test}.csv.gz``, or a ``split_dict.pt``)."""
    from .pcqm_files import load_split_dict

    path = folder / "split" / _meta(name)["split"]
    if (path / "split_dict.pt").is_file():
        return load_split_dict(path / "split_dict.pt", SPLITS)
    out = {}
    for part in SPLITS:
        f = path / f"{part}.csv.gz"
        if not f.is_file():
            raise DatasetUnavailableError(
                f"{name} split file {f} not found. " + ogbg_layout_help(name, folder.parent)
            )
        out[part] = pd.read_csv(f, compression="gzip", header=None).values.T[0].astype(np.int64)
    return out


def _task_names(folder: Path, num_tasks: int) -> list[str]:
    mapping = folder / "mapping" / "mol.csv.gz"
    if mapping.is_file():
        try:
            columns = list(pd.read_csv(mapping, nrows=0).columns)
        except (OSError, ValueError, pd.errors.ParserError):
            columns = []
        names = [c for c in columns if c not in ("smiles", "mol_id")]
        if len(names) == num_tasks:
            return names
    return [f"task{t}" for t in range(num_tasks)]


def ogbg_info(name: str, folder: Path) -> OGBGInfo:
    """The :class:`OGBGInfo` of a dataset whose files are in ``folder``."""
    meta = _meta(name)
    num_tasks = int(meta["num tasks"])
    return OGBGInfo(
        name=name,
        folder=folder,
        num_tasks=num_tasks,
        metric=str(meta["eval metric"]),
        binary="classification" in str(meta["task type"]),
        task_names=_task_names(folder, num_tasks),
    )


def _split_codes(name: str, folder: Path, num_graphs: int) -> np.ndarray:
    codes = np.full(num_graphs, -1, dtype=np.int8)
    for code, (part, idx) in enumerate(read_ogbg_split(name, folder).items()):
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_graphs):
            raise ValueError(
                f"{name} {part} split refers to graph {int(idx.max())}, but the dataset has "
                f"{num_graphs} graphs"
            )
        codes[idx] = code
    return codes


def read_ogbg(name: str, folder: Path) -> MoleculeRecords:
    """OGB's raw graphs (``read_csv_graph_raw``, OGB's reader), labels and split codes."""
    from ogb.io.read_graph_raw import read_csv_graph_raw

    info = ogbg_info(name, folder)
    raw = folder / "raw"
    with _ogb_prints_to_log():
        graphs = read_csv_graph_raw(
            str(raw), add_inverse_edge=_meta(name)["add_inverse_edge"] == "True"
        )
    label_path = raw / "graph-label.csv.gz"
    labels = pd.read_csv(label_path, compression="gzip", header=None).values.astype(np.float64)
    if labels.shape[0] != len(graphs):
        raise ValueError(
            f"{label_path} has {labels.shape[0]} rows but the raw files hold {len(graphs)} graphs"
        )
    if labels.shape[1] != info.num_tasks:
        raise ValueError(
            f"{label_path} has {labels.shape[1]} columns; {name} has {info.num_tasks} task(s)"
        )
    return MoleculeRecords(
        rows=np.arange(len(graphs), dtype=np.int64),
        targets=labels,
        target_names=info.task_names,
        graphs=graphs,
        split=_split_codes(name, folder, len(graphs)),
    )


def open_ogbg(
    name: str,
    root: str | os.PathLike[str] | None = None,
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    download: bool = True,
    download_timeout: float = 30.0,
    progress: bool | None = None,
) -> tuple[MoleculeStore, OGBGInfo]:
    """The store of an ``ogbg-mol*`` set (built on first use) and its :class:`OGBGInfo`."""
    folder = ensure_ogbg_files(
        name,
        OGBG_DEFAULT_ROOT if root is None else root,
        download=download,
        download_timeout=download_timeout,
    )
    files = [folder / "raw" / f for f in OGBG_RAW_FILES]
    files += sorted((folder / "split").rglob("*.*"))
    identity = {str(f.relative_to(folder)): file_digest(f) for f in files if f.is_file()}
    store = open_store(
        store_folder("ogbg", name, identity, store_dir),
        lambda: read_ogbg(name, folder),
        featurizer="ogb",
        description=name,
        workers=workers,
        progress=progress,
    )
    return store, ogbg_info(name, folder)


class OGBGEvaluator:
    """OGB's ``Evaluator(name)`` on predictions and targets ``[N, T]`` (``NaN`` ignored).

    For classification sets the predictions are logits (scores suffice for ROC-AUC and AP).
    Returns ``{metric: value}``; ``NaN`` (logged) when OGB cannot score the set, e.g. no task
    with both classes among the labelled molecules.
    """

    def __init__(self, name: str) -> None:
        from ogb.graphproppred import Evaluator

        self.name = name
        self.evaluator = Evaluator(name)
        self.metric = self.evaluator.eval_metric

    def __call__(self, y_pred: Tensor, y_true: Tensor) -> dict[str, float]:
        pred = torch.as_tensor(y_pred).detach().cpu().double()
        true = torch.as_tensor(y_true).detach().cpu().double()
        if pred.dim() == 1:
            pred = pred.unsqueeze(1)
        if true.dim() == 1:
            true = true.unsqueeze(1)
        try:
            result = self.evaluator.eval({"y_true": true.numpy(), "y_pred": pred.numpy()})
        except RuntimeError as exc:
            logger.warning("%s: OGB's evaluator cannot score this set: %s", self.name, exc)
            return {self.metric: float("nan")}
        return {self.metric: float(result[self.metric])}
