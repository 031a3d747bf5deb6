"""Do the recipe's 90% intervals hold on new scaffolds? Coverage and width on seeded scaffold
splits of nine regression sets, for each way of calibrating them.

Sets: ESOL, FreeSolv and Lipophilicity (``--moleculenet``, default
``../shared/data/moleculenet`` beside the repository) and Biogen's six ADME endpoints
(``--biogen``, default ``../shared/data/admet-biogen``; the paper's train and test files pooled).
Each is split 80/10/10 by :func:`~graphormer_urpe.datasets.balanced_scaffold_split` with seeds
0, 1, 2 (``--rule balanced``), or by the README's ``--split scaffold``
(:func:`~graphormer_urpe.datasets.scaffold_split`, largest scaffold families to train, the
rarest to test; ``--rule scaffold``, the seed is then the training seed only), into
``train.csv`` / ``valid.csv`` / ``test.csv`` under ``--work/<rule>/<set>/seed<k>/``.

Each split is trained once with the README's first recipe (``train --init-from pretrained
--mol-features rdkit2d --ensemble 5``, ``--time-limit`` minutes, one thread); the run keeps
every member's validation and test predictions. The calibrators are then fitted here, on the
validation split only, from those predictions (the library's
:func:`~graphormer_urpe.inference.intervals.calibration.fit_calibration`, one per difficulty
score in :data:`~graphormer_urpe.inference.intervals.calibration.DIFFICULTIES`), for the
ensemble and for its first member alone (a one-model run), and read once on the test split:
coverage and mean width of the 90% intervals, and the Spearman correlation of ``|error|`` with
each score on the validation and test splits. Run::

    python scripts/bench_intervals.py --parallel 2                 # the runs (kept, resumable)
    python scripts/bench_intervals.py --collect --out docs/results/intervals.json
    python scripts/bench_intervals.py --smoke                      # a few molecules
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from bench_admet import ENDPOINTS
from bench_small_data import SETS, _call, in_own_process, kept, one_run, runs_parser, save_split

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
WORK = Path.home() / ".cache" / "graphormer-urpe" / "bench" / "intervals"
LEVEL = 0.9
REGRESSION = {name: SETS[name].targets[0] for name in ("esol", "freesolv", "lipophilicity")}
TARGETS = REGRESSION | ENDPOINTS
RULES = ("balanced", "scaffold")


def table_of(name: str, a: argparse.Namespace) -> pd.DataFrame:
    """The set's ``smiles`` and target column (Biogen: its train and test files pooled)."""
    column = TARGETS[name]
    if name in REGRESSION:
        table = pd.read_csv(Path(a.moleculenet) / SETS[name].file)
    else:
        parts = [pd.read_csv(Path(a.biogen) / f"{name}_{p}.csv") for p in ("train", "test")]
        table = pd.concat(parts, ignore_index=True)
    table = table[["smiles", column]]
    return table.head(a.limit) if a.limit is not None else table


def write_split(name: str, rule: str, seed: int, a: argparse.Namespace) -> Path:
    """``work/rule/name/seed<k>/{train,valid,test}.csv`` and ``split.json``; written once."""
    from graphormer_urpe.datasets import balanced_scaffold_split, scaffold_split

    folder = Path(a.work) / rule / name / f"seed{seed}"
    if not (folder / "split.json").exists():
        split = balanced_scaffold_split if rule == "balanced" else scaffold_split
        save_split(table_of(name, a), split, seed, folder, {"set": name, "rule": rule})
    return folder


def run_recipe(name: str, split: Path, seed: int, a: argparse.Namespace) -> None:
    """The README's first recipe on the split files, into ``split/run``."""
    if (split / "trained").exists():
        return
    files = ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{files}"]
    cmd += ["--target-columns", TARGETS[name], "--init-from", "pretrained"]
    cmd += ["--mol-features", "rdkit2d", "--seed", str(seed), "--threads", "1", "--no-progress"]
    cmd += ["--ensemble", str(a.ensemble)] if a.ensemble > 1 else []
    cmd += ["--epochs", str(a.epochs)] if a.epochs else ["--time-limit", str(a.minutes)]
    cmd += ["--out", str(split / "run"), "--store-dir", str(split / "store")]
    _call(cmd, split / "train.log")
    (split / "trained").touch()


# --------------------------------------------------------------------------------------
# Calibrating from the kept predictions
# --------------------------------------------------------------------------------------


def member_folders(run: Path, members: int) -> list[Path]:
    """The run folders of an ensemble's first ``members`` members (one model: ``run``)."""
    if not (run / "member-0").exists():
        return [run]
    return [run / f"member-{i}" for i in range(members)]


