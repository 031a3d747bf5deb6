"""``predict`` end to end with the applicability domain: each row's ``domain`` and
``nearest_similarity`` cells and the summary line, for a run's checkpoint, an older one
without the record, and an ensemble."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.datasets.domain import DomainRecord, record_of_smiles
from graphormer_urpe.inference import iter_predictions, load_model
from tests.helpers import (
    DRUGS_HELD_OUT,
    DRUGS_TRAIN,
    TINY_MODEL,
    max_atoms,
    reference_nearest,
)

SALT = "[Na+].[Cl-]"
METAL = "[Fe+2]"
CHAIN = "C" * 400
PREDICT_INPUT = [DRUGS_TRAIN[3], DRUGS_HELD_OUT[0], SALT, "not a smiles((", METAL, CHAIN]


def _train(table: Path, root: Path, out: Path, *extra: str) -> None:
    args = ["train", "--dataset", f"csv:{table}", "--data-root", str(root), "--out", str(out)]
    args += ["--target-columns", "y", "--split-column", "split", *TINY_MODEL]
    args += ["--batch-size", "8", "--epochs", "2", "--warmup-steps", "2", "--lr", "1e-3"]
    assert cli.main([*args, "--no-progress", "--threads", "1", *extra]) == 0


@pytest.fixture(scope="module")
def drug_table(tmp_path_factory) -> Path:
    """The drugs with a target, the training ones in the training split."""
    path = tmp_path_factory.mktemp("drugs") / "drugs.csv"
    held_out = ["valid" if k % 2 else "test" for k in range(len(DRUGS_HELD_OUT))]
    splits = ["train"] * len(DRUGS_TRAIN) + held_out
    pairs = zip(DRUGS_TRAIN + DRUGS_HELD_OUT, splits, strict=True)
    rows = [[s, len(s) / 10, split] for s, split in pairs]
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([["smiles", "y", "split"], *rows])
    return path


@pytest.fixture(scope="module")
def drug_run(drug_table, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("drug-run")
    _train(drug_table, base / "data", base / "run")
    return base / "run"


def _predict(ckpt: Path, tmp_path: Path, capsys, *extra: str) -> tuple[list[dict], str]:
    table = tmp_path / "in.csv"
    table.write_text("smiles\n" + "".join(f"{s}\n" for s in PREDICT_INPUT))
    out = tmp_path / "out.csv"
    args = ["predict", "--checkpoint", str(ckpt), "--input", str(table), "--output", str(out)]
    args += ["--workers", "1", "--chunk-size", "2", "--no-progress", *extra]
    capsys.readouterr()
    assert cli.main(args) == 0
    with open(out) as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames is not None
        assert reader.fieldnames[-3:] == ["domain", "nearest_similarity", "error"]
        rows = list(reader)
    return rows, capsys.readouterr().err


def test_predict_flags_each_row(drug_run, tmp_path, capsys):
    rows, err = _predict(drug_run / "best.pt", tmp_path, capsys)
    assert [r["smiles"] for r in rows] == PREDICT_INPUT
    top = max_atoms(DRUGS_TRAIN)
    assert [r["domain"] for r in rows] == [
        "in",
        "in",
        "out: element Na; charge [Cl-]; fragments 2 > 1",
        "",
        "out: element Fe",
        f"out: atoms 400 > {top}",
    ]
    sims = [r["nearest_similarity"] for r in rows]
    assert sims[0] == "1.000" and sims[3] == ""
    want = reference_nearest(DRUGS_TRAIN, [PREDICT_INPUT[k] for k in (1, 2, 4, 5)])
    np.testing.assert_allclose([float(sims[k]) for k in (1, 2, 4, 5)], want, atol=5e-4)
    assert (
        rows[3]["error"]
        and rows[3]["y"] == ""
        and all(r["y"] for i, r in enumerate(rows) if i != 3)
    )
    assert "5 molecules predicted, 1 could not be read, 3 out of the training domain" in err

    rows_off, _ = _predict(drug_run / "best.pt", tmp_path, capsys, "--no-similarity")
    assert [r["nearest_similarity"] for r in rows_off] == [""] * len(rows)
    assert [r["domain"] for r in rows_off] == [r["domain"] for r in rows]
    assert [r["y"] for r in rows_off] == [r["y"] for r in rows]


def test_the_checkpoint_records_the_training_split(drug_run):
    ckpt = torch.load(drug_run / "best.pt", weights_only=True)
    rec = DomainRecord.from_dict(ckpt["domain"])
    assert ckpt["domain"]["checks"] == list(rec.checks) and "similarity" in rec.checks
    assert rec.molecules == len(DRUGS_TRAIN) and rec.max_atoms == max_atoms(DRUGS_TRAIN)
    assert rec.fingerprints is not None and len(rec.fingerprints) == len(DRUGS_TRAIN)
    assert np.array_equal(rec.fingerprints, record_of_smiles(DRUGS_TRAIN).fingerprints)
    lm = load_model(drug_run / "best.pt", "cpu")
    assert lm.domain is not None and np.array_equal(lm.domain.species, rec.species)
    # for library users: each Prediction carries its molecule's facts
    preds = list(iter_predictions(lm, PREDICT_INPUT, workers=0))
    assert [p.domain is None for p in preds] == [False, False, False, True, False, False]
    assert preds[2].domain.reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")
    assert preds[0].domain.in_domain and preds[0].domain.nearest_similarity == 1.0
    assert preds[5].domain.atoms == 400 and preds[2].domain.fragments == 2


def test_an_older_checkpoint_without_the_record_still_predicts(drug_run, tmp_path, capsys):
    ckpt = torch.load(drug_run / "best.pt", weights_only=True)
    del ckpt["domain"]
    old = tmp_path / "old.pt"
    torch.save(ckpt, old)
    rows, err = _predict(old, tmp_path, capsys)
    new, _ = _predict(drug_run / "best.pt", tmp_path, capsys)
    assert [r["domain"] for r in rows] == ["unknown"] * 3 + [""] + ["unknown"] * 2
    assert [r["nearest_similarity"] for r in rows] == [""] * len(rows)
    assert [r["y"] for r in rows] == [r["y"] for r in new]  # the predictions are unchanged
    assert "training domain unknown" in err and "out of the training domain" not in err
    assert load_model(old, "cpu").domain is None


def test_an_ensemble_uses_its_members_record(drug_table, tmp_path, capsys):
    out = tmp_path / "ens"
    _train(drug_table, tmp_path / "data", out, "--ensemble", "2")
    records = [
        torch.load(out / f"member-{i}" / "best.pt", weights_only=True)["domain"] for i in (0, 1)
    ]
    assert records[0]["species"] == records[1]["species"]
    assert torch.equal(records[0]["fingerprints"]["packed"], records[1]["fingerprints"]["packed"])
    rows, err = _predict(out, tmp_path, capsys)
    member, _ = _predict(out / "member-0" / "best.pt", tmp_path, capsys)
    assert "y_std" in rows[0]
    assert [r["domain"] for r in rows] == [r["domain"] for r in member]
    assert [r["nearest_similarity"] for r in rows] == [r["nearest_similarity"] for r in member]
    assert rows[2]["domain"].startswith("out: element Na") and "3 out of the training" in err
