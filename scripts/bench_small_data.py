"""Small-data benchmark: six MoleculeNet sets, seeded scaffold splits, every model on the same
split files.

Sets (``--data-dir``, default ``../shared/data/moleculenet`` beside the repository): ESOL,
FreeSolv, Lipophilicity (regression, test RMSE), BACE, BBBP, Tox21 (binary, test ROC-AUC; Tox21
the mean over its 12 tasks, missing labels skipped). Each set is split 80/10/10 by
:func:`~graphormer_urpe.datasets.balanced_scaffold_split` with seeds 0, 1, 2 into
``train.csv`` / ``valid.csv`` / ``test.csv`` under ``--work`` (default
``~/.cache/graphormer-urpe/bench/small_data``); SMILES RDKit cannot parse are left out and
counted. Every model reads those files:

* ``rf``: a random forest (500 trees) on 2048-bit Morgan fingerprints (radius 2), one per
  task, the floor;
* ``chemprop``: Chemprop 2.x with its defaults (``chemprop train -i train valid test``), run
  from ``--chemprop`` (an executable, e.g. in a virtual environment made for the benchmark:
  ``python -m venv --system-site-packages ENV && ENV/bin/pip install 'chemprop>=2,<3'``);
  ``chemprop-rdkit2d``: the same with ``--molecule-featurizers v1_rdkit_2d_normalized`` (the
  normalised RDKit 2D descriptors of Chemprop 1, from descriptastorus);
* ``urpe-scratch`` / ``urpe-pretrained`` / ``graphormer-pretrained``: ``graphormer-urpe train``
  from scratch, from ``--init-from`` (default ``pretrained``, the shipped checkpoint) and from
  ``--graphormer-init`` (a plain-Graphormer checkpoint pretrained with the same recipe; ESOL
  and Lipophilicity only), each with the time budget that Chemprop took on the same split
  (``--minutes`` when Chemprop did not run), best epoch chosen on the valid split;
  ``urpe-pretrained-rdkit2d``: ``urpe-pretrained`` with ``--mol-features rdkit2d`` (the
  molecules' normalised RDKit descriptors joined before the head).

Every run gets one CPU thread (``--parallel`` runs at once) and writes its test predictions;
the metric is computed here, the same way for every model. Finished runs are kept and skipped,
so an interrupted benchmark resumes. ``--collect`` writes the JSON report, a Markdown table
and a figure. Run::

    python scripts/bench_small_data.py --chemprop ENV/bin/chemprop --parallel 2
    python scripts/bench_small_data.py --collect --out docs/results/small_data.json
    python scripts/bench_small_data.py --smoke   # a few molecules, rf and a short scratch run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "moleculenet"
WORK = Path.home() / ".cache" / "graphormer-urpe" / "bench" / "small_data"
TOX21 = "NR-AR NR-AR-LBD NR-AhR NR-Aromatase NR-ER NR-ER-LBD NR-PPAR-gamma SR-ARE SR-ATAD5 "
TOX21 += "SR-HSE SR-MMP SR-p53"
OURS = ("urpe-scratch", "urpe-pretrained", "urpe-pretrained-rdkit2d", "graphormer-pretrained")
CHEMPROP = ("chemprop", "chemprop-rdkit2d")
MODELS = ("rf", *CHEMPROP, *OURS)


@dataclass(frozen=True)
class Task:
    """One benchmark set: its file, target columns and kind."""

    file: str
    targets: tuple[str, ...]
    classification: bool

    @property
    def metric(self) -> str:
        return "roc_auc" if self.classification else "rmse"


SETS = {
    "esol": Task("esol.csv", ("log_solubility",), False),
    "freesolv": Task("freesolv.csv", ("freesolv",), False),
    "lipophilicity": Task("lipophilicity.csv", ("lipo",), False),
    "bace": Task("bace.csv", ("Class",), True),
    "bbbp": Task("bbbp.csv", ("p_np",), True),
    "tox21": Task("tox21.csv", tuple(TOX21.split()), True),
}


# --------------------------------------------------------------------------------------
# Split files
# --------------------------------------------------------------------------------------


def write_splits(name: str, seed: int, data_dir: Path, work: Path, limit: int | None) -> Path:
    """``work/name/seed<k>/{train,valid,test}.csv`` (``smiles`` + targets) and ``split.json``
    (sizes, rows left out); written once."""
    from graphormer_urpe.datasets import balanced_scaffold_split

    folder = work / name / f"seed{seed}"
    if (folder / "split.json").exists():
        return folder
    task = SETS[name]
    table = pd.read_csv(data_dir / task.file)
    if limit is not None:
        table = table.head(limit)
    save_split(
        table[["smiles", *task.targets]], balanced_scaffold_split, seed, folder, {"set": name}
    )
    return folder


def save_split(table: pd.DataFrame, split: Callable, seed: int, folder: Path, info: dict) -> None:
    """``table``'s rows that RDKit reads, split 80/10/10 by ``split(smiles, fractions, seed)``
    into ``folder/{train,valid,test}.csv``, and ``folder/split.json`` (``info`` with the seed,
    the sizes and the count of unreadable rows left out)."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    ok = [Chem.MolFromSmiles(str(s)) is not None for s in table["smiles"]]
    table = table.loc[ok].reset_index(drop=True)
    parts = split(table["smiles"].tolist(), (0.8, 0.1, 0.1), seed)
    folder.mkdir(parents=True, exist_ok=True)
    for part, index in parts.items():
        table.iloc[index].to_csv(folder / f"{part}.csv", index=False)
    sizes = {part: len(index) for part, index in parts.items()}
    info = info | {"seed": seed, "sizes": sizes, "unparsable": len(ok) - sum(ok)}
    (folder / "split.json").write_text(json.dumps(info, indent=1))


