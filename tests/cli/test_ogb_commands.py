"""The OGB sets on the command line, on fixtures in the official layouts (no downloads):
``train`` and ``predict`` on a binary ogbg-mol* set (BCE, ROC-AUC, calibrated probabilities),
``preprocess``, ``train``, ``evaluate`` and ``submit`` on a PCQM4Mv2 layout, and the new
commands' help."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from graphormer_urpe import cli
from graphormer_urpe.datasets import open_lsc
from tests.helpers import (
    PCQM_SMILES,
    v2_splits,
    write_lsc_layout,
    write_ogbg_layout,
)

BAD_TRAIN = "C1CC("  # RDKit cannot parse it


def _tiny_train(dataset: str, root: Path, out: Path, epochs: str, lr: str) -> list[str]:
    """``train`` arguments: a 1-layer model of width 16, batch 8, 2 warm-up steps, one thread."""
    return [
        "train",
        "--dataset",
        dataset,
        "--data-root",
        str(root),
        "--out",
        str(out),
        *("--num-layers", "1", "--hidden-dim", "16", "--ffn-dim", "16", "--num-heads", "2"),
        *("--batch-size", "8", "--epochs", epochs, "--warmup-steps", "2", "--lr", lr),
        *("--threads", "1", "--no-progress"),
    ]


def test_train_on_binary_ogbg_uses_bce_and_maximises_rocauc(tmp_path, capsys):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, size=(len(PCQM_SMILES), 12)).astype(float)
    labels[rng.random(labels.shape) < 0.3] = np.nan  # tox21 has missing labels
    labels[-12:, 0] = [0, 1] * 6  # both classes in valid and test
    write_ogbg_layout(tmp_path, "ogbg-moltox21", PCQM_SMILES, labels)
    out = tmp_path / "run"
    args = _tiny_train("ogbg-moltox21", tmp_path, out, epochs="3", lr="3e-3")
    assert cli.main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["loss"] == "bce" and metrics["task_type"] == "binary"
    assert metrics["higher_is_better"] is True and metrics["test_has_labels"] is True
    history = pd.read_csv(out / "history.csv")
    assert metrics["best_valid_rocauc"] == pytest.approx(history["valid_rocauc"].max())
    assert metrics["best_epoch"] == int(history["valid_rocauc"].idxmax())
    assert 0.0 <= metrics["test_rocauc"] <= 1.0 and metrics["baseline_valid_rocauc"] == 0.5

    # predict: probabilities by default, raw scores with --logits; the columns say which
    capsys.readouterr()
    smiles = ["CCO", "c1ccccc1O", "not_a_smiles(("]
    base = ["predict", "--checkpoint", str(out / "best.pt"), "--no-progress", "--smiles", *smiles]
    assert cli.main(base) == 0
    probs = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert cli.main([*base, "--logits"]) == 0
    logits = pd.read_csv(io.StringIO(capsys.readouterr().out))
    tasks = [f"task{i}" for i in range(12)]
    domain = ["domain", "nearest_similarity"]
    assert list(probs.columns) == ["smiles", *(f"prob_{t}" for t in tasks), *domain, "error"]
    assert list(logits.columns) == ["smiles", *(f"logit_{t}" for t in tasks), *domain, "error"]
    p = probs[[f"prob_{t}" for t in tasks]].to_numpy()[:2]
    z = logits[[f"logit_{t}" for t in tasks]].to_numpy()[:2]
    assert ((p > 0) & (p < 1)).all()
    # probabilities calibrated on the validation split: one temperature per task
    temperature = np.array(json.loads((out / "calibration.json").read_text())["temperature"])
    assert temperature.shape == (12,) and (temperature > 0).all()
    np.testing.assert_allclose(p, 1.0 / (1.0 + np.exp(-z / temperature)), rtol=1e-4, atol=1e-6)
    assert probs["error"].isna().tolist() == [True, True, False]
    assert metrics["test_ece"] >= 0 and metrics["test_ece_calibrated"] >= 0


def test_cli_preprocess_train_evaluate_submit(tmp_path, capsys):
    root = tmp_path / "ogb"
    write_lsc_layout(root, PCQM_SMILES, v2_splits(len(PCQM_SMILES)))
    args = ["preprocess", "--dataset", "pcqm4mv2", "--data-root", str(root), "--workers", "2"]
    assert cli.main([*args, "--chunk-size", "10", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["graphs"] == len(PCQM_SMILES) and report["chunks"] == 4 and report["workers"] == 2
    assert report["projected_store_bytes"] == pytest.approx(
        report["store_bytes"] / len(PCQM_SMILES) * 3_746_620, rel=1e-3
    )
    assert report["molecules_per_second"] > 0 and report["load_seconds"] >= 0

    out = tmp_path / "run"
    train = _tiny_train("pcqm4mv2", root, out, epochs="2", lr="1e-3")
    assert cli.main(train) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_has_labels"] is False and "test_mae" not in metrics
    assert "no labels" in metrics["test_note"] and metrics["baseline_test_mae"] is None
    assert metrics["best_valid_mae"] > 0 and metrics["baseline_valid_mae"] > 0
    capsys.readouterr()

    ckpt = str(out / "best.pt")
    assert cli.main(["evaluate", "--checkpoint", ckpt, "--split", "valid", "--no-progress"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mae"] == pytest.approx(metrics["best_valid_mae"], rel=1e-5)
    assert cli.main(["evaluate", "--checkpoint", ckpt, "--split", "test", "--no-progress"]) == 2
    assert "no targets" in capsys.readouterr().err

    sub = ["submit", "--checkpoint", ckpt, "--split", "test-dev", "--out", str(tmp_path / "s")]
    assert cli.main([*sub, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "147,037" in err and "--allow-partial" in err
    assert cli.main([*sub, "--allow-partial", "--no-progress"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["predictions"] == 3 and done["partial"] is True
    with np.load(tmp_path / "s" / "y_pred_pcqm4m-v2_test-dev.npz") as z:
        written = z["y_pred"]
    from graphormer_urpe.inference import load_model
    from graphormer_urpe.training.run import make_loader, predict

    lm = load_model(ckpt, "cpu")
    test_dev = open_lsc("pcqm4mv2", root).split("test-dev")
    pred, _ = predict(lm.model, make_loader(test_dev, lm.model.config, 2, False), lm.device)
    assert written.shape == (3,) and np.allclose(written, pred[:, 0].numpy(), atol=1e-6)


def test_submit_refuses_when_a_test_molecule_is_missing(tmp_path, capsys):
    root = tmp_path / "ogb"
    smiles = [*PCQM_SMILES[:20], BAD_TRAIN]
    write_lsc_layout(root, smiles, v2_splits(len(smiles)))
    out = tmp_path / "run"
    train = [
        "train",
        *("--dataset", "pcqm4mv2", "--data-root", str(root), "--out", str(out)),
        *("--num-layers", "1", "--hidden-dim", "8", "--ffn-dim", "8", "--num-heads", "2"),
        *("--batch-size", "8", "--epochs", "1", "--threads", "1", "--no-progress"),
    ]
    assert cli.main(train) == 0
    capsys.readouterr()
    code = cli.main(
        [
            *("submit", "--checkpoint", str(out / "best.pt"), "--split", "test-challenge"),
            *("--out", str(tmp_path / "s"), "--allow-partial", "--no-progress"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "could not be featurised (rows 20)" in err
    assert not (tmp_path / "s" / "y_pred_pcqm4m-v2_test-challenge.npz").exists()


def test_new_commands_document_every_flag():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("preprocess", "submit"):
        flags = [a for a in sub.choices[name]._actions if a.option_strings and a.dest != "help"]
        assert flags and all(a.help for a in flags), name
    train_help = sub.choices["train"].format_help()
    assert (
        "pcqm4mv2" in train_help and "ogbg-molhiv" in train_help and "pcqm4mv2-small" in train_help
    )
