"""Calibrated intervals and probabilities: conformal coverage on synthetic data with known
noise, against plain references; temperature scaling and ECE; the CLI end to end."""

from __future__ import annotations

import importlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from graphormer_urpe.inference.intervals.calibration import (
    Calibration,
    calibration_report,
    expected_calibration_error,
    fit_calibration,
    load_calibration,
)
from tests.helpers import train_args


def _reference_quantile(scores: np.ndarray, level: float) -> float:
    """The ⌈(n + 1) level⌉-th smallest score, written plainly."""
    s = np.sort(scores)
    k = math.ceil((len(s) + 1) * level - 1e-9)
    return math.inf if k > len(s) else float(s[k - 1])


def test_single_model_intervals_match_reference_and_cover():
    gen = np.random.default_rng(0)
    sigma = 0.5
    n_cal, n_test = 999, 20000
    x = gen.normal(size=n_cal + n_test)
    y = x + gen.normal(scale=sigma, size=x.shape)  # the model predicts x: noise sigma
    pred = torch.from_numpy(x).reshape(1, -1, 1)
    target = torch.from_numpy(y).reshape(-1, 1)
    cal = fit_calibration(pred[:, :n_cal], target[:n_cal], "regression", ["y"])
    assert not cal.normalized
    for level in (0.8, 0.9, 0.95):
        q = _reference_quantile(np.abs(y[:n_cal] - x[:n_cal]), level)
        assert cal.quantiles(level)[0] == pytest.approx(q)
        # the gaussian's own half-width, which the conformal one estimates
        z = {0.8: 1.2816, 0.9: 1.6449, 0.95: 1.9600}[level]
        assert q == pytest.approx(z * sigma, rel=0.1)
        low, high = cal.interval(x[n_cal:, None], None, level)
        inside = ((low[:, 0] <= y[n_cal:]) & (y[n_cal:] <= high[:, 0])).mean()
        assert abs(inside - level) < 0.02
    report = calibration_report(cal, pred[:, n_cal:], target[n_cal:])
    assert abs(report["coverage_90"] - 0.9) < 0.02
    assert report["width_90"] == pytest.approx(2 * cal.quantiles(0.9)[0])


def test_ensemble_intervals_adapt_to_heteroscedastic_noise():
    """Members that disagree where the noise is large: normalised intervals widen there and
    keep their coverage in both halves, where absolute ones over- and under-cover."""
    gen = np.random.default_rng(1)
    n, k = 8000, 5
    noise = np.where(np.arange(n) % 2 == 0, 0.2, 1.0)  # two noise levels, alternating
    truth = gen.normal(size=n)
    y = truth + gen.normal(size=n) * noise
    members = truth + gen.normal(size=(k, n)) * noise  # spread ∝ noise
    z, target = torch.from_numpy(members)[..., None], torch.from_numpy(y)[:, None]
    half = n // 2
    cal = fit_calibration(z[:, :half], target[:half], "regression", ["y"], checkpoint=None)
    plain = fit_calibration(z[:, :half].mean(0, keepdim=True), target[:half], "regression", ["y"])
    assert cal.normalized
    mean, std = members.mean(0)[half:, None], members.std(0)[half:, None]
    test_y, quiet = y[half:], noise[half:] == 0.2
    for c, adapts in ((cal, True), (plain, False)):
        low, high = c.interval(mean, std, 0.9)
        inside = (low[:, 0] <= test_y) & (test_y <= high[:, 0])
        width = (high - low)[:, 0]
        if adapts:
            assert width[~quiet].mean() > 2.5 * width[quiet].mean()
            assert abs(inside[quiet].mean() - 0.9) < 0.04
            assert abs(inside[~quiet].mean() - 0.9) < 0.04
        else:
            assert width.std() < 1e-9
            assert inside[quiet].mean() > 0.97 and inside[~quiet].mean() < 0.85
    # the scores are the residuals over std + beta, sorted
    ref = np.abs(y[:half] - members[:, :half].mean(0)) / (members[:, :half].std(0) + cal.beta[0])
    np.testing.assert_allclose(cal.scores[0], np.sort(ref))