# --------------------------------------------------------------------------------------
# Metrics (the same code for every model)
# --------------------------------------------------------------------------------------


def score(task: Task, truth: pd.DataFrame, pred: np.ndarray) -> float:
    """Test RMSE over all targets, or the mean ROC-AUC over the tasks whose labelled test
    molecules hold both classes (missing labels skipped)."""
    from sklearn.metrics import roc_auc_score

    y = truth[list(task.targets)].to_numpy(dtype=float)  # [N, T]
    if not task.classification:
        keep = ~np.isnan(y)
        return float(np.sqrt(np.mean((y[keep] - pred[keep]) ** 2)))
    aucs = []
    for t in range(y.shape[1]):
        keep = ~np.isnan(y[:, t])
        if len(np.unique(y[keep, t])) == 2:
            aucs.append(roc_auc_score(y[keep, t], pred[keep, t]))
    return float(np.mean(aucs))


# --------------------------------------------------------------------------------------
# One run per (set, seed, model)
# --------------------------------------------------------------------------------------


def run_rf(task: Task, split: Path, out: Path, seed: int, trees: int) -> np.ndarray:
    """Random-forest predictions ``[N_test, T]`` from Morgan fingerprints."""
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)

    def features(table: pd.DataFrame) -> np.ndarray:
        mols = [Chem.MolFromSmiles(s) for s in table["smiles"]]
        return np.stack([gen.GetFingerprintAsNumPy(m) for m in mols]).astype(np.uint8)

    train, test = pd.read_csv(split / "train.csv"), pd.read_csv(split / "test.csv")
    x_train, x_test = features(train), features(test)
    pred = np.zeros((len(test), len(task.targets)))
    for t, col in enumerate(task.targets):
        keep = train[col].notna().to_numpy()
        y = train.loc[keep, col].to_numpy()
        if task.classification:
            model = RandomForestClassifier(trees, n_jobs=1, random_state=seed)
            model.fit(x_train[keep], y.astype(int))
            proba = model.predict_proba(x_test)
            pred[:, t] = proba[:, list(model.classes_).index(1)] if 1 in model.classes_ else 0
        else:
            model = RandomForestRegressor(trees, n_jobs=1, random_state=seed)
            pred[:, t] = model.fit(x_train[keep], y).predict(x_test)
    return pred


