"""Which difficulty score tracks a model's error, and what it does to conformal intervals.

For trained ensemble folders (``train --ensemble K``; each member keeps its validation and
test predictions), this computes per molecule the ensemble's absolute error, its members'
spread (std) and its distance to the training set (1 - Tanimoto similarity of the nearest
training fingerprint the run recorded, as ``predict``'s ``nearest_similarity``), and reports:

* on the validation and the test split, the Spearman correlation of ``|error|`` with each
  score (a score that tracks the error ranks molecules as their errors do);
* the test coverage and mean width of 90% split-conformal intervals calibrated on the
  validation split, with the nonconformity score normalised by each difficulty
  (``|y - mean| / (d + beta)``, ``beta`` a tenth of the median ``d`` on validation; "none":
  the absolute residual, one half-width for all).

Run::

    python scripts/bench_difficulty.py --runs RUN_A RUN_B --out difficulty.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from graphormer_urpe.inference.calibration import _quantile
from graphormer_urpe.inference.faithfulness import spearman

LEVEL = 0.9
BETA_FRACTION = 0.1


def _members(run: Path) -> list[Path]:
    return sorted(p for p in run.glob("member-*") if (p / "best.pt").exists())


def _split(run: Path, split: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The split's table (smiles, true) and the members' predictions ``[K, N]``, target 0."""
    tables = [pd.read_csv(m / f"{split}_predictions.csv") for m in _members(run)]
    true = next(c for c in tables[0].columns if c.startswith("true_"))
    pred = "pred_" + true[5:]
    members = np.stack([t[pred].to_numpy(dtype=np.float64) for t in tables])
    return tables[0], tables[0][true].to_numpy(dtype=np.float64), members


def _distance(run: Path, smiles: list[str]) -> np.ndarray:
    """``[N]`` 1 - the nearest training similarity (NaN: unreadable or no fingerprints)."""
    from rdkit import Chem

    from graphormer_urpe.datasets.fingerprints import morgan_bits
    from graphormer_urpe.inference.loading import load_model

    record = load_model(_members(run)[0] / "best.pt", "cpu").domain
    out = np.full(len(smiles), np.nan)
    if record is None or record.fingerprints is None:
        return out
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    ok = [i for i, m in enumerate(mols) if m is not None]
    bits = morgan_bits([mols[i] for i in ok], record.radius, record.bits)
    out[ok] = 1.0 - record.nearest_similarity(bits)
    return out


def _intervals(
    valid: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], dv, dt
) -> dict[str, float]:
    """Coverage and mean width on test of 90% intervals normalised by ``dv`` / ``dt``
    (``None``: absolute residuals)."""
    (yv, mv), (yt, mt) = valid, test
    keep_v, keep_t = np.isfinite(yv), np.isfinite(yt)
    if dv is None:
        scale_v, scale_t = np.ones_like(yv), np.ones_like(yt)
    else:
        beta = BETA_FRACTION * float(np.nanmedian(dv)) or 1e-6
        scale_v, scale_t = dv + beta, dt + beta
        keep_v &= np.isfinite(scale_v)
        keep_t &= np.isfinite(scale_t)
    q = _quantile(np.sort(np.abs(yv - mv)[keep_v] / scale_v[keep_v]), LEVEL)
    half = q * scale_t[keep_t]
    inside = np.abs(yt - mt)[keep_t] <= half
    return {"coverage_90": float(inside.mean()), "width_90": float(2 * half.mean())}


def evaluate(run: Path) -> dict:
    """The report of one ensemble folder (see the module's text)."""
    result: dict = {"run": str(run), "members": len(_members(run))}
    parts = {}
    for split in ("valid", "test"):
        table, y, members = _split(run, split)
        mean, std = members.mean(axis=0), members.std(axis=0)
        dist = _distance(run, table["smiles"].astype(str).tolist())
        err = np.abs(y - mean)
        parts[split] = (y, mean, std, dist)
        ok = np.isfinite(err) & np.isfinite(dist)
        result[split] = {
            "molecules": int(np.isfinite(err).sum()),
            "rmse": float(np.sqrt(np.nanmean((y - mean) ** 2))),
            "spearman_error_std": spearman(err[ok], std[ok]),
            "spearman_error_distance": spearman(err[ok], dist[ok]),
            "mean_distance": float(np.nanmean(dist)),
            "mean_std": float(np.mean(std)),
        }
    (yv, mv, sv, dv), (yt, mt, st, dt) = parts["valid"], parts["test"]
    result["intervals"] = {
        "none": _intervals((yv, mv), (yt, mt), None, None),
        "std": _intervals((yv, mv), (yt, mt), sv, st),
        "distance": _intervals((yv, mv), (yt, mt), dv, dt),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="train --ensemble folders")
    p.add_argument("--out", help="JSON file to write (default: print only)")
    args = p.parse_args(argv)
    results = [evaluate(Path(r)) for r in args.runs]
    text = json.dumps(results, indent=2, default=lambda v: None if math.isnan(v) else v)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
