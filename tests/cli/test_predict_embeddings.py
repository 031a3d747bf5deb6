"""``predict --embeddings``: the array, its side files and the predictions in one pass, against
the plain reference (each molecule through the encoder alone); an unreadable SD record gets a
NaN row."""

from __future__ import annotations

import csv
import json

import numpy as np

from graphormer_urpe import cli
from graphormer_urpe.inference.engines.embeddings_io import side_paths
from tests.helpers import (
    BAD,
    BROKEN,
    EMBEDDING_HIDDEN,
    EMBEDDING_ROWS,
    VALID,
    embedding_reference,
    write_sdf,
)


def test_predict_command_writes_array_and_side_files(embedding_ckpt, tmp_path):
    smi = tmp_path / "in.smi"
    smi.write_text("".join(f"{s or 'C1CC'} mol{i}\n" for i, s in enumerate(EMBEDDING_ROWS)))
    out, emb = tmp_path / "pred.csv", tmp_path / "emb.npy"
    args = [
        "predict",
        "--checkpoint",
        str(embedding_ckpt),
        "--input",
        str(smi),
        "--output",
        str(out),
    ]
    args += ["--embeddings", str(emb), "--workers", "2", "--chunk-size", "4", "--device", "cpu"]
    assert cli.main([*args, "--no-progress"]) == 0
    smiles = [s or "C1CC" for s in EMBEDDING_ROWS]
    got = np.load(emb, mmap_mode="r")
    np.testing.assert_allclose(
        got, embedding_reference(embedding_ckpt, smiles), rtol=1e-4, atol=1e-5
    )
    meta_path, ids_path = side_paths(emb)
    meta = json.loads(meta_path.read_text())
    assert (
        meta["rows"] == len(EMBEDDING_ROWS)
        and meta["dim"] == EMBEDDING_HIDDEN == meta["hidden_dim"]
    )
    assert meta["members"] == 1 and meta["mol_features"] == 0
    assert meta["unreadable"] == sum(s in BAD for s in EMBEDDING_ROWS)
    with open(ids_path, newline="") as fh:
        ids = list(csv.DictReader(fh))
    assert [r["smiles"] for r in ids] == smiles
    assert [r["name"] for r in ids] == [f"mol{i}" for i in range(len(EMBEDDING_ROWS))]
    assert [bool(r["error"]) for r in ids] == np.isnan(got).any(axis=1).tolist()
    with open(out, newline="") as fh:  # the normal output is still written, row for row
        preds = list(csv.DictReader(fh))
    assert [r["smiles"] for r in preds] == smiles


def test_an_unreadable_sd_record_gets_a_nan_row(embedding_ckpt, tmp_path):

    sdf, emb = tmp_path / "in.sdf", tmp_path / "emb.npy"
    titles = write_sdf(sdf, VALID[:6])
    args = ["predict", "--checkpoint", str(embedding_ckpt), "--input", str(sdf), "--device", "cpu"]
    args += ["--output", str(tmp_path / "p.csv"), "--embeddings", str(emb), "--no-progress"]
    assert cli.main([*args, "--workers", "0"]) == 0
    got = np.load(emb)
    assert np.isnan(got).any(axis=1).tolist() == [i == BROKEN for i in range(6)]
    with open(side_paths(emb)[1], newline="") as fh:
        assert [r["name"] for r in csv.DictReader(fh)] == titles