def run_chemprop(
    task: Task, split: Path, out: Path, seed: int, exe: str, descriptors: bool = False
) -> np.ndarray:
    """Chemprop 2.x with its defaults (``descriptors``: and Chemprop 1's normalised RDKit 2D
    descriptors), then its predictions on the test file."""
    kind = "classification" if task.classification else "regression"
    files = [str(split / f"{p}.csv") for p in ("train", "valid", "test")]
    targets = list(task.targets)
    common = ["--accelerator", "cpu", "--devices", "1", "--num-workers", "0"]
    if descriptors:
        common += ["--molecule-featurizers", "v1_rdkit_2d_normalized"]
    _call(
        [exe, "train", "-i", *files, "-s", "smiles", "--target-columns", *targets, "-t", kind]
        + ["-o", str(out / "chemprop"), "--pytorch-seed", str(seed), *common],
        out / "chemprop.log",
    )
    (model,) = sorted((out / "chemprop").rglob("best*.pt"))[-1:]
    preds = out / "chemprop_test.csv"
    _call(
        [exe, "predict", "-i", files[2], "-s", "smiles", "--model-paths", str(model)]
        + ["-o", str(preds), *common],
        out / "chemprop_predict.log",
    )
    return pd.read_csv(preds)[targets].to_numpy(dtype=float)


def run_ours(
    task: Task, split: Path, out: Path, seed: int, minutes: float, init: str | None, extra: list
) -> np.ndarray:
    """``graphormer-urpe train`` on the split files within ``minutes``; its test predictions."""
    files = ",".join(str(split / f"{p}.csv") for p in ("train", "valid", "test"))
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "train", "--dataset", f"csv:{files}"]
    cmd += ["--target-columns", *task.targets, "--seed", str(seed), "--threads", "1"]
    cmd += ["--time-limit", f"{minutes:.3f}", "--out", str(out / "run"), "--no-progress"]
    cmd += ["--store-dir", str(out / "cache"), *extra]
    if task.classification:
        cmd += ["--task", "classification"]
    if init is not None:
        cmd += ["--init-from", init]
    _call(cmd, out / "train.log")
    table = pd.read_csv(out / "run" / "test_predictions.csv")
    return table[[f"pred_{t}" for t in task.targets]].to_numpy(dtype=float)


