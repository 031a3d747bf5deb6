r"""OGB graph-property molecule sets (``ogbg-molhiv``, ``ogbg-molpcba``, ``ogbg-mol*``).

Through ``ogb.graphproppred``: the dataset is :class:`OGBGMolDataset`, a subclass of OGB's
``PygGraphPropPredDataset`` (its ``master.csv`` metadata, raw layout, ``read_graph_pyg``
reader and label rules), processed once with
``pre_transform=GraphormerFeatures(multi_hop_max_dist)``, and scored with OGB's
``Evaluator`` (ROC-AUC, AP or RMSE as ``master.csv`` says; :class:`OGBGEvaluator`).

Raw layout (what OGB's zip unpacks to), e.g. for ``ogbg-molhiv`` under ``root``::

    <root>/ogbg_molhiv/RELEASE_v1.txt
    <root>/ogbg_molhiv/raw/{edge,edge-feat,node-feat,num-node-list,num-edge-list,graph-label}.csv.gz
    <root>/ogbg_molhiv/split/scaffold/{train,valid,test}.csv.gz
    <root>/ogbg_molhiv/mapping/mol.csv.gz        (optional: SMILES and task names)

OGB 1.3.6's own class does not work as it is with current torch and in a library:

* it loads its processed file with ``torch.load`` and the ``weights_only=True`` default of
  torch >= 2.6 rejects the pickled PyG ``Data`` (``DataEdgeAttr`` is not allow-listed). Here the
  processed data is saved in PyG's own format (a dict of tensors, the slices and the ``Data``
  class, which PyG allow-lists) and loaded with ``torch.load(weights_only=True)``; a
  ``split_dict.pt`` shortcut is loaded with only numpy's index arrays allow-listed. PyG reads
  its ``pre_transform.pt`` / ``pre_filter.pt`` records unsafely (``weights_only=False``); they
  are verified with ``weights_only=True`` first and the dataset is re-processed when one is not
  the expected plain string.
* it calls ``input()`` when ``RELEASE_v<version>.txt`` is missing and when a download is over
  1 GB, ``exit()`` when declined, and ``print`` throughout. Here nothing prompts; a missing
  release file is logged; the download (``master.csv``'s URL) runs under a socket timeout and,
  offline, fails fast with a :class:`~graphormer_urpe.datasets.zinc.DatasetUnavailableError`
  that says where to put the files; OGB's prints go to the debug log.

Processed caches live in ``<folder>/processed/graphormer-<hash>/`` (the hash of the
``pre_transform``), so different ``multi_hop_max_dist`` values never share a cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import logging
import os
import os.path as osp
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from ogb.graphproppred import PygGraphPropPredDataset
from torch import Tensor
from torch_geometric.data import Data, InMemoryDataset
from tqdm.auto import tqdm

from ..graph.features import GraphormerFeatures
from .safe_cache import load_processed, pyg_repr, record_matches, save_processed
from .zinc import DatasetUnavailableError

__all__ = [
    "OGBG_DEFAULT_ROOT",
    "OGBG_RAW_FILES",
    "ogbg_molecule_names",
    "ogbg_layout_help",
    "OGBGMolDataset",
    "OGBGEvaluator",
    "load_ogbg",
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


class OGBGMolDataset(PygGraphPropPredDataset):
    r"""OGB's ``PygGraphPropPredDataset`` for molecule sets, safe with current torch.

    Same metadata, raw files, reader and label rules as OGB's class; differs in what the
    module docstring lists (no prompts or prints, safe loading, a timed download that fails
    with instructions, a processed cache per ``pre_transform``).

    Args:
        name: an ``ogbg-mol*`` name (see :func:`ogbg_molecule_names`).
        root: folder holding ``<name with _>/`` (default ``data``).
        transform: PyG ``transform`` applied on access.
        pre_transform: PyG ``pre_transform`` applied once when processing (e.g.
            ``GraphormerFeatures(5)``).
        force_reload: re-process even if a matching cache exists.
        download: fetch OGB's zip when the raw files are absent.
        download_timeout: socket timeout of the download (seconds).
    """

    def __init__(
        self,
        name: str,
        root: str | os.PathLike[str] = OGBG_DEFAULT_ROOT,
        transform=None,
        pre_transform=None,
        *,
        force_reload: bool = False,
        download: bool = True,
        download_timeout: float = 30.0,
    ) -> None:
        root = os.fspath(root)
        self.name = name
        self.meta_info = _meta(name)
        self.dir_name = _dir_name(name, root)
        self.original_root = root
        self.root = osp.join(root, self.dir_name)
        self.download_name = self.meta_info["download_name"]
        self.num_tasks = int(self.meta_info["num tasks"])
        self.eval_metric = self.meta_info["eval metric"]
        self.task_type = self.meta_info["task type"]
        self.__num_classes__ = int(self.meta_info["num classes"])
        self.binary = self.meta_info["binary"] == "True"
        self._allow_download = download
        self._download_timeout = download_timeout
        self._cache_key = hashlib.sha256(pyg_repr(pre_transform).encode()).hexdigest()[:12]

        raw = Path(self.root) / "raw"
        present = [f for f in OGBG_RAW_FILES if (raw / f).is_file()]
        if present and len(present) < len(OGBG_RAW_FILES):
            missing = [f for f in OGBG_RAW_FILES if f not in present]
            raise DatasetUnavailableError(
                f"{name} raw folder {raw} is incomplete: missing {', '.join(missing)}. "
                "(Not downloading over it.) " + ogbg_layout_help(name, root)
            )
        release = Path(self.root) / f"RELEASE_v{self.meta_info['version']}.txt"
        if Path(self.root).is_dir() and present and not release.is_file():
            logger.warning(
                "%s has no %s (OGB would ask whether to re-download a newer release); using "
                "its files as they are",
                self.root,
                release.name,
            )
        # PyG reads these two records with weights_only=False: check them safely first
        for record, expected in (("pre_transform.pt", pre_transform), ("pre_filter.pt", None)):
            marker = osp.join(self.processed_dir, record)
            if osp.exists(marker) and not record_matches(marker, pyg_repr(expected)):
                logger.warning("%s: re-processing (unexpected record %s)", name, marker)
                force_reload = True
        InMemoryDataset.__init__(
            self, self.root, transform, pre_transform, log=False, force_reload=force_reload
        )
        self._load_processed(self.processed_paths[0])

    # -- PyG plumbing -----------------------------------------------------------------------

    @property
    def raw_file_names(self) -> list[str]:
        return list(OGBG_RAW_FILES)

    @property
    def processed_dir(self) -> str:
        return osp.join(self.root, "processed", f"graphormer-{self._cache_key}")

    @property
    def processed_file_names(self) -> str:
        return "data.pt"

    def _load_processed(self, path: str) -> None:
        self._data, self.slices = load_processed(path, self.name)

    def download(self) -> None:
        """OGB's download (``master.csv``'s URL → unzip → rename), timed and prompt-free."""
        url = self.meta_info["url"]
        if not self._allow_download:
            raise DatasetUnavailableError(
                f"{self.name} raw files not found in {self.raw_dir}. "
                + ogbg_layout_help(self.name, self.original_root)
            )
        os.makedirs(self.original_root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{self.dir_name}.", dir=self.original_root)
        try:
            part = osp.join(tmp, "download.zip")
            logger.info("downloading %s from %s", self.name, url)
            with (
                open(part, "wb") as fh,
                urllib.request.urlopen(url, timeout=self._download_timeout) as resp,
            ):
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=self.name) as bar:
                    for block in iter(lambda: resp.read(1 << 20), b""):
                        fh.write(block)
                        bar.update(len(block))
            with zipfile.ZipFile(part) as zf:
                zf.extractall(tmp)
            src = osp.join(tmp, self.download_name)
            for entry in os.listdir(src):
                dst = osp.join(self.root, entry)
                if osp.isdir(dst) and not os.listdir(dst):
                    os.rmdir(dst)  # the empty raw/ folder PyG created before downloading
                shutil.move(osp.join(src, entry), dst)
        except (OSError, http.client.HTTPException, zipfile.BadZipFile) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise DatasetUnavailableError(
                f"{self.name} raw files not found in {self.raw_dir} and downloading {url} "
                f"failed ({type(exc).__name__}: {reason}). "
                + ogbg_layout_help(self.name, self.original_root)
            ) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def process(self) -> None:
        """OGB's processing (``read_graph_pyg`` and its label rules), saved atomically."""
        from ogb.io.read_graph_pyg import read_graph_pyg

        meta = self.meta_info
        node_files = (
            []
            if meta["additional node files"] == "None"
            else meta["additional node files"].split(",")
        )
        edge_files = (
            []
            if meta["additional edge files"] == "None"
            else meta["additional edge files"].split(",")
        )
        with _ogb_prints_to_log():
            data_list = read_graph_pyg(
                self.raw_dir,
                add_inverse_edge=meta["add_inverse_edge"] == "True",
                additional_node_files=node_files,
                additional_edge_files=edge_files,
                binary=self.binary,
            )
        label_path = osp.join(self.raw_dir, "graph-label.csv.gz")
        labels = pd.read_csv(label_path, compression="gzip", header=None).values
        if labels.shape[0] != len(data_list):
            raise ValueError(
                f"{label_path} has {labels.shape[0]} rows but the raw files hold "
                f"{len(data_list)} graphs"
            )
        if labels.shape[1] != self.num_tasks:
            raise ValueError(
                f"{label_path} has {labels.shape[1]} columns; {self.name} has "
                f"{self.num_tasks} task(s)"
            )
        has_nan = bool(np.isnan(labels.astype(np.float64)).any())
        classification = "classification" in self.task_type
        out: list[Data] = []
        for i, g in enumerate(tqdm(data_list, desc=f"processing {self.name}", leave=False)):
            y = torch.from_numpy(np.asarray(labels[i], dtype=np.float64)).view(1, -1)
            g.y = y.long() if classification and not has_nan else y.float()
            out.append(g)
        if isinstance(self.pre_transform, GraphormerFeatures):  # all graphs at once (batched)
            out = self.pre_transform.apply_many(out, progress=None)
        elif self.pre_transform is not None:
            out = [self.pre_transform(g) for g in out]
        save_processed(out, self.processed_paths[0])
        logger.info("%s: processed %d graphs into %s", self.name, len(out), self.processed_dir)

    def get_idx_split(self, split_type: str | None = None) -> dict[str, Tensor]:
        """OGB's split (``split/<type>/{train,valid,test}.csv.gz``), loaded safely."""
        from .pcqm import load_split_dict

        split_type = self.meta_info["split"] if split_type is None else split_type
        path = Path(self.root) / "split" / split_type
        if (path / "split_dict.pt").is_file():
            parts = load_split_dict(path / "split_dict.pt", ("train", "valid", "test"))
            return {k: torch.from_numpy(v) for k, v in parts.items()}
        out = {}
        for part in ("train", "valid", "test"):
            f = path / f"{part}.csv.gz"
            if not f.is_file():
                raise DatasetUnavailableError(
                    f"{self.name} split file {f} not found. "
                    + ogbg_layout_help(self.name, self.original_root)
                )
            idx = pd.read_csv(f, compression="gzip", header=None).values.T[0]
            out[part] = torch.tensor(idx, dtype=torch.long)
        return out

    def task_names(self) -> list[str]:
        """Task names from ``mapping/mol.csv.gz`` when present, else ``task0``, ``task1``..."""
        mapping = Path(self.root) / "mapping" / "mol.csv.gz"
        if mapping.is_file():
            try:
                columns = list(pd.read_csv(mapping, nrows=0).columns)
            except (OSError, ValueError, pd.errors.ParserError):
                columns = []
            names = [c for c in columns if c not in ("smiles", "mol_id")]
            if len(names) == self.num_tasks:
                return names
        return [f"task{t}" for t in range(self.num_tasks)]


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


