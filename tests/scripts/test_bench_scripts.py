"""The benchmark scripts run in smoke mode and print valid JSON (no timing is asserted); their
helpers build Hugging Face's inputs as its collator does."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import BAD, MIXED, SMILES

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _mixed_smi(tmp_path: Path) -> Path:
    """300 lines of valid and unreadable SMILES (an empty one as an unreadable ring)."""

    smi = tmp_path / "mols.smi"
    smi.write_text("".join(f"{s or 'C1CC'}\n" for s in MIXED * 10))
    return smi


def test_predict_benchmark_smoke_mode_emits_json(tmp_path):
    report, _ = _bench("bench_predict", "--smiles-file", str(_mixed_smi(tmp_path)))
    assert report["benchmark"] == "predict"
    (run,) = report["results"]["stream"]
    assert run["molecules"] == 300 and run["molecules_per_s"] > 0 and run["peak_rss_mib"] > 0
    assert report["results"]["profile"]["small"]["model"]["cpu_ms_per_molecule"] > 0


def test_embeddings_benchmark_smoke_mode_emits_json(tmp_path):

    report, _ = _bench("bench_embeddings", "--smiles-file", str(_mixed_smi(tmp_path)))
    assert report["benchmark"] == "predict --embeddings"
    (run,) = report["runs"]["embeddings"]
    assert run["array"]["shape"][0] == 300 and run["array"]["ok"]
    assert run["array"]["nan_rows"] == 10 * sum(s in BAD for s in MIXED)
    assert report["summary"]["throughput_ratio"] > 0 and report["runs"]["predict"]


def test_startup_benchmark_smoke_mode_emits_json():
    script = SCRIPTS / "bench_startup.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["benchmark"] == "startup" and report["config"]["commands"] == ["help", "predict"]
    help_, predict = report["results"]["help"], report["results"]["predict"]
    for run in (help_, predict):
        assert len(run["wall_s"]) == 1 and run["median_wall_s"] > 0 and run["median_cpu_s"] > 0
    assert help_["imported"] == []  # --help imports no torch
    assert "torch" in predict["imported"] and predict["import_ms"]["torch"] > 0


def test_small_data_benchmark_smoke_mode_scores_every_model_on_the_same_split(tmp_path):

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    rows = [f"{s},{rng.normal():.3f}" for s in (SMILES * 4)[:60]]
    (data / "esol.csv").write_text("smiles,log_solubility\n" + "\n".join(rows) + "\n")
    work = tmp_path / "work"
    report, _ = _bench("bench_small_data", "--data-dir", str(data), "--work", str(work))
    runs = {r["model"]: r for r in report["results"]}
    assert set(runs) == {"rf", "urpe-scratch"}
    split = json.loads((work / "esol" / "seed0" / "split.json").read_text())
    for r in runs.values():
        assert r["metric"] == "rmse" and r["value"] > 0 and r["n_test"] == split["sizes"]["test"]
    assert sum(split["sizes"].values()) == 60


def test_descriptor_benchmark_smoke_mode_emits_json():
    report, _ = _bench("bench_descriptors")
    assert report["benchmark"] == "descriptors" and report["descriptors_kept"] == 202
    ms = report["results"]
    assert ms["descriptors"] > 0 and ms["featurize"] > 0 and len(report["top10_kept_ms"]) == 10


def test_lm_benchmark_smoke_mode_emits_json():
    report, _ = _bench("bench_lm")
    assert report["benchmark"] == "lm" and report["baseline"] == "rpe"
    schemes = report["schemes"]
    assert set(schemes) == {"rpe", "xl", "xl-urpe"}
    assert schemes["rpe"]["ratio_to_baseline"] == 1.0
    assert all(s["median_tokens_per_s"] > 0 for s in schemes.values())


def test_train_benchmark_measures_captured_steps(salty_smiles):
    """Eager and captured steps of one model on a molecule list with salts: the disconnected
    molecules are skipped and counted, the steps' launches counted for every mode."""
    args = ["--smiles-file", str(salty_smiles), "--modes", "eager", "captured"]
    report, _ = _bench("bench_train", *args, "--attention", "urpe")
    results, config = report["results"], report["config"]
    assert report["benchmark"] == "train" and config["ops_note"]
    _said_so(config)
    assert set(results) == {"ours_urpe", "ours_urpe_captured"}
    assert results["ours_urpe"]["graphs_per_s"] > 0 and results["ours_urpe"]["ops_per_step"] > 10
    captured = results["ours_urpe_captured"]
    assert captured["graphs_per_s"] > 0 and captured["capture_failed"] is None
    assert captured["captured_shapes"] == len(config["static_shapes"]) >= 1
    assert captured["ops_per_step"] > 10 and captured["host_calls_per_step"] == 1
    assert 0 < config["static_token_fraction"] <= config["real_token_fraction"] <= 1


