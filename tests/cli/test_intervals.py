"""Prediction intervals on the command line: ``train`` keeps the calibration and prints its test
coverage, ``predict --interval`` writes the intervals (a run's, an ensemble's), an
uncalibrated checkpoint says how to ``calibrate`` it."""

from __future__ import annotations

import importlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe.inference.intervals.calibration import load_calibration
from tests.helpers import train_args


def test_train_keeps_calibration_and_predict_writes_intervals(tiny_run, capsys):
    from graphormer_urpe import cli

    root, out = tiny_run
    cal = load_calibration(out / "best.pt")
    assert cal is not None and cal.task_type == "regression" and len(cal.scores[0]) > 0
    metrics = json.loads((out / "metrics.json").read_text())
    for name in ("80", "90", "95"):
        assert 0.0 <= metrics[f"test_coverage_{name}"] <= 1.0
        assert metrics[f"test_width_{name}"] >= 0.0
    capsys.readouterr()
    ckpt = str(out / "best.pt")
    args = ["predict", "--checkpoint", ckpt, "--no-progress", "--workers", "0"]
    assert cli.main([*args, "--interval", "0.9", "--smiles", "CCO", "C(("]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    t = "heavy_atoms"
    assert list(table.columns)[:4] == ["smiles", t, f"{t}_low", f"{t}_high"]
    q = cal.quantiles(0.9)[0]
    assert math.isfinite(q) and cal.difficulty == "distance"
    # the half-width is q (1 - nearest training similarity + beta), the similarity as a plain
    # RDKit search of the training molecules finds it
    sim = _nearest_training_similarity(["CCO"], pd.read_csv(root / "data.csv")["smiles"])[0]
    assert table["nearest_similarity"][0] == pytest.approx(sim, abs=5e-4)
    half = q * (1 - sim + cal.beta[0])
    assert table[f"{t}_high"][0] - table[t][0] == pytest.approx(half, rel=1e-4, abs=1e-4)
    assert table[t][0] - table[f"{t}_low"][0] == pytest.approx(half, rel=1e-4, abs=1e-4)
    assert pd.isna(table[f"{t}_low"][1]) and isinstance(table["error"][1], str)
    # --no-similarity: an interval scaled by the distance still searches
    assert cli.main([*args, "--interval", "0.9", "--no-similarity", "--smiles", "CCO"]) == 0
    again = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert again[f"{t}_high"][0] == pytest.approx(table[f"{t}_high"][0])
    # out of the training domain: a prediction, no interval (the documented policy)
    assert cli.main([*args, "--interval", "0.9", "--smiles", "CCO", "[Na+].[Cl-]"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert table["domain"].tolist()[0] == "in" and table["domain"][1].startswith("out")
    assert not pd.isna(table[t][1]) and pd.isna(table[f"{t}_low"][1])
    assert pd.isna(table[f"{t}_high"][1]) and not pd.isna(table[f"{t}_high"][0])
    result = json.loads(_run_json(cli, ["evaluate", "--checkpoint", ckpt, "--no-progress"], capsys))
    assert result["coverage_90"] == pytest.approx(metrics["test_coverage_90"])


def _run_json(cli, args, capsys) -> str:
    capsys.readouterr()
    assert cli.main(args) == 0
    return capsys.readouterr().out


def test_uncalibrated_checkpoint_says_how_and_calibrate_builds_it(tiny_run, capsys, tmp_path):
    import shutil

    from graphormer_urpe import cli

    root, out = tiny_run
    shutil.copy(out / "best.pt", tmp_path / "best.pt")  # a run from before calibration
    ckpt = str(tmp_path / "best.pt")
    capsys.readouterr()
    args = ["predict", "--checkpoint", ckpt, "--no-progress", "--workers", "0"]
    assert cli.main([*args, "--interval", "0.9", "--smiles", "CCO"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "graphormer-urpe calibrate --checkpoint" in err[0]
    assert "--target-columns heavy_atoms" in err[0]
    calibrate = ["calibrate", "--checkpoint", ckpt, "--input", str(root / "data.csv")]
    calibrate += ["--target-columns", "heavy_atoms"]
    summary = json.loads(_run_json(cli, calibrate, capsys))
    assert summary["molecules"] == 120
    cal = load_calibration(ckpt)
    assert cal is not None and len(cal.scores[0]) == 120 and cal.source == "data.csv"
    assert cli.main([*args, "--interval", "0.8", "--smiles", "CCO"]) == 0
    assert "heavy_atoms_low" in capsys.readouterr().out


def test_ensemble_calibrator_is_scaled_by_the_distance(tiny_run, tmp_path, capsys, monkeypatch):
    from graphormer_urpe import cli

    root, _ = tiny_run
    out = tmp_path / "ens"
    args = train_args(root / "data.csv", root / "store", out, "--ensemble", "2", "--epochs", "2")
    assert cli.main(args) == 0
    cal = load_calibration(out)
    assert cal is not None and cal.difficulty == "distance" and cal.checkpoint is None
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test_coverage_90"] <= 1.0 and metrics["test_width_90"] > 0
    capsys.readouterr()
    smiles = ["CCO", "CCCCCCN", "CCCCCCCCCCCCCCCC"]
    args = ["predict", "--checkpoint", str(out), "--no-progress", "--workers", "0"]
    assert cli.main([*args, "--interval", "0.8", "--smiles", *smiles]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    t = "heavy_atoms"
    assert list(table.columns)[:5] == ["smiles", t, f"{t}_std", f"{t}_low", f"{t}_high"]
    # the half-width is q (1 - similarity + beta): wider far from the training molecules
    half = (table[f"{t}_high"] - table[f"{t}_low"]) / 2
    sim = _nearest_training_similarity(
        smiles, _training_smiles(out / "member-0", root / "data.csv")
    )
    want = cal.quantiles(0.8)[0] * (1 - sim + cal.beta[0])
    inside = table["domain"] == "in"  # the 16-carbon chain is longer than any: no interval
    assert inside.tolist() == [True, True, False] and half[~inside].isna().all()
    np.testing.assert_allclose(half[inside], want[inside], rtol=1e-3, atol=1e-4)
    # which difficulty tracks the error? Spearman on validation and test, against a plain
    # reference from the members' prediction files and an RDKit similarity search
    from scipy.stats import spearmanr

    train_smiles = _training_smiles(out / "member-0", root / "data.csv")
    for part in ("valid", "test"):
        tables = [pd.read_csv(out / f"member-{i}" / f"{part}_predictions.csv") for i in (0, 1)]
        pred = np.stack([x[f"pred_{t}"].to_numpy() for x in tables])
        error = np.abs(tables[0][f"true_{t}"].to_numpy() - pred.mean(0))
        distance = 1 - _nearest_training_similarity(tables[0]["smiles"], train_smiles)
        want_std, want_distance = spearmanr(error, pred.std(0))[0], spearmanr(error, distance)[0]
        assert metrics[f"{part}_spearman_error_std"] == pytest.approx(want_std, abs=0.02)
        assert metrics[f"{part}_spearman_error_distance"] == pytest.approx(want_distance, abs=0.02)
    # the benchmark of calibrators, from the same prediction files, finds the run's figures
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "scripts"))
    bench = importlib.import_module("bench_intervals").evaluate(out, 2)
    assert bench["distance"]["coverage"] == pytest.approx(metrics["test_coverage_90"])
    assert bench["distance"]["width"] == pytest.approx(metrics["test_width_90"], rel=1e-3)
    assert set(bench) == {"valid_spearman", "test_spearman", "absolute", "std", "distance"}
    for part in ("valid", "test"):
        for score in ("std", "distance"):
            want = metrics[f"{part}_spearman_error_{score}"]
            assert bench[f"{part}_spearman"][f"spearman_error_{score}"] == pytest.approx(want)


def _nearest_training_similarity(smiles, train_smiles) -> np.ndarray:
    """Tanimoto similarity of each molecule's nearest training molecule, RDKit written plainly
    (Morgan radius 2, 2048 bits)."""
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    train = [gen.GetFingerprint(Chem.MolFromSmiles(s)) for s in train_smiles]
    return np.array(
        [max(DataStructs.BulkTanimotoSimilarity(gen.GetFingerprint(Chem.MolFromSmiles(s)), train))
         for s in smiles]
    )  # fmt: skip


def _training_smiles(run, table) -> list[str]:
    """The training split's SMILES: the table's rows in neither prediction file."""
    held = set()
    for part in ("valid", "test"):
        held |= set(pd.read_csv(run / f"{part}_predictions.csv")["source_row"])
    smiles = pd.read_csv(table)["smiles"]
    return [s for i, s in enumerate(smiles) if i not in held]


def test_train_prints_its_test_coverage(tmp_path, capsys):
    from graphormer_urpe import cli

    smiles = ["C" * a + x for a in range(1, 13) for x in ("O", "N", "C(=O)", "")]
    heavy = [sum(ch.isalpha() for ch in s) for s in smiles]
    pd.DataFrame({"smiles": smiles, "heavy_atoms": heavy}).to_csv(tmp_path / "d.csv", index=False)
    capsys.readouterr()
    assert cli.main(train_args(tmp_path / "d.csv", tmp_path / "s", tmp_path / "run")) == 0
    err = capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    want = f"90% intervals: test coverage {metrics['test_coverage_90']:.3f}"
    assert want in err
    assert err.strip().splitlines()[-1].startswith("graphormer-urpe: the best checkpoint")