def test_distance_intervals_widen_with_distance_and_hold_under_shift():
    """Errors that grow with the distance to the training set: intervals scaled by the
    distance keep their coverage on molecules farther away than the calibration ones (as new
    scaffolds are), where one half-width for all under-covers them."""
    gen = np.random.default_rng(3)
    n = 6000
    d_cal = gen.uniform(0.05, 0.95, n)  # the calibration molecules' distances
    d_new = gen.uniform(0.75, 0.95, n)  # new molecules: farther on average
    # the model says 0; its error grows with the distance (beta: a tenth of the median, 0.05)
    y_cal, y_new = gen.normal(size=n) * (d_cal + 0.05), gen.normal(size=n) * (d_new + 0.05)
    z, target = torch.zeros(1, n, 1, dtype=torch.float64), torch.from_numpy(y_cal)[:, None]
    cal = fit_calibration(z, target, "regression", ["y"], similarity=1 - d_cal)
    plain = fit_calibration(z, target, "regression", ["y"], difficulty="absolute")
    assert cal.difficulty == "distance" and cal.needs_similarity and not plain.needs_similarity
    beta = 0.1 * np.median(d_cal)
    assert cal.beta == [pytest.approx(beta)]
    np.testing.assert_allclose(cal.scores[0], np.sort(np.abs(y_cal) / (d_cal + beta)))
    zeros = np.zeros((n, 1))
    low, high = cal.interval(zeros, None, 0.9, 1 - d_new)
    np.testing.assert_allclose(high[:, 0], cal.quantiles(0.9)[0] * (d_new + beta))
    assert abs(((low[:, 0] <= y_new) & (y_new <= high[:, 0])).mean() - 0.9) < 0.02
    low_abs, high_abs = plain.interval(zeros, None, 0.9)
    assert ((low_abs[:, 0] <= y_new) & (y_new <= high_abs[:, 0])).mean() < 0.8
    # one molecule at a time (predict's rows): one similarity, [T] values
    one_low, one_high = cal.interval(np.zeros(1), None, 0.9, float(1 - d_new[0]))
    assert one_high[0] == pytest.approx(cal.quantiles(0.9)[0] * (d_new[0] + beta))
    assert one_low[0] == pytest.approx(-one_high[0])
    report = calibration_report(cal, z, target, similarity=1 - d_cal)
    rho = np.corrcoef(np.argsort(np.argsort(np.abs(y_cal))), np.argsort(np.argsort(d_cal)))[0, 1]
    assert report["spearman_error_distance"] == pytest.approx(rho, abs=1e-6)
    with pytest.raises(ValueError, match="nearest training similarity"):
        cal.interval(zeros, None, 0.9)


def test_default_difficulty_and_older_calibrators():
    from graphormer_urpe.inference.intervals.calibration import default_difficulty

    known = np.array([0.5, np.nan])
    assert default_difficulty(1, known) == default_difficulty(5, known) == "distance"
    assert default_difficulty(5, None) == default_difficulty(5, np.full(2, np.nan)) == "std"
    assert default_difficulty(1, None) == "absolute"
    # a calibrator written before difficulties were named reads as it was fitted
    old = {"task_type": "regression", "target_names": ["y"], "scores": [[0.5, 1.0]]}
    assert Calibration.from_dict({**old, "method": "normalized", "beta": [0.1]}).difficulty == "std"
    assert Calibration.from_dict({**old, "method": "absolute", "beta": None}).difficulty == (
        "absolute"
    )


def test_missing_targets_and_round_trip(tmp_path):
    z = torch.tensor([[[1.0, 2.0], [2.0, float("nan")], [3.0, 1.0]]])
    y = torch.tensor([[1.5, 2.0], [1.0, float("nan")], [3.0, float("nan")]])
    cal = fit_calibration(z, y, "regression", ["a", "b"])
    assert [len(s) for s in cal.scores] == [3, 1]
    cal.save(tmp_path / "c.json")
    back = Calibration.from_dict(json.loads((tmp_path / "c.json").read_text()))
    assert back.target_names == ["a", "b"]
    np.testing.assert_array_equal(back.scores[0], [0.0, 0.5, 1.0])
    assert math.isinf(back.quantiles(0.9)[1])  # one score: too few for 90%