def test_step_work_benchmark_counts_both_paths_op_by_op():
    report, _ = _bench("bench_step_work", "--attention", "urpe", "--top", "1000")
    result = report["results"]["urpe"]
    totals, table = result["totals"], result["ops"]
    assert set(totals) == {"eager_pad1", "eager_pad8", "static"}
    for name, path in totals.items():  # the table lists every operator: it sums to the totals
        assert path["flops"] > 0 and path["bytes"] > 0 and path["profiler_flops"] > 0
        for key in ("flops", "bytes", "calls"):
            assert sum(row[name][key] for row in table) == path[key], (name, key)
    got = result["static_over_eager"]["eager_pad8"]["bytes"]
    assert got == pytest.approx(totals["static"]["bytes"] / totals["eager_pad8"]["bytes"], abs=1e-3)
    assert all(len(shape) == 4 for shape in report["config"]["static_shapes"])  # B, n, M, T


def test_interleaved_comparison_with_a_commit_emits_json():
    import shutil

    if shutil.which("git") is None or not (SCRIPTS.parent / ".git").exists():
        pytest.skip("needs the project's git history")
    report, _ = _bench("bench_ab", "--baseline", "HEAD")
    assert report["benchmark"] == "train_ab" and len(report["config"]["baseline"]) >= 7
    for att in ("graphormer", "urpe"):
        r = report["results"][att]
        assert r["this"]["median_ms"] > 0 and r["baseline"]["median_ms"] > 0
        assert r["ratio_of_medians"] == pytest.approx(
            r["baseline"]["median_ms"] / r["this"]["median_ms"], abs=1e-3
        )


def test_busy_time_is_the_union_of_the_device_intervals():
    import random

    from bench_train import covered_ns

    rng = random.Random(0)
    for _ in range(200):
        spans = []
        for _ in range(rng.randrange(0, 12)):
            lo = rng.randrange(0, 60)
            spans.append((lo, lo + rng.randrange(1, 15)))
        spans.sort()
        covered = {t for lo, hi in spans for t in range(lo, hi)}  # unit cells [t, t + 1)
        assert covered_ns(spans) == len(covered), spans


def test_top_kernels_sum_each_kernels_time_and_rank_them():
    from bench_train import top_kernels

    events = [
        ("gemm", 0, 5_000_000),
        ("copy", 5_000_000, 6_000_000),
        ("gemm", 7_000_000, 8_000_000),
    ]
    events += [(f"k{i}", 0, 1000 * (i + 1)) for i in range(10)]
    top = top_kernels(events, k=3)
    assert [t["name"] for t in top] == ["gemm", "copy", "k9"]
    assert top[0] == {"name": "gemm", "ms": 6.0, "calls": 2}
    assert top[2]["ms"] == pytest.approx(0.01)
    plain: dict[str, int] = {}  # the reference: summed by hand
    for name, lo, hi in events:
        plain[name] = plain.get(name, 0) + hi - lo
    assert [t["name"] for t in top_kernels(events, k=13)] == sorted(
        plain, key=lambda n: (-plain[n], n)
    )


