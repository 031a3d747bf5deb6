"""Data preparation: the ZINC stand-in's tables and store, the PCQM4Mv2 SMILES and the
replicated PCQM4Mv2 store (built in background processes while the GPU is busy with other
sections)."""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import shutil
from pathlib import Path

from .runner import ROOT


def data_dir(args: argparse.Namespace) -> Path:
    """``--data``, else ``.device/data`` (carried), else ``../shared/data``."""
    if args.data:
        return Path(args.data).resolve()
    for cand in (ROOT / ".device" / "data", ROOT.parent / "shared" / "data"):
        if (cand / "zinc" / "train.csv").exists():
            return cand
    return ROOT / ".device" / "data"


def _head_csv(src: Path, dst: Path, rows: int | None) -> None:
    """Copy ``src`` to ``dst``, keeping the header and the first ``rows`` rows (all: None)."""
    with open(src, newline="") as fi, open(dst, "w", newline="") as fo:
        for i, line in enumerate(fi):
            if rows is not None and i > rows:
                break
            fo.write(line)


def zinc_tables(work: Path, data: Path, smoke: bool) -> tuple[Path, Path]:
    """The ZINC stand-in's train / valid tables in ``work`` (the first rows in smoke mode)."""
    folder = work / "zinc"
    folder.mkdir(parents=True, exist_ok=True)
    train, valid = folder / "train.csv", folder / "val.csv"
    if not train.exists():
        _head_csv(data / "zinc" / "train.csv", train, 160 if smoke else None)
        _head_csv(data / "zinc" / "val.csv", valid, 40 if smoke else None)
    return train, valid


def zinc_dataset_flag(work: Path, data: Path, smoke: bool) -> str:
    """The ``--dataset`` flag of the ZINC runs: ``csv:TRAIN,VALID,VALID``."""
    train, valid = zinc_tables(work, data, smoke)
    return f"csv:{train},{valid},{valid}"  # selection and report on the valid molecules


def pcqm_smiles(work: Path, data: Path) -> Path:
    """The PCQM4Mv2 sample's SMILES, one per line under a header, as ``work/pcqm_smiles.csv``
    (the benchmarks' ``--smiles-file`` reads the first column; OGB's table starts with idx)."""
    path = work / "pcqm_smiles.csv"
    if not path.exists():
        raw = data / "pcqm4mv2-sample" / "pcqm4m-v2" / "raw" / "data.csv.gz"
        with gzip.open(raw, "rt", newline="") as fh:
            rows = csv.DictReader(fh)
            text = "smiles\n" + "".join(f"{r['smiles']}\n" for r in rows)
        path.write_text(text)
    return path


def prepare_zinc(work: Path, data: Path, smoke: bool) -> None:
    """Featurise the ZINC stand-in once into its store (the runs then read it)."""
    from graphormer_urpe.runtime import make_config
    from graphormer_urpe.training.run import load_splits

    config = make_config(
        "zinc-slim",
        dataset=zinc_dataset_flag(work, data, smoke),
        data_root=str(work / "zinc-root"),
        target_columns=["y"],
        featurizer="zinc",
    )
    splits = load_splits(config)
    print(json.dumps({"train": len(splits.train), "valid": len(splits.valid)}))


def prepare_pcqm(work: Path, data: Path, copies: int, workers: int) -> None:
    """A PCQM4Mv2 store of the sample replicated ``copies`` times, in OGB's layout.

    The sample's raw files are copied to ``work/pcqm-sample`` and preprocessed as usual; the
    replicated dataset ``work/pcqm-rep/pcqm4m-v2`` gets a ``data.csv.gz`` and ``split_dict.pt``
    with every row repeated ``copies`` times (so the dataset opens as any other), and its
    store is written by tiling the sample's processed arrays instead of featurising the same
    molecules ``copies`` times.
    """
    import numpy as np
    import torch

    from graphormer_urpe.datasets import preprocess_lsc
    from graphormer_urpe.datasets.sources.pcqm import lsc_store_folder
    from graphormer_urpe.datasets.sources.pcqm_files import LSC_DATASETS, load_split_dict
    from graphormer_urpe.datasets.store import (
        META_FILE,
        MoleculeStore,
        store_is_complete,
    )
    from graphormer_urpe.datasets.store.location import file_digest

    src_root = work / "pcqm-sample"
    if not src_root.exists():
        shutil.copytree(data / "pcqm4mv2-sample", src_root)
        for p in src_root.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
    report = preprocess_lsc("pcqm4mv2", src_root, workers=1, download=False, progress=False)
    cache = MoleculeStore(report["folder"])
    arrays = cache.open()
    folder = work / "pcqm-rep" / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    src_folder = src_root / "pcqm4m-v2"
    with gzip.open(src_folder / "raw" / "data.csv.gz", "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    r = len(body)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for k in range(copies):
        for i, row in enumerate(body):
            w.writerow([k * r + i, *row[1:]])
    with gzip.open(folder / "raw" / "data.csv.gz", "wt", compresslevel=1) as fh:
        fh.write(buf.getvalue())
    splits = load_split_dict(src_folder / "split_dict.pt", tuple(_split_names()))
    torch.save(
        {
            name: np.concatenate([idx + k * r for k in range(copies)])
            for name, idx in splits.items()
        },
        folder / "split_dict.pt",
    )
    digest = file_digest(folder / "raw" / "data.csv.gz")
    dst = lsc_store_folder(LSC_DATASETS["pcqm4mv2"], folder / "raw" / "data.csv.gz", None)
    if store_is_complete(dst):
        return
    dst.mkdir(parents=True, exist_ok=True)
    m = len(cache)

    def tiled_ptr(ptr: np.ndarray) -> np.ndarray:
        counts = np.diff(ptr)
        out = np.zeros(m * copies + 1, dtype=np.int64)
        np.cumsum(np.tile(counts, copies), out=out[1:])
        return out

    for name in ("x", "edge_attr", "y"):
        np.save(dst / f"{name}.npy", np.concatenate([arrays[name]] * copies, axis=0))
    np.save(dst / "edge_index.npy", np.concatenate([arrays["edge_index"]] * copies, axis=1))
    src_index = np.asarray(arrays["source_index"])
    np.save(dst / "source_index.npy", np.concatenate([src_index + k * r for k in range(copies)]))
    for name in ("node_ptr", "edge_ptr"):
        np.save(dst / f"{name}.npy", tiled_ptr(np.asarray(arrays[name])))
    meta = dict(cache.meta)
    meta.update(
        rows=r * copies,
        graphs=m * copies,
        failures=[
            {**f, "index": f["index"] + k * r} for k in range(copies) for f in meta["failures"]
        ],
        source=f"{meta.get('source', 'PCQM4Mv2')} sample x{copies}",
        source_sha256=digest,
    )
    (dst / META_FILE).write_text(json.dumps(meta))
    print(json.dumps({"molecules": m * copies, "cache": str(dst)}))


def _split_names() -> list[str]:
    from graphormer_urpe.datasets.sources.pcqm_files import LSC_DATASETS

    return list(LSC_DATASETS["pcqm4mv2"].splits)
