"""Pretraining SMILES: the MOSES training set minus every molecule of the evaluation data.

Writes a ``.smi`` file (one SMILES a line, no header) for ``graphormer-urpe pretrain``: the
1,584,663 MOSES training SMILES (``moses/dataset/data/train.csv.gz`` of the ``molsets==0.3.1``
wheel, fetched once by ``_moses.py`` into a cache folder outside the repository) without any
molecule that appears in a file under ``--exclude-dir`` (default ``../shared/data``: the
ZINC, PCQM4Mv2-sample and MoleculeNet sets), so that a model pretrained on it has never seen
a molecule it is later evaluated on. Prints a JSON report: rows read, written, removed,
unreadable, and per exclusion file the molecules it contributed.

Molecules are compared by RDKit canonical SMILES *without* stereochemistry (a stereoisomer of
an evaluation molecule is removed too; ZINC's graphs carry no stereo anyway). For a
multi-fragment or charged exclusion molecule (a salt, a zwitterion) its largest fragment,
neutralised, is excluded as well. What is
read under ``--exclude-dir``:

* ``.csv`` / ``.csv.gz`` / ``.smi`` / ``.txt`` (``.gz`` too): a ``smiles`` / ``SMILES`` /
  ``mol`` column, or the first token of each line of a ``.smi`` / ``.txt`` file (covers the
  MoleculeNet CSVs, ZINC's ``train.csv`` / ``val.csv`` and PCQM4Mv2's ``raw/data.csv.gz``);
* ``.npz`` graphs in PyG's ZINC layout (``x`` atom-type ids, ``edge_index``, ``edge_attr`` bond
  orders, ``node_ptr``, ``edge_ptr``), turned back into molecules;
* anything else (``split_dict.pt``, pickles, READMEs, a CSV without SMILES) is listed under
  ``skipped_files`` and not read (pickles are never loaded).

Never commit the output: it is data. Example::

    python scripts/pretrain_data.py --workers 2
    python scripts/pretrain_data.py --out /scratch/moses_minus_shared.smi \
        --exclude-dir ../shared/data
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from _moses import cache_dir, moses_train_gz
from rdkit import Chem, RDLogger

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXCLUDE = ROOT.parent / "shared" / "data"
SMILES_COLUMNS = ("smiles", "mol", "smi")
TEXT_SUFFIXES = (".csv", ".csv.gz", ".smi", ".smi.gz", ".txt", ".txt.gz")
_CHUNK = 5_000


def canonical_keys(smiles: str, parents: bool = True) -> list[str]:
    """Canonical SMILES without stereo of a molecule, then (``parents``), when it differs, of
    its largest fragment neutralised (a salt's parent, a charged form's neutral one); empty
    when RDKit cannot read it."""
    mol = Chem.MolFromSmiles(smiles.strip()) if smiles and smiles.strip() else None
    if mol is None or mol.GetNumAtoms() == 0:
        return []
    keys = [Chem.MolToSmiles(mol, isomericSmiles=False)]
    if not parents:
        return keys
    frags = Chem.GetMolFrags(mol, asMols=True)
    largest = max(frags, key=lambda m: m.GetNumHeavyAtoms())
    if len(frags) > 1 or any(a.GetFormalCharge() for a in largest.GetAtoms()):
        parent = Chem.MolToSmiles(_uncharger().uncharge(largest), isomericSmiles=False)
        keys += [parent] if parent != keys[0] else []
    return keys


def _uncharger():
    from rdkit.Chem.MolStandardize import rdMolStandardize

    return rdMolStandardize.Uncharger()


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def read_smiles(path: Path) -> list[str] | None:
    """The SMILES of a CSV / ``.smi`` / ``.txt`` file (``None``: a CSV without a SMILES
    column)."""
    name = path.name.lower()
    with _open_text(path) as f:
        if ".csv" in name:
            reader = csv.reader(f)
            header = [h.strip().lower() for h in next(reader, [])]
            column = next((header.index(c) for c in SMILES_COLUMNS if c in header), None)
            if column is None:
                return None
            return [row[column] for row in reader if len(row) > column]
        lines = [ln.split() for ln in f.read().splitlines()]
    out = [parts[0] for parts in lines if parts]
    return out[1:] if out and out[0].lower() in SMILES_COLUMNS else out


_ZINC_TYPES = (
    "C", "O", "N", "F", "C H1", "S", "Cl", "O -", "N H1 +", "Br", "N H3 +", "N H2 +", "N +",
    "N -", "S -", "I", "P", "O H1 +", "N H1 -", "O +", "S +", "P H1", "P H2", "C H2 -", "P +",
    "S H1 +", "C H1 -", "P H1 +",
)  # fmt: skip
_BONDS = {1: Chem.BondType.SINGLE, 2: Chem.BondType.DOUBLE, 3: Chem.BondType.TRIPLE}


def _zinc_graph_smiles(x: np.ndarray, edges: np.ndarray, orders: np.ndarray) -> str:
    """SMILES of one ZINC graph: atom-type ids ``[N]``, directed bonds ``[2, E]`` and their
    Kekulé orders ``[E]``; hydrogens are inferred from valences ("" when RDKit refuses)."""
    mol = Chem.RWMol()
    for t in x.reshape(-1):
        parts = _ZINC_TYPES[int(t)].split()
        atom = Chem.Atom(parts[0])
        atom.SetFormalCharge({"+": 1, "-": -1}.get(parts[-1], 0))
        mol.AddAtom(atom)
    for (i, j), order in zip(edges.T.tolist(), orders.reshape(-1).tolist(), strict=True):
        if i < j:
            mol.AddBond(i, j, _BONDS[int(order)])
    try:
        Chem.SanitizeMol(mol)
    except Exception:
        return ""
    return Chem.MolToSmiles(mol)


def read_zinc_graphs(path: Path) -> list[str] | None:
    """SMILES of the graphs of a ZINC ``.npz`` (``None``: not that layout)."""
    with np.load(path, allow_pickle=False) as z:
        if not {"x", "edge_index", "edge_attr", "node_ptr", "edge_ptr"} <= set(z.files):
            return None
        x, ei, ea, nptr, eptr = (
            z[k] for k in ("x", "edge_index", "edge_attr", "node_ptr", "edge_ptr")
        )
    out = []
    for g in range(len(nptr) - 1):
        n0, n1, e0, e1 = int(nptr[g]), int(nptr[g + 1]), int(eptr[g]), int(eptr[g + 1])
        out.append(_zinc_graph_smiles(x[n0:n1], ei[:, e0:e1], ea[e0:e1]))
    return out


def exclusion_keys(folder: Path) -> tuple[set[str], dict[str, int], list[str]]:
    """Canonical keys of every molecule under ``folder``.

    Returns:
        ``(keys, per_file, skipped)``: the keys, the molecules read per file (relative path),
        and the files not read.
    """
    keys: set[str] = set()
    per_file: dict[str, int] = {}
    skipped: list[str] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(path.relative_to(folder))
        name = path.name.lower()
        smiles = None
        if name.endswith(TEXT_SUFFIXES):
            smiles = read_smiles(path)
        elif name.endswith(".npz"):
            smiles = read_zinc_graphs(path)
        if smiles is None:
            skipped.append(rel)
            continue
        found = [canonical_keys(s) for s in smiles]
        per_file[rel] = sum(bool(k) for k in found)
        keys.update(k for ks in found for k in ks)
    return keys, per_file, skipped


def _first_keys(smiles: list[str]) -> list[str]:
    RDLogger.DisableLog("rdApp.*")
    return [(canonical_keys(s, parents=False) or [""])[0] for s in smiles]


def _chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def filter_smiles(
    source: list[str], excluded: set[str], out: Path, workers: int = 1
) -> dict[str, int]:
    """Write the SMILES of ``source`` whose key is not in ``excluded`` to ``out`` (atomically,
    input order); unreadable ones are left out. Returns the counts."""
    counts = {"source_rows": len(source), "written": 0, "removed": 0, "unreadable": 0}
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    pool = ctx.Pool(workers) if workers > 1 else None
    try:
        chunks = list(_chunks(source, _CHUNK))
        results = pool.imap(_first_keys, chunks) if pool else map(_first_keys, chunks)
        with open(tmp, "w", encoding="utf-8") as f:
            for chunk, keys in zip(chunks, results, strict=True):
                for smi, key in zip(chunk, keys, strict=True):
                    if not key:
                        counts["unreadable"] += 1
                    elif key in excluded:
                        counts["removed"] += 1
                    else:
                        f.write(smi.strip() + "\n")
                        counts["written"] += 1
        os.replace(tmp, out)
    finally:
        if pool:
            pool.close()
        tmp.unlink(missing_ok=True)
    return counts


def _default_source() -> Path:
    return moses_train_gz()


def _default_out() -> Path:
    return cache_dir() / "moses_train_minus_shared.smi"


def _check_outside_repo(out: Path) -> None:
    if ROOT in out.resolve().parents:
        raise SystemExit(f"refusing to write data into the repository: {out}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=None, help="SMILES file (default: MOSES train)")
    p.add_argument("--exclude-dir", type=Path, default=DEFAULT_EXCLUDE, help="evaluation data")
    p.add_argument("--out", type=Path, default=None, help="the .smi to write (outside the repo)")
    p.add_argument("--workers", type=int, default=1, help="processes canonicalising the source")
    args = p.parse_args(argv)
    if not args.exclude_dir.is_dir():
        raise SystemExit(f"--exclude-dir {args.exclude_dir} is not a folder")
    out = args.out or _default_out()
    _check_outside_repo(out)
    t0 = time.perf_counter()
    RDLogger.DisableLog("rdApp.*")
    excluded, per_file, skipped = exclusion_keys(args.exclude_dir)
    source = args.source or _default_source()
    smiles = read_smiles(source)
    if smiles is None:
        raise SystemExit(f"{source} has no SMILES column")
    counts = filter_smiles(smiles, excluded, out, args.workers)
    report = {
        "source": str(source),
        "exclude_dir": str(args.exclude_dir),
        "out": str(out),
        **counts,
        "exclude_keys": len(excluded),
        "exclude_files": per_file,
        "skipped_files": skipped,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
