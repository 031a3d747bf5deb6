"""``train --mol-features``, then ``predict`` and ``evaluate`` with its checkpoint: the
molecule features are recomputed with the run's normalisation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe import cli
from tests.helpers import heavy_atoms_csv, train_args


@pytest.mark.parametrize("kind", ["rdkit2d", "rdkit2d+morgan"])
def test_train_predict_and_evaluate_with_molecule_features(tmp_path, capsys, kind):
    table = heavy_atoms_csv(tmp_path / "mols.csv")
    out = tmp_path / "run"
    assert cli.main(train_args(table, tmp_path / "data", out, "--mol-features", kind)) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "config.json").read_text())
    width = 202 + (2048 if "morgan" in kind else 0)
    assert config["mol_features"] == kind and config["model"]["num_mol_features"] == width
    # predict recomputes the descriptors of new SMILES with the run's normalisation
    test = pd.read_csv(out / "test_predictions.csv")
    (tmp_path / "q.csv").write_text("smiles\n" + "\n".join(test["smiles"]) + "\n")
    args = ["predict", "--checkpoint", str(out / "best.pt"), "--input", str(tmp_path / "q.csv")]
    assert cli.main([*args, "--output", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    pred = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(pred["heavy_atoms"], test["pred_heavy_atoms"], atol=1e-5)
    # evaluate reads the checkpoint's normalisation and reproduces the run's test metric
    assert cli.main(["evaluate", "--checkpoint", str(out / "best.pt"), "--no-progress"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mae"] == pytest.approx(metrics["test_mae"], rel=1e-5)