def predictions(run: Path, part: str, members: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """SMILES, targets ``[N, 1]`` and member outputs ``[K, N, 1]`` of one split."""
    tables = [pd.read_csv(m / f"{part}_predictions.csv") for m in member_folders(run, members)]
    true = next(c for c in tables[0].columns if c.startswith("true_"))
    pred = "pred_" + true.removeprefix("true_")
    outputs = np.stack([t[pred].to_numpy(dtype=np.float64) for t in tables])[:, :, None]
    y = tables[0][true].to_numpy(dtype=np.float64)[:, None]
    return tables[0]["smiles"].astype(str).tolist(), y, outputs


def evaluate(run: Path, members: int) -> dict:
    """Per difficulty: test coverage and width of the 90% intervals calibrated on the
    validation split, and on each split the Spearman correlation of ``|error|`` with each
    difficulty."""
    import torch

    from graphormer_urpe.inference.intervals.calibration import DIFFICULTIES, difficulty_spearman
    from graphormer_urpe.inference.loading import load_model

    domain = load_model(member_folders(run, 1)[0] / "best.pt", "cpu").domain
    data = {}
    for part in ("valid", "test"):
        smiles, y, outputs = predictions(run, part, members)
        error, std = np.abs(y - outputs.mean(axis=0)), outputs.std(axis=0)
        sim = domain.smiles_similarity(smiles)
        rho = difficulty_spearman(error, std if members > 1 else None, sim)
        data[part] = (torch.tensor(outputs), torch.tensor(y), sim, rho)
    (zv, yv, sv, rho_v), (zt, yt, st, rho_t) = data["valid"], data["test"]
    found: dict = {"valid_spearman": rho_v, "test_spearman": rho_t}
    folds = scaffold_halves(predictions(run, "valid", 1)[0])
    for difficulty in DIFFICULTIES:
        if difficulty == "std" and members == 1:
            continue

        valid = (zv, yv, sv)
        report = intervals(difficulty, valid, np.arange(len(sv)), (zt, yt, st), np.arange(len(st)))
        cross = [{}]  # one scaffold family: no check
        if all(len(f) for f in folds):
            cross = [intervals(difficulty, valid, a, valid, b) for a, b in (folds, folds[::-1])]
        found[difficulty] = {
            "coverage": report["coverage_90"],
            "width": report["width_90"],
            "far_coverage": report["far_coverage_90"],
            **{
                f"valid_cross_{key}": float(np.mean([c.get(f"{key}_90", np.nan) for c in cross]))
                for key in ("coverage", "far_coverage", "width")
            },
        }
    return found


def intervals(difficulty: str, fit: tuple, fit_rows: np.ndarray, on: tuple, rows: np.ndarray):
    """The coverage and width at :data:`LEVEL` on ``on``'s ``rows`` of a calibrator of
    ``difficulty`` fitted on ``fit``'s ``fit_rows`` (each: outputs ``[K, N, 1]``, targets
    ``[N, 1]``, similarities ``[N]``)."""
    from graphormer_urpe.inference.intervals.calibration import calibration_report, fit_calibration

    (z, y, sim), (z_on, y_on, sim_on) = fit, on
    cal = fit_calibration(
        z[:, fit_rows], y[fit_rows], "regression", ["y"], difficulty=difficulty,
        similarity=sim[fit_rows],
    )  # fmt: skip
    report = calibration_report(cal, z_on[:, rows], y_on[rows], (LEVEL,), similarity=sim_on[rows])
    far = rows[sim_on[rows] <= np.quantile(sim_on[rows], 1 / 3)]  # the third farthest away
    report["far_coverage_90"] = calibration_report(
        cal, z_on[:, far], y_on[far], (LEVEL,), similarity=sim_on[far]
    )["coverage_90"]
    return report


def scaffold_halves(smiles: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The validation molecules in two halves that share no scaffold (families in a seeded
    random order, each to the smaller half): calibrated on one and read on the other, a
    calibrator's coverage on new scaffolds is estimated from validation molecules alone."""
    from graphormer_urpe.datasets.split_indices import murcko_scaffold

    families: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        families.setdefault(murcko_scaffold(s), []).append(i)
    halves: tuple[list[int], list[int]] = ([], [])
    for k in np.random.default_rng(0).permutation(len(families)):
        min(halves, key=len).extend(list(families.values())[k])
    return np.sort(np.asarray(halves[0], dtype=np.int64)), np.sort(
        np.asarray(halves[1], dtype=np.int64)
    )


def result_of(name: str, rule: str, seed: int, a: argparse.Namespace) -> dict:
    """One (rule, set, seed): the recipe's run and its calibrators, kept in ``result.json``."""
    split = write_split(name, rule, seed, a)
    run_recipe(name, split, seed, a)

    def run() -> dict:
        result = {"set": name, "rule": rule, "seed": seed}
        sizes = json.loads((split / "split.json").read_text())["sizes"]
        result |= {"sizes": sizes, "single": evaluate(split / "run", 1)}
        return result | (
            {"ensemble": evaluate(split / "run", a.ensemble)} if a.ensemble > 1 else {}
        )

    return kept(split / "calibrated", run)


# --------------------------------------------------------------------------------------
# Scheduling and the report
# --------------------------------------------------------------------------------------


def run_all(a: argparse.Namespace) -> None:
    runs = [(n, r, s) for r in a.rules for s in a.seeds for n in a.sets]
    with ThreadPoolExecutor(a.parallel) as pool:
        for r in pool.map(lambda r: worker(a, *r), runs):
            print(json.dumps({k: v for k, v in r.items() if k != "sizes"}), file=sys.stderr)


def worker(a: argparse.Namespace, name: str, rule: str, seed: int) -> dict:
    args = [name, rule, str(seed), "--work", a.work, "--minutes", str(a.minutes)]
    args += ["--epochs", str(a.epochs)] if a.epochs else []
    args += ["--moleculenet", a.moleculenet, "--biogen", a.biogen, "--ensemble", str(a.ensemble)]
    args += ["--limit", str(a.limit)] if a.limit is not None else []
    return in_own_process(__file__, args, {"set": name, "rule": rule, "seed": seed})


def collect(work: Path) -> dict:
    """Per rule, model kind (``single`` / ``ensemble``) and difficulty: each set's mean test
    coverage and width over its seeds and its lowest coverage; per rule and kind, each set's
    mean Spearman of ``|error|`` with each difficulty on the validation and test splits."""
    rows = [
        json.loads(p.read_text()) for p in sorted(work.glob("*/*/seed*/calibrated/result.json"))
    ]
    runs: dict = {}
    for row in rows:
        for kind in ("single", "ensemble"):
            if kind in row:
                runs.setdefault(f"{row['rule']}/{kind}", {}).setdefault(row["set"], []).append(
                    row[kind]
                )
    summary: dict = {}
    for key, sets in runs.items():
        for name, found in sets.items():
            for difficulty in [d for d in found[0] if not d.endswith("_spearman")]:
                summary.setdefault(f"{key}/{difficulty}", {})[name] = {
                    "seeds": len(found),
                    "coverage": statistics.mean(f[difficulty]["coverage"] for f in found),
                    "lowest": min(f[difficulty]["coverage"] for f in found),
                    "width": statistics.mean(f[difficulty]["width"] for f in found),
                    **{
                        key: statistics.mean(f[difficulty][key] for f in found)
                        for key in (
                            "far_coverage",
                            "valid_cross_coverage",
                            "valid_cross_far_coverage",
                            "valid_cross_width",
                        )
                    },
                }
            summary.setdefault(f"{key}/spearman", {})[name] = {
                f"{part}_{score}": _mean(
                    f[f"{part}_spearman"].get(f"spearman_error_{score}") for f in found
                )
                for part in ("valid", "test")
                for score in ("std", "distance")
            }
    return {"level": LEVEL, "runs": len(rows), "summary": summary}


def _mean(values) -> float | None:
    kept_values = [v for v in values if v is not None and np.isfinite(v)]
    return statistics.mean(kept_values) if kept_values else None


def markdown(report: dict) -> str:
    lines = []
    for key, sets in report["summary"].items():
        columns = list(next(iter(sets.values())))
        lines += [f"\n{key}\n", "| set | " + " | ".join(columns) + " |"]
        lines.append("| --- " * (len(columns) + 1) + "|")
        for name, r in sets.items():
            lines.append(f"| {name} | " + " | ".join(_fmt(r[c]) for c in columns) + " |")
    return "\n".join(lines)


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "-"
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = runs_parser(__doc__, WORK, [0, 1, 2], ("SET", "RULE", "SEED"))
    p.add_argument("--sets", nargs="+", choices=list(TARGETS), default=list(TARGETS))
    p.add_argument("--rules", nargs="+", choices=RULES, default=["balanced"])
    p.add_argument("--moleculenet", default=str(SHARED / "moleculenet"))
    p.add_argument("--biogen", default=str(SHARED / "admet-biogen"))
    p.add_argument("--minutes", type=float, default=30.0, help="each recipe's --time-limit")
    p.add_argument("--epochs", type=int, default=None, help="each recipe's --epochs instead")
    p.add_argument("--ensemble", type=int, default=5, help="the recipe's members (the README's 5)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if a.smoke:
        a.sets, a.seeds, a.limit, a.epochs, a.ensemble = ["esol"], [0], 120, 2, 2
    if one_run(a, lambda name, rule, seed: result_of(name, rule, int(seed), a)):
        return
    if not a.collect:
        run_all(a)
    report = collect(Path(a.work))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    print(markdown(report))


if __name__ == "__main__":
    main()