def _reference_ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        m = (p >= lo) & ((p < hi) if b < bins - 1 else (p <= hi))
        if m.any():
            total += m.sum() / len(p) * abs(p[m].mean() - y[m].mean())
    return total


def test_temperature_scaling_lowers_ece():
    gen = np.random.default_rng(2)
    n = 6000
    true_logit = gen.normal(scale=2.0, size=n)
    y = (gen.random(n) < 1 / (1 + np.exp(-true_logit))).astype(float)
    over = 3.0 * true_logit  # an overconfident model: temperature 3 undoes it
    assert expected_calibration_error(1 / (1 + np.exp(-over)), y) == pytest.approx(
        _reference_ece(1 / (1 + np.exp(-over)), y)
    )
    z, target = torch.from_numpy(over).reshape(1, -1, 1), torch.from_numpy(y).reshape(-1, 1)
    cal = fit_calibration(z[:, : n // 2], target[: n // 2], "binary", ["t"])
    assert cal.temperature[0] == pytest.approx(3.0, rel=0.15)
    report = calibration_report(cal, z[:, n // 2 :], target[n // 2 :])
    assert report["ece_calibrated"] < 0.03 < report["ece"]
    p = cal.probabilities(z[:, n // 2 :]).numpy()[:, 0]
    assert report["ece_calibrated"] == pytest.approx(_reference_ece(p, y[n // 2 :]))


def test_temperature_never_sharpens_on_the_split_that_chose_the_checkpoint():
    gen = np.random.default_rng(3)
    n = 4000
    true_logit = gen.normal(scale=2.0, size=n)
    y = torch.from_numpy((gen.random(n) < 1 / (1 + np.exp(-true_logit))).astype(float))
    target = y.reshape(-1, 1)
    for scale, free, kept in ((0.4, 0.4, 1.0), (2.5, 2.5, 2.5)):  # under-, over-confident
        z = torch.from_numpy(scale * true_logit).reshape(1, -1, 1)
        anywhere = fit_calibration(z, target, "binary", ["t"]).temperature[0]
        chosen = fit_calibration(z, target, "binary", ["t"], chose_checkpoint=True)
        assert anywhere == pytest.approx(free, rel=0.15)
        assert chosen.temperature[0] == pytest.approx(kept, rel=0.15)
        assert chosen.temperature[0] >= 1.0
    # the bound itself, not a point a hair inside it, when sharpening would have been best
    z = torch.from_numpy(0.4 * true_logit).reshape(1, -1, 1)
    assert fit_calibration(z, target, "binary", ["t"], chose_checkpoint=True).temperature == [1.0]


# ---------------------------------------------------------------------------------------
# the command line: train, predict --interval, an uncalibrated checkpoint, calibrate
# ---------------------------------------------------------------------------------------


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


def test_train_closing_lines_state_test_coverage_and_warn_when_far_from_the_level():
    from graphormer_urpe.inference.intervals.calibration import coverage_lines, coverage_tolerance

    held = {"test_coverage_90": 0.885, "test_width_90": 1.234, "test_graphs": 100}
    (line,) = coverage_lines(held)
    assert line.startswith("90% intervals: test coverage 0.885, mean width 1.23 (100 test")
    missed = {**held, "test_coverage_90": 0.66}
    lines = coverage_lines(missed)
    assert len(lines) == 2 and lines[1].startswith("warning: test coverage 0.660 is far below")
    assert coverage_lines({**held, "test_coverage_90": 1.0})[1].count("far above") == 1
    assert coverage_tolerance(0.9, 100) == pytest.approx(0.06)  # two standard errors
    assert coverage_tolerance(0.9, 10_000) == 0.05  # never below the slack
    assert coverage_lines({"test_rmse": 1.0}) == []  # no intervals: nothing said


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