def _call(cmd: list[str], log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with log.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{tail}")


def runs_parser(
    doc: str,
    work: Path,
    seeds: list[int],
    one: tuple[str, str, str],
    limit: str = "first N rows of each set",
) -> argparse.ArgumentParser:
    """The parser every benchmark of kept runs starts from: its description (``doc``'s first
    paragraph), the seeds, the first rows only (``limit``: what they are), one run in a process
    of its own (``--one``, hidden; ``one`` names its three values), where the runs are kept,
    how many run at once, the report from kept runs, and the smoke mode."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=seeds)
    p.add_argument("--limit", type=int, default=None, help=limit)
    p.add_argument("--one", nargs=3, metavar=one, help=argparse.SUPPRESS)
    p.add_argument("--work", default=str(work), help="split files and runs (kept, resumable)")
    p.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each")
    p.add_argument("--collect", action="store_true", help="write the report from kept runs")
    p.add_argument("--out", default=None, help="JSON report (with --collect)")
    p.add_argument("--smoke", action="store_true", help="a tiny run for the test suite")
    return p


def chemprop_flags(p: argparse.ArgumentParser, data_dir: Path) -> None:
    """The flags of a benchmark that trains Chemprop beside ours: the data, Chemprop's
    executable, and flags passed on to every ``graphormer-urpe train``."""
    p.add_argument("--data-dir", default=str(data_dir))
    p.add_argument("--chemprop", default="chemprop", help="the Chemprop 2.x executable")
    p.add_argument("--train-arg", dest="train_args", action="append", default=[])


def kept(out: Path, run: Callable[[], dict]) -> dict:
    """``run()``'s result, kept in ``out/result.json``: run once (``out`` made first, its wall
    time added as ``wall_s``), read back after (an interrupted benchmark resumes)."""
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = run()
    result["wall_s"] = round(time.perf_counter() - start, 1)
    done.write_text(json.dumps(result, indent=1))
    return result


def run_one(a: argparse.Namespace, name: str, seed: int, model: str) -> dict:
    """One (set, seed, model) run, kept in ``result.json`` (reused when present)."""
    task = SETS[name]
    split = write_splits(name, seed, Path(a.data_dir), Path(a.work), a.limit)
    out = split / model

    def run() -> dict:
        if model == "rf":
            pred = run_rf(task, split, out, seed, a.trees)
        elif model in CHEMPROP:
            pred = run_chemprop(task, split, out, seed, a.chemprop, model == "chemprop-rdkit2d")
        else:
            base = model.removesuffix("-rdkit2d")
            init = {"urpe-scratch": None, "urpe-pretrained": a.init_from}.get(
                base, a.graphormer_init
            )
            extra = ["--attention", "graphormer"] if base == "graphormer-pretrained" else []
            if model.endswith("-rdkit2d"):
                extra += ["--mol-features", "rdkit2d"]
            pred = run_ours(task, split, out, seed, budget(split, a), init, extra + a.train_args)
        truth = pd.read_csv(split / "test.csv")
        result = {"set": name, "seed": seed, "model": model, "metric": task.metric}
        return result | {"value": score(task, truth, pred), "n_test": len(truth)}

    return kept(out, run)


def budget(split: Path, a: argparse.Namespace) -> float:
    """Minutes for our runs: what Chemprop took on this split, else ``--minutes``."""
    chemprop = split / "chemprop" / "result.json"
    if chemprop.exists() and not a.minutes_fixed:
        return json.loads(chemprop.read_text())["wall_s"] / 60
    return a.minutes


# --------------------------------------------------------------------------------------
# Scheduling and the report
# --------------------------------------------------------------------------------------


def jobs(a: argparse.Namespace) -> list[list[tuple[str, int, str]]]:
    """The runs in two phases: the floor and Chemprop first (they set the time budgets)."""
    runs = [
        (name, seed, model)
        for name in a.sets
        for seed in a.seeds
        for model in a.models
        if model != "graphormer-pretrained" or name in ("esol", "lipophilicity")
    ]
    first = [r for r in runs if r[2] in ("rf", *CHEMPROP)]
    return [first, [r for r in runs if r not in first]]


def run_all(a: argparse.Namespace) -> list[dict]:
    results = []
    for phase in jobs(a):
        with ThreadPoolExecutor(a.parallel) as pool:
            futures = [pool.submit(_worker, a, *r) for r in phase]
            for f in futures:
                r = f.result()
                results.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    return results


def _worker(a: argparse.Namespace, name: str, seed: int, model: str) -> dict:
    key = {"set": name, "seed": seed, "model": model}
    return in_own_process(__file__, [name, str(seed), model, *_passed(a)], key)


def in_own_process(script: str, args: list[str], key: dict) -> dict:
    """``script --one ARGS`` in its own process, so that one thread each is all the runs use;
    the JSON it prints, or ``key`` with the error."""
    cmd = [sys.executable, script, "--one", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        return key | {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout)


def one_run(a: argparse.Namespace, run: Callable[[str, str, str], dict]) -> bool:
    """With ``--one A B C`` (what :func:`in_own_process` starts): ``run(A, B, C)``'s result
    printed as JSON. Whether there was one to run."""
    if a.one is None:
        return False
    print(json.dumps(run(*a.one)))
    return True


def _passed(a: argparse.Namespace) -> list[str]:
    args = ["--data-dir", str(a.data_dir), "--work", str(a.work), "--trees", str(a.trees)]
    args += ["--chemprop", a.chemprop, "--init-from", a.init_from, "--minutes", str(a.minutes)]
    if a.graphormer_init:
        args += ["--graphormer-init", a.graphormer_init]
    if a.limit is not None:
        args += ["--limit", str(a.limit)]
    if a.minutes_fixed:
        args += ["--minutes-fixed"]
    return args + [f"--train-arg={t}" for t in a.train_args]


def kept_results(work: Path, first: str, second: str, wanted: list[str]) -> dict:
    """The kept ``work/*/seed*/*/result.json`` files whose ``first`` field is in ``wanted``,
    grouped by that field, then by their ``second``: ``{first: {second: [result, ...]}}``."""
    runs: dict = {}
    for path in sorted(work.glob("*/seed*/*/result.json")):
        r = json.loads(path.read_text())
        if r[first] in wanted:
            runs.setdefault(r[first], {}).setdefault(r[second], []).append(r)
    return runs


def collect(work: Path, sets: list[str]) -> dict:
    """Mean ± std over seeds per (set, model), from the kept ``result.json`` files."""
    table = kept_results(work, "set", "model", sets)
    report: dict = {}
    for name, models in table.items():
        report[name] = {"metric": SETS[name].metric, "models": {}}
        for model, runs in sorted(models.items()):
            values = [r["value"] for r in sorted(runs, key=lambda r: r["seed"])]
            report[name]["models"][model] = {
                "seeds": [r["seed"] for r in sorted(runs, key=lambda r: r["seed"])],
                "values": [round(v, 4) for v in values],
                "mean": round(statistics.fmean(values), 4),
                "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
                "wall_s_mean": round(statistics.fmean(r["wall_s"] for r in runs), 1),
            }
    return report


def markdown(report: dict) -> str:
    models = [m for m in MODELS if any(m in r["models"] for r in report.values())]
    lines = ["| set | metric | " + " | ".join(models) + " |"]
    lines.append("| --- | --- | " + " | ".join("---" for _ in models) + " |")
    for name, r in report.items():
        cells = []
        for m in models:
            s = r["models"].get(m)
            cells.append("" if s is None else f"{s['mean']:.3f} ± {s['std']:.3f}")
        lines.append(f"| {name} | {r['metric']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(report), figsize=(3.2 * len(report), 3.2), squeeze=False)
    for ax, (name, r) in zip(axes[0], report.items(), strict=True):
        names = list(r["models"])
        means = [r["models"][m]["mean"] for m in names]
        stds = [r["models"][m]["std"] for m in names]
        ax.bar(range(len(names)), means, yerr=stds, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{name} ({'ROC-AUC ↑' if r['metric'] == 'roc_auc' else 'RMSE ↓'})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = runs_parser(__doc__, WORK, [0, 1, 2], ("SET", "SEED", "MODEL"))
    p.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    chemprop_flags(p, SHARED)
    p.add_argument("--init-from", default="pretrained", help="urpe-pretrained's checkpoint")
    p.add_argument("--graphormer-init", default=None, help="graphormer-pretrained's checkpoint")
    p.add_argument("--minutes", type=float, default=10.0, help="budget without Chemprop's")
    p.add_argument("--minutes-fixed", action="store_true", help="always --minutes")
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--threads", type=int, default=1, help="(runs use one thread each)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if one_run(a, lambda name, seed, model: run_one(a, name, int(seed), model)):
        return
    if a.smoke:
        a.sets, a.seeds, a.models, a.limit, a.trees = ["esol"], [0], ["rf", "urpe-scratch"], 60, 20
        tiny = ["--num-layers=1", "--hidden-dim=16", "--ffn-dim=16", "--num-heads=2"]
        a.train_args = ["--max-steps=3", "--eval-every=3", *tiny, *a.train_args]
    if not a.collect:
        results = run_all(a)
        failed = [r for r in results if "error" in r]
        if a.smoke:
            report = {"benchmark": "small_data", "results": results}
            print(json.dumps(report, indent=1))
            sys.exit(1 if failed else 0)
    report = collect(Path(a.work), a.sets)
    doc = {"benchmark": "small_data", "date": time.strftime("%Y-%m-%d"), "sets": report}
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        out = Path(a.out)
        out.write_text(text + "\n")
        out.with_suffix(".md").write_text(markdown(report))
        figures = Path(__file__).resolve().parents[1] / "docs" / "figures"  # the docs' own
        figure(report, figures / f"{out.stem}.png")


if __name__ == "__main__":
    main()