def load_ogbg(
    name: str,
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 5,
    *,
    download: bool = True,
    download_timeout: float = 30.0,
    force_reload: bool = False,
):
    """An ``ogbg-mol*`` dataset as :class:`~graphormer_urpe.datasets.DatasetSplits`.

    Official scaffold splits; ``task_type`` ``"binary"`` (BCE with missing labels masked) or
    ``"regression"``; the metric and its direction from ``master.csv``; OGB's evaluator.
    """
    from . import DatasetSplits

    meta = _meta(name)
    dataset = OGBGMolDataset(
        name,
        OGBG_DEFAULT_ROOT if root is None else root,
        pre_transform=GraphormerFeatures(multi_hop_max_dist),
        force_reload=force_reload,
        download=download,
        download_timeout=download_timeout,
    )
    split = dataset.get_idx_split()
    for part, idx in split.items():
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(dataset)):
            raise ValueError(
                f"{name} {part} split refers to graph {int(idx.max())}, but the dataset has "
                f"{len(dataset)} graphs"
            )
    metric = str(meta["eval metric"])
    binary = "classification" in str(meta["task type"])
    logger.info(
        "%s: %d / %d / %d graphs (train / valid / test), %d task(s), %s",
        name,
        split["train"].numel(),
        split["valid"].numel(),
        split["test"].numel(),
        dataset.num_tasks,
        metric,
    )
    return DatasetSplits(
        name=name,
        train=dataset[split["train"]],
        valid=dataset[split["valid"]],
        test=dataset[split["test"]],
        featurizer="ogb",
        target_names=dataset.task_names(),
        metric=metric,
        task_type="binary" if binary else "regression",
        higher_is_better=_HIGHER_IS_BETTER.get(metric, False),
        evaluator=OGBGEvaluator(name),
    )
