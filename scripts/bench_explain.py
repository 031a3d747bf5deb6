"""How faithful are the explanations? Crippen logP, whose true per-atom split is known.

Trains a model on Crippen logP (RDKit ``Crippen.MolLogP``) of real ZINC molecules, then
explains molecules it was not trained on (``graphormer_urpe.inference.explain``, the
``--method`` against the ``--baseline``) and compares, per molecule:

* the Spearman correlation between our contributions and Crippen's per-atom terms
  (``faithfulness.crippen_atom_contributions``), beside that of a random permutation of our
  contributions (about 0);
* a deletion curve: the prediction's drop when the k atoms with the largest contributions
  are set to the baseline, against k random atoms (and against Crippen's own top k).

Validation molecules are reported beside the test molecules: any choice of method is made on
them, never on the test molecules (``--splits valid`` explains those alone). Writes JSON
(``--out``), a figure (``--figure``) and one explained test molecule's picture
(``--example``)::

    python scripts/bench_explain.py --out docs/results/explain.json \\
        --figure docs/figures/explain.png --example docs/figures/explain_example.png
    python scripts/bench_explain.py --smoke
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem, RDLogger
from rdkit.Chem import Crippen

from graphormer_urpe import cli
from graphormer_urpe.inference.explain.drawing import draw_contributions
from graphormer_urpe.inference.explain.explainer import METHODS, Explainer, MoleculeExplanation
from graphormer_urpe.inference.explain.faithfulness import (
    crippen_atom_contributions,
    deletion_curve,
)
from graphormer_urpe.inference.explain.integrated_gradients import masked_predictions
from graphormer_urpe.inference.loading import load_model
from graphormer_urpe.inference.rank_correlation import spearman

ZINC = Path(__file__).resolve().parents[2] / "shared" / "data" / "zinc" / "train.csv"
KS = [1, 2, 3, 4, 6, 8]


def split_csv(source: Path, out: Path, sizes: tuple[int, int, int], seed: int) -> dict:
    """Writes ``smiles,logp,split`` for a seeded random draw of the source's molecules."""
    RDLogger.DisableLog("rdApp.*")
    with open(source, newline="") as fh:
        smiles = [row["smiles"] for row in csv.DictReader(fh)]
    order = np.random.default_rng(seed).permutation(len(smiles))
    names = ["train"] * sizes[0] + ["valid"] * sizes[1] + ["test"] * sizes[2]
    rows = {"train": [], "valid": [], "test": []}
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "logp", "split"])
        for i, name in zip(order, names, strict=False):
            s = smiles[i]
            w.writerow([s, f"{Crippen.MolLogP(Chem.MolFromSmiles(s)):.6f}", name])
            rows[name].append(s)
    return rows


def read_splits(table: Path) -> dict:
    """The SMILES of each split of a table written by :func:`split_csv`."""
    rows: dict = {"train": [], "valid": [], "test": []}
    with open(table, newline="") as fh:
        for row in csv.DictReader(fh):
            rows[row["split"]].append(row["smiles"])
    return rows


def train(
    table: Path, work: Path, minutes: float, smoke: bool, threads: int, init: str | None
) -> Path:
    run = work / "run"
    args = ["train", "--dataset", f"csv:{table}", "--data-root", str(work / "data")]
    args += ["--store-dir", str(work / "cache"), "--target-columns", "logp"]
    args += ["--split-column", "split", "--out", str(run), "--threads", str(threads)]
    args += ["--no-progress", *(["--init-from", init] if init else [])]
    if smoke:
        args += ["--num-layers", "2", "--hidden-dim", "16", "--ffn-dim", "16", "--num-heads", "2"]
        args += ["--epochs", "2", "--batch-size", "16"]
    else:
        args += ["--time-limit", str(minutes)]
    if cli.main(args) != 0:
        raise SystemExit("training failed")
    return run


def measure(explainer: Explainer, smiles: list[str], seed: int) -> dict:
    """Per-molecule Spearman (ours, random) and deletion curves of ``smiles``."""
    rng = np.random.default_rng(seed)
    model = explainer.models[0]
    ours, rand, completeness, steps = [], [], [], []
    curves = {"ranked": [], "random": [], "crippen": []}
    started = time.perf_counter()
    for i, s in enumerate(smiles):
        e: MoleculeExplanation = explainer.explain(s, i)
        if e.error is not None:
            continue
        truth = crippen_atom_contributions(s)
        c = e.contributions[:, 0]
        ours.append(spearman(c, truth))
        rand.append(spearman(rng.permutation(c), truth))
        completeness.append(float(e.completeness_error[0]))
        steps.append(e.steps)
        if len(c) > max(KS):
            graph, _ = explainer.graph(s)

            def masked(masks: np.ndarray, graph=graph) -> np.ndarray:
                return masked_predictions(model, graph, masks, explainer.baseline)[:, 0]

            d = deletion_curve(masked, c, KS, rng)
            curves["ranked"].append(d["ranked"])
            curves["random"].append(d["random"])
            curves["crippen"].append(deletion_curve(masked, truth, KS, rng)["ranked"])
    ours_a, rand_a = np.array(ours), np.array(rand)
    return {
        "molecules": len(ours),
        "spearman_mean": float(np.nanmean(ours_a)),
        "spearman_median": float(np.nanmedian(ours_a)),
        "spearman_above_0_5": float(np.nanmean(ours_a > 0.5)),
        "random_spearman_mean": float(np.nanmean(rand_a)),
        "completeness_error_max": float(max(completeness)),
        "completeness_error_median": float(np.median(completeness)),
        "steps_mean": float(np.mean(steps)),
        "seconds_per_molecule": (time.perf_counter() - started) / max(len(ours), 1),
        "deletion": {
            "k": KS,
            "molecules": len(curves["ranked"]),
            **{k: np.mean(v, axis=0).tolist() for k, v in curves.items() if v},
        },
        "per_molecule_spearman": [round(float(v), 4) for v in ours_a],
        "per_molecule_random_spearman": [round(float(v), 4) for v in rand_a],
    }


def figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = report["results"]["test"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    bins = np.linspace(-1, 1, 21)
    a.hist(test["per_molecule_random_spearman"], bins, alpha=0.6, label="random permutation")
    method = report["config"]["method"].replace("-", " ")
    a.hist(test["per_molecule_spearman"], bins, alpha=0.6, label=method)
    a.set_xlabel("Spearman with Crippen's per-atom terms")
    a.set_ylabel("test molecules")
    a.set_title(f"mean {test['spearman_mean']:.2f} (random {test['random_spearman_mean']:.2f})")
    a.legend()
    d = test["deletion"]
    for key, label in (
        ("ranked", "our top-k atoms"),
        ("crippen", "Crippen's top-k atoms"),
        ("random", "random k atoms"),
    ):
        b.plot(d["k"], d[key], marker="o", label=label)
    b.set_xlabel("atoms masked (set to the baseline)")
    b.set_ylabel("mean drop of predicted logP")
    b.set_title(f"deletion curve ({d['molecules']} test molecules)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ZINC), help="ZINC CSV with a smiles column")
    p.add_argument("--sizes", type=int, nargs=3, default=[4000, 400, 400])
    p.add_argument("--explain", type=int, default=200, help="molecules explained per split")
    p.add_argument("--time-limit", type=float, default=10.0, help="training minutes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (training, explaining)")
    p.add_argument(
        "--init-from",
        help="start training from this checkpoint (a run of this script: training in stages)",
    )
    p.add_argument("--baseline", default="mean", choices=["mean", "zero"])
    p.add_argument("--method", default=METHODS[0], choices=METHODS)
    p.add_argument("--permutations", type=int, default=32, help="shapley: orderings per molecule")
    p.add_argument("--splits", nargs="+", default=["valid", "test"], choices=["valid", "test"])
    p.add_argument("--out", help="JSON file")
    p.add_argument("--figure", help="PNG figure")
    p.add_argument("--example", help="PNG of one explained test molecule")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    p.add_argument("--work", help="folder for the data and the run (kept; a run there is reused)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sizes = (64, 16, 16) if args.smoke else tuple(args.sizes)
    count = 5 if args.smoke else args.explain
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        table = work / "logp.csv"
        rows = read_splits(table) if table.exists() else None
        if rows is None or tuple(len(rows[k]) for k in ("train", "valid", "test")) != sizes:
            if (work / "run" / "best.pt").exists():
                raise SystemExit(f"{work} holds a run trained on other --sizes; give its sizes")
            rows = split_csv(Path(args.data), table, sizes, args.seed)
        run = work / "run"
        if not (run / "best.pt").exists():  # --work keeps a trained run for the next call
            run = train(
                work / "logp.csv", work, args.time_limit, args.smoke, args.threads, args.init_from
            )
        metrics = json.loads((run / "metrics.json").read_text())
        explainer = Explainer.from_loaded(
            [load_model(run / "best.pt", "cpu")],
            baseline=args.baseline,
            method=args.method,
            permutations=args.permutations,
        )
        results = {
            split: measure(explainer, rows[split][:count], args.seed + k)
            for k, split in enumerate(("valid", "test"))
            if split in args.splits
        }
        if args.example:
            s = rows["test"][0]
            e = explainer.explain(s)
            true = Crippen.MolLogP(Chem.MolFromSmiles(s))
            title = f"logP predicted {e.prediction[0]:.2f}, Crippen {true:.2f}"
            Path(args.example).write_bytes(draw_contributions(s, e.contributions[:, 0], title))
    report = {
        "benchmark": "explain",
        "date": datetime.date.today().isoformat(),
        "config": {
            "data": "ZINC-250k molecules (JT-VAE validation split), Crippen.MolLogP target",
            "sizes": {"train": sizes[0], "valid": sizes[1], "test": sizes[2]},
            "explained_per_split": count,
            "model": "small preset (4 layers, width 64, URPE), ogb features",
            "training_minutes": None if args.smoke else args.time_limit,
            "threads": args.threads,
            "init_from": args.init_from,
            "baseline": args.baseline,
            "method": args.method,
            "permutations": args.permutations if args.method == "shapley" else None,
            "seed": args.seed,
        },
        "model": {
            k: metrics.get(k)
            for k in ("test_mae", "test_rmse", "best_valid_mae", "epochs_trained", "steps")
        },
        "results": results,
    }
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.figure and "test" in results:
        figure(report, Path(args.figure))
    summary = {
        k: {m: v for m, v in r.items() if not m.startswith("per_")} for k, r in results.items()
    }
    print(json.dumps({"model": report["model"], "results": summary}, indent=1))


if __name__ == "__main__":
    main()
