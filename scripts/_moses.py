"""Real drug-like SMILES for the benchmarks: the MOSES training set (1,584,663 molecules).

The ``molsets==0.3.1`` wheel on the package index ships ``moses/dataset/data/train.csv.gz``.
:func:`moses_smiles_file` downloads the wheel once (``pip download molsets==0.3.1 --no-deps``)
into a cache folder outside the repository (``$GRAPHORMER_URPE_BENCH_CACHE``, default
``~/.cache/graphormer-urpe/bench``), unpacks that one file, and writes the first ``count``
SMILES to ``moses_<count>.smi`` there (one SMILES per line, no header). Never commit the data.

Run ``python scripts/_moses.py 10000`` to print the path of the file with the first 10,000.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "molsets==0.3.1"
MEMBER = "moses/dataset/data/train.csv.gz"
MOSES_TRAIN = 1_584_663


def cache_dir() -> Path:
    """The benchmark data folder (created)."""
    default = Path.home() / ".cache" / "graphormer-urpe" / "bench"
    path = Path(os.environ.get("GRAPHORMER_URPE_BENCH_CACHE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def moses_train_gz() -> Path:
    """``train.csv.gz`` of MOSES, extracted from the ``molsets`` wheel (downloaded once)."""
    folder = cache_dir()
    target = folder / "moses_train.csv.gz"
    if target.exists():
        return target
    wheels = sorted(folder.glob("molsets-0.3.1-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", WHEEL, "--no-deps", "-d", str(folder)]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        wheels = sorted(folder.glob("molsets-0.3.1-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip download {WHEEL} left no wheel in {folder}")
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src, open(tmp, "wb") as dst:
        while block := src.read(1 << 20):
            dst.write(block)
    tmp.replace(target)
    return target


def moses_smiles_file(count: int) -> Path:
    """A file with the first ``count`` MOSES training SMILES, one a line (written once)."""
    if not 0 < count <= MOSES_TRAIN:
        raise ValueError(f"MOSES has {MOSES_TRAIN} training SMILES; asked for {count}")
    path = cache_dir() / f"moses_{count}.smi"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    written = 0
    with gzip.open(moses_train_gz(), "rt") as src, open(tmp, "w") as dst:
        header = next(src).strip().split(",")
        column = header.index("SMILES")
        for line in src:
            dst.write(line.rstrip("\n").split(",")[column] + "\n")
            written += 1
            if written == count:
                break
    tmp.replace(path)
    return path


if __name__ == "__main__":
    print(moses_smiles_file(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
