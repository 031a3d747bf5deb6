"""``train --ensemble K`` and ``predict`` with its folder: K seeds trained into one folder;
predictions are their mean and spread."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe import cli
from tests.helpers import train_args


def test_ensemble_trains_seeds_and_predicts_their_mean_and_std(table, tmp_path):
    out = tmp_path / "ens"
    args = train_args(table, tmp_path / "data", out, "--ensemble", "2", "--seed", "3")
    assert cli.main(args) == 0
    assert json.loads((out / "ensemble.json").read_text())["seeds"] == [3, 4]
    metrics = json.loads((out / "metrics.json").read_text())
    members = [json.loads((out / f"member-{i}" / "metrics.json").read_text()) for i in (0, 1)]
    assert [m["seed"] for m in members] == [3, 4]
    assert members[0]["test_mae"] != members[1]["test_mae"]  # different seeds, different runs
    # members selected on RMSE (CSV regression trains with MSE): the summary reports it
    assert metrics["member_test_rmse_mean"] == pytest.approx(
        np.mean([m["test_rmse"] for m in members])
    )
    assert [m["best_valid_rmse"] for m in metrics["members"]] == [
        m["best_valid_rmse"] for m in members
    ]
    # the ensemble's test MAE is the MAE of the members' mean test prediction
    tables = [pd.read_csv(out / f"member-{i}" / "test_predictions.csv") for i in (0, 1)]
    mean = (tables[0]["pred_heavy_atoms"] + tables[1]["pred_heavy_atoms"]) / 2
    want = (mean - tables[0]["true_heavy_atoms"]).abs().mean()
    assert metrics["test_mae"] == pytest.approx(want, rel=1e-4)
    # the folder has its own test_predictions.csv and the mean predictor's metric
    assert metrics["baseline_test_rmse"] == members[0]["baseline_test_rmse"] is not None
    assert metrics["baseline_valid_rmse"] == members[0]["baseline_valid_rmse"] is not None
    ens_test = pd.read_csv(out / "test_predictions.csv")
    per = ["true", "pred", "std", "low", "high"]
    assert list(ens_test.columns) == ["smiles", "source_row", *[f"{w}_heavy_atoms" for w in per]]
    assert ens_test["smiles"].tolist() == tables[0]["smiles"].tolist()
    np.testing.assert_allclose(ens_test["true_heavy_atoms"], tables[0]["true_heavy_atoms"])
    np.testing.assert_allclose(ens_test["pred_heavy_atoms"], mean, rtol=1e-4, atol=1e-5)
    spread = (tables[0]["pred_heavy_atoms"] - tables[1]["pred_heavy_atoms"]).abs() / 2
    np.testing.assert_allclose(ens_test["std_heavy_atoms"], spread, rtol=1e-3, atol=1e-5)
    low, high = ens_test["low_heavy_atoms"], ens_test["high_heavy_atoms"]
    assert (low <= ens_test["pred_heavy_atoms"]).all() and (
        high >= ens_test["pred_heavy_atoms"]
    ).all()
    inside = ((low <= ens_test["true_heavy_atoms"]) & (ens_test["true_heavy_atoms"] <= high)).mean()
    assert inside == pytest.approx(metrics["test_coverage_90"], abs=1e-6)

    smiles = ["CCO", "c1ccccc1O", "not a smiles", "CC(=O)Nc1ccc(O)cc1"]
    common = ["--smiles", *smiles, "--workers", "0", "--no-progress"]
    written = {}
    for name, ckpt in (
        ("ens", out),
        ("m0", out / "member-0" / "best.pt"),
        ("m1", out / "member-1" / "best.pt"),
    ):
        path = tmp_path / f"{name}.csv"
        assert cli.main(["predict", "--checkpoint", str(ckpt), *common, "--output", str(path)]) == 0
        written[name] = pd.read_csv(path)
    ens, m0, m1 = written["ens"], written["m0"], written["m1"]
    domain = ["domain", "nearest_similarity"]
    assert list(ens.columns) == ["smiles", "heavy_atoms", "heavy_atoms_std", *domain, "error"]
    assert list(m0.columns) == ["smiles", "heavy_atoms", *domain, "error"]
    a, b = m0["heavy_atoms"].to_numpy(), m1["heavy_atoms"].to_numpy()
    np.testing.assert_allclose(ens["heavy_atoms"], (a + b) / 2, rtol=1e-5)
    np.testing.assert_allclose(ens["heavy_atoms_std"], np.abs(a - b) / 2, rtol=1e-4, atol=1e-5)
    assert ens["heavy_atoms"].isna().tolist() == [False, False, True, False]
    assert "cannot parse" in ens["error"][2]