SALTS = [
    "[Na+].[Cl-]",
    "CC(=O)[O-].[Na+]",
    "C[N+](C)(C)C.[Br-]",
    "c1ccccc1C(=O)O.N",
    "CCN(CC)CC.Cl",
    "O=S(=O)(O)O.c1ccncc1",
    "[K+].[O-]C(=O)c1ccccc1",
    "CCO.O",
    "NCCN.Cl.Cl",
    "CC(C)N.OC(=O)C(O)=O",
]


@pytest.fixture
def salty_smiles(tmp_path) -> Path:
    """A molecule list where every other entry is disconnected (salts, mixtures)."""

    rows = [s for pair in zip(SALTS, SMILES, strict=False) for s in pair] + SMILES[len(SALTS) :]
    path = tmp_path / "salty.csv"
    path.write_text("smiles\n" + "\n".join(rows) + "\n")
    return path


def _bench(name: str, *args: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / f"{name}.py"), "--smoke", "--threads", "1", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("name", ["bench_preprocess", "bench_collate"])
def test_benchmarks_skip_disconnected_molecules_and_say_so(name, salty_smiles):
    """Each benchmark's smoke mode emits its JSON report, here on a molecule list with salts
    (bench_train's is checked the same way beside its captured steps; the default molecules
    are read by the other benchmarks' smoke runs in this module)."""
    report, _ = _bench(name, "--smiles-file", str(salty_smiles))
    assert report["benchmark"] == name.removeprefix("bench_")
    _said_so(report["config"])
    results = report["results"]
    rates = [
        v["graphs_per_s"] for v in results.values() if isinstance(v, dict) and "graphs_per_s" in v
    ]
    assert rates and all(r > 0 for r in rates)
    if name == "bench_preprocess":  # calls of a few sizes, shared stacks against one per size
        calls = results["ours_batched_in_calls"]
        assert sorted(calls, key=int) == ["16", "48", "256", "1000"]
        assert all(c["stacks"] > 0 and c["one_per_size"] > 0 for c in calls.values())


def _said_so(config: dict) -> None:
    """The report of a run on ``salty_smiles`` says the salts were left out, and how many."""
    assert config["connectivity"] == "connected" and config["source"] == "salty.csv"
    kept = config["molecules"]
    # the salts met before the kept molecules ran out: one before each of the first ten
    assert config["skipped_disconnected"] == min(kept, len(SALTS))


def test_disconnected_on_request_and_the_peer_memory_cap(salty_smiles):
    args = ["--smiles-file", str(salty_smiles), "--disconnected", "--peer", "hf"]
    report, err = _bench("bench_train", *args, "--peer-max-gib", "0.001", "--no-memory")
    config = report["config"]
    assert config["connectivity"] == "disconnected" and config["molecules"] == len(SALTS)

    assert config["skipped_connected"] == len(SMILES)  # fewer salts than asked: all scanned
    skipped = report["results"]["hf"]
    assert "510 hops" in skipped["skipped"] and skipped["estimated_gib"] > 0.001
    assert sum("peer skipped" in line for line in err.splitlines()) == 1
    assert report["results"]["ours_urpe"]["graphs_per_s"] > 0


def test_hugging_face_peer_runs_when_its_cython_collator_cannot_be_built(tmp_path):
    """As on a machine with Cython 3, where building Hugging Face's algorithms fails on import:
    the peer model is still measured, on the same tensors built from our batches."""
    pytest.importorskip("transformers.models.deprecated.graphormer.modeling_graphormer")
    fake = tmp_path / "site" / "pyximport"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "def install(*args, **kwargs):\n"
        "    raise ImportError('Building module algos_graphormer failed: CompileError')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), *sys.path])}
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_train.py"), "--smoke", "--threads", "1"]
        + ["--peer", "hf", "--no-memory"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)["results"]
    ours = [v for k, v in results.items() if k.startswith("ours_")]  # both attentions, eager
    assert len(ours) == 2 and all(v["graphs_per_s"] > 0 and v["ops_per_step"] > 10 for v in ours)
    hf = results["hf"]
    assert hf["graphs_per_s"] > 0
    assert hf["inputs"].startswith("built from our batches")
    assert "algos_graphormer failed" in hf["inputs"]


