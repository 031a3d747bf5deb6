"""``graphormer-urpe convert`` on Hugging Face weights, then ``evaluate``, ``predict`` and
``train --init-from`` with the checkpoint it wrote (the oracle: Hugging Face's model)."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.inference import evaluate_checkpoint
from tests.helpers import (
    PCQM_SMILES,
    batch_of,
    hf_config,
    hf_model,
    hf_predict,
    v2_splits,
    write_lsc_layout,
)

transformers = pytest.importorskip("transformers")


def test_cli_convert_evaluate_predict_and_fine_tune(tmp_path, capsys):
    root = tmp_path / "ogb"
    write_lsc_layout(root, PCQM_SMILES, v2_splits(len(PCQM_SMILES)))
    prep = ["preprocess", "--dataset", "pcqm4mv2", "--data-root", str(root), "--no-progress"]
    assert cli.main(prep) == 0
    capsys.readouterr()
    config = hf_config("zinc-slim", 2, False, 5, 1, encoder_normalize_before=True)
    hf = hf_model(config, seed=6)
    with torch.no_grad():  # near the fixture's gaps, so that the MAE is informative
        hf.classifier.lm_output_learned_bias.fill_(4.0)
    hf.save_pretrained(tmp_path / "hf")
    ckpt = tmp_path / "model.pt"
    assert (
        cli.main(["convert", str(tmp_path / "hf"), "--out", str(ckpt), "--attention", "urpe"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "hf" and report["attention"] == "urpe"

    evaluated = evaluate_checkpoint(ckpt, "valid", str(root), "cpu", progress=False)
    out = tmp_path / "run"
    train = [
        *("train", "--dataset", "pcqm4mv2", "--data-root", str(root), "--out", str(out)),
        *("--init-from", str(ckpt), "--attention", "urpe", "--max-steps", "2"),
        *("--batch-size", "8", "--threads", "1", "--no-progress"),
    ]
    assert cli.main(train) == 0
    metrics = json.loads(capsys.readouterr().out)
    rows = list(csv.DictReader(io.StringIO((out / "history.csv").read_text())))
    assert rows[0]["epoch"] == "-1" and rows[0]["step"] == "0"
    assert float(rows[0]["valid_mae"]) == pytest.approx(evaluated["mae"], rel=1e-6)
    assert metrics["init_valid_mae"] == pytest.approx(evaluated["mae"], rel=1e-6)
    assert metrics["steps"] == 2 and metrics["best_valid_mae"] <= metrics["init_valid_mae"]

    smi = PCQM_SMILES[:3]
    assert cli.main(["predict", "--checkpoint", str(ckpt), "--smiles", *smi, "--no-progress"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    got = torch.tensor([float(r["homolumogap"]) for r in table])
    want = hf_predict(hf, batch_of(smi, 5))[:, 0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    (tmp_path / "mols.csv").write_text("smiles\n" + "\n".join(smi) + "\n")
    pred = ["predict", "--checkpoint", str(ckpt), "--input", str(tmp_path / "mols.csv")]
    assert cli.main([*pred, "--output", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    table = list(csv.DictReader(io.StringIO((tmp_path / "p.csv").read_text())))
    torch.testing.assert_close(
        torch.tensor([float(r["homolumogap"]) for r in table]), got, atol=0, rtol=0
    )