def test_token_budget_benchmark_bounds_the_largest_batch(tmp_path):
    table = tmp_path / "mols.csv"
    table.write_text("smiles\nCCO\nc1ccccc1O\nCC(=O)Nc1ccc(O)cc1\n" + "CCCCCCCCCCCCCCCCCCCC\n" * 3)
    report, _ = _bench("bench_token_budget", "--csv", str(table), "--batch-size", "2")
    assert report["benchmark"] == "token_budget"
    (mols, rand) = report["sets"]
    assert mols["graphs"] == 6 and mols["atoms_max"] == 20
    for s in (mols, rand):
        fixed, budget = s["fixed"], s["token_budget"]
        assert budget["largest_padded_tokens"] <= s["max_tokens"]
        assert budget["largest_attention_entries"] <= fixed["largest_attention_entries"]
    assert rand["token_budget"]["real_entry_fraction"] > rand["fixed"]["real_entry_fraction"]


def test_tune_table_takes_seeds_1_and_2_of_every_source_and_bolds_the_best(tmp_path):
    """The six-set table: each cell is the mean over seeds 1 and 2 of the report it names
    (seed 0 chose the tuned recipes), and the bold cell of a row is its best mean."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "tune_table.py"), "--out", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = json.loads((tmp_path / "t.json").read_text())["sets"]
    bench_json = SCRIPTS.parent / "docs" / "results" / "small_data.json"
    bench = json.loads(bench_json.read_text())["sets"]
    for name, row in rows.items():
        runs = bench[name]["models"]["chemprop"]
        by_seed = dict(zip(runs["seeds"], runs["values"], strict=True))
        assert row["cells"]["chemprop"]["values"] == [by_seed[1], by_seed[2]]
        for cell in row["cells"].values():
            assert cell["mean"] == pytest.approx(np.mean(cell["values"]), abs=1e-4)
    lines = [
        ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and ("↑" in ln or "↓" in ln)
    ]
    assert len(lines) == len(rows) == 6
    for line, row in zip(lines, rows.values(), strict=True):
        means = [c["mean"] for c in row["cells"].values()]
        best = max(means) if row["metric"] == "roc_auc" else min(means)
        assert f"**{best:.3f}**" in line


def test_admet_metrics_match_their_definitions():
    from bench_admet import metrics  # scripts/ is on pytest's pythonpath

    rng = np.random.default_rng(3)
    y = rng.normal(size=50)
    pred = y + rng.normal(scale=0.7, size=50)
    got = metrics(y, pred)
    yc, pc = y - y.mean(), pred - pred.mean()
    assert got["pearson"] == pytest.approx(yc @ pc / np.sqrt((yc @ yc) * (pc @ pc)))
    ranks = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731 (no ties here)
    ry, rp = ranks(y) - ranks(y).mean(), ranks(pred) - ranks(pred).mean()
    assert got["spearman"] == pytest.approx(ry @ rp / np.sqrt((ry @ ry) * (rp @ rp)))
    assert got["mae"] == pytest.approx(np.abs(y - pred).mean())
    assert got["r2"] == pytest.approx(1 - ((y - pred) ** 2).sum() / (yc @ yc))


def _kept_admet_runs(work: Path, seeds: list[int], rng: np.random.Generator) -> None:
    """``result.json`` files as the benchmark keeps them, random figures, two endpoints."""
    for endpoint in ("HLM", "Sol"):
        for seed in seeds:
            out = work / endpoint / f"seed{seed}" / "urpe-ensemble"
            out.mkdir(parents=True)
            valid = rng.normal(size=(2, 6)).round(3)  # the split's targets, predictions
            column = {"HLM": "log_hlm_clint", "Sol": "log_solubility"}[endpoint]
            (out.parent / "valid.csv").write_text(pd.DataFrame({column: valid[0]}).to_csv())
            test = {k: float(rng.uniform()) for k in ("pearson", "spearman", "mae", "r2")}
            run = {"endpoint": endpoint, "seed": seed, "method": "urpe-ensemble", "test": test}
            run |= {"wall_s": float(rng.uniform(800, 900)), "net_weight": [float(seed)]}
            rmse = float(np.sqrt(np.mean((valid[0] - valid[1]) ** 2)))
            run |= {"pred_valid": valid[1].tolist(), "valid_rmse": rmse}
            (out / "result.json").write_text(json.dumps(run))


def test_admet_merge_of_reports_on_other_seeds_equals_one_report_of_all(tmp_path):
    import bench_admet

    rng = np.random.default_rng(5)
    flags = ["--methods", "urpe-ensemble", "--train-arg=--time-limit", "--train-arg=15"]
    parts = []
    for name, seeds in (("a", [3, 0]), ("b", [4, 1, 2])):
        _kept_admet_runs(tmp_path / name, seeds, rng)
        out = tmp_path / f"{name}.json"
        seed_flags = ["--seeds", *map(str, seeds), "--endpoints", "HLM", "Sol"]
        where = ["--work", str(tmp_path / name), "--out", str(out)]
        bench_admet.main(["--collect", *where, *seed_flags, *flags])
        parts.append(str(out))
    merged = bench_admet.merge(parts)
    assert merged["args"]["seeds"] == [0, 1, 2, 3, 4]
    for endpoint in ("HLM", "Sol"):
        runs = sorted(
            (json.loads(p.read_text()) for p in tmp_path.glob(f"*/{endpoint}/seed*/*/result.json")),
            key=lambda r: r["seed"],
        )
        entry = merged["endpoints"][endpoint]["methods"]["urpe-ensemble"]
        assert entry["seeds"] == [r["seed"] for r in runs]
        for name in ("pearson", "mae"):
            values = [r["test"][name] for r in runs]
            assert entry[name]["values"] == pytest.approx(values, abs=1e-4)
            assert entry[name]["mean"] == pytest.approx(np.mean(values), abs=1e-4)
            assert entry[name]["std"] == pytest.approx(np.std(values, ddof=1), abs=1e-4)
        assert entry["net_weights"] == [r["net_weight"] for r in runs]
        rmse = [r["valid_rmse"] for r in runs]  # as the test wrote it beside the predictions
        assert entry["valid_rmse"]["values"] == pytest.approx(rmse, abs=1e-4)
        walls = [r["wall_s"] for r in runs]
        assert entry["wall_s_mean"] == pytest.approx(np.mean(walls), abs=0.2)
    with pytest.raises(SystemExit, match="share seeds"):
        bench_admet.merge([parts[0], parts[0]])
    other = json.loads(Path(parts[1]).read_text())
    other["args"]["train_args"] = []
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="train_args"):
        bench_admet.merge([parts[0], str(tmp_path / "other.json")])


def test_admet_pair_splits_train_on_the_related_assay_but_never_on_test_molecules(tmp_path):
    import argparse

    import bench_admet

    data, rng = tmp_path / "data", np.random.default_rng(2)
    data.mkdir()
    files = {"rPPB_train": SMILES[:20], "rPPB_test": SMILES[20:28], "hPPB_train": SMILES[10:40]}
    for name, smiles in files.items():
        column = bench_admet.ENDPOINTS[name.split("_")[0]]
        values = rng.normal(size=len(smiles)).round(3)
        pd.DataFrame({"smiles": smiles, column: values}).to_csv(data / f"{name}.csv", index=False)
    a = argparse.Namespace(work=str(tmp_path / "work"), data_dir=str(data), limit=None)
    split = bench_admet.write_splits("rPPB", 0, a)
    pair = bench_admet.write_pair_splits(split, "rPPB", a)
    own, other = "log_rppb_unbound", "log_hppb_unbound"
    related = pd.read_csv(data / "hPPB_train.csv").set_index("smiles")[other]
    test = pd.read_csv(pair / "test.csv")
    pd.testing.assert_frame_equal(test[["smiles", own]], pd.read_csv(split / "test.csv"))
    assert test[other].isna().all()
    train, valid = pd.read_csv(pair / "train.csv"), pd.read_csv(pair / "valid.csv")
    assert not set(train.smiles) & set(test.smiles)  # test molecules are never trained on
    assert not set(train.smiles) & set(valid.smiles)
    pd.testing.assert_frame_equal(valid[["smiles", own]], pd.read_csv(split / "valid.csv"))
    for frame in (train, valid):  # the related labels, where measured, are its file's
        has = frame.smiles.isin(related.index)
        assert frame.loc[has, other].tolist() == related[frame.smiles[has]].tolist()
        assert frame.loc[~has, other].isna().all()
    first = pd.read_csv(split / "train.csv")
    pd.testing.assert_frame_equal(train.head(len(first))[["smiles", own]], first)
    added = train.iloc[len(first) :]  # the related assay's own molecules, this one missing
    assert added[own].isna().all()
    expected = set(related.index) - set(first.smiles) - set(valid.smiles) - set(test.smiles)
    assert set(added.smiles) == expected and len(added) == len(expected) > 0


def test_admet_benchmark_smoke_mode_runs_the_recipe_with_its_trees(tmp_path):
    pytest.importorskip("lightgbm")

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for part, n in (("train", 60), ("test", 15)):
        rows = [f"{s},{rng.normal():.3f}" for s in (SMILES * 8)[:n]]
        text = "smiles,log_rppb_unbound\n" + "\n".join(rows) + "\n"
        (data / f"rPPB_{part}.csv").write_text(text)
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_admet.py"), "--smoke", "--data-dir", str(data)]
        + ["--work", str(work)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)["endpoints"]["rPPB"]
    assert set(report["methods"]) == {"gbt", "urpe"}
    sizes = json.loads((work / "rPPB" / "seed0" / "split.json").read_text())["sizes"]
    assert sizes == {"train": 54, "valid": 6, "test": 15}
    recipe = json.loads((work / "rPPB" / "seed0" / "urpe" / "result.json").read_text())
    (weight,) = recipe["net_weight"]  # the recipe's trees head, blended on validation
    assert 0.0 <= weight <= 1.0
    assert report["published"]["best"] == 0.795


def test_serve_benchmark_smoke_mode_emits_json():
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    report, _ = _bench("bench_serve")
    assert report["benchmark"] == "serve"
    (run,) = report["runs"]
    assert run["serve"]["molecules"] == report["config"]["molecules"] > 0
    assert run["predict"]["molecules"] == run["serve"]["molecules"]
    assert run["serve"]["failed_requests"] == 0 and run["single"]["p99_ms"] > 0
    assert (
        run["faults"]["still_serving"] and run["faults"]["statuses"]["over the atoms limit"] == 422
    )
    assert set(report["summary"]["targets"]) == {
        "throughput_ratio >= 0.8",
        "single_p99_ms <= 100",
        "no failed request",
    }


def test_hugging_face_inputs_built_from_ours_equal_its_collator():
    """The inputs the speed benchmarks build for Hugging Face's Graphormer from our batches
    (where its Cython collator cannot be built) equal its collator's."""
    bench = importlib.import_module("_bench")  # scripts/ is on pytest's pythonpath
    hf = bench.hf_graphormer()
    if hf is None:
        pytest.skip("transformers<=4.57 (Hugging Face's Graphormer) is not installed")
    if hf.collating is None:
        pytest.skip(f"Hugging Face's collator is unavailable: {hf.collating_error}")
    collating = hf.collating
    pre_check = collating.preprocess_item
    collator = collating.GraphormerDataCollator(spatial_pos_max=1024)
    from graphormer_urpe import collate
    from graphormer_urpe.graph.published_weights import hf_inputs

    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CC1N", "OCC(O)CO"]
    items = bench.ogb_items(smiles)
    mh = 5
    graphs = bench.pyg_graphs(items, mh)
    ours = hf_inputs(collate(graphs, mh))
    theirs = collator([pre_check(copy.deepcopy(it)) for it in items])
    for key in ("input_nodes", "attn_bias", "spatial_pos", "in_degree", "out_degree"):
        assert torch.equal(ours[key], theirs[key]), key
    assert torch.equal(ours["input_edges"], theirs["input_edges"][:, :, :, :mh, :])
