"""``train --dataset sdf:FILE`` and ``predict --input FILE.sdf`` end to end."""

from __future__ import annotations

import csv
import json
import logging
import shlex

from rdkit import Chem

from graphormer_urpe import cli
from tests.helpers import BROKEN, SMILES, TINY_MODEL, write_sdf

VALID = [s for s in SMILES if Chem.MolFromSmiles(s) is not None]


def test_train_and_predict_on_an_sd_file(tmp_path, capsys, monkeypatch, caplog):
    """sdf:FILE.sdf.gz trains on the SD property; the unreadable record is counted like an
    unreadable SMILES; predict --input FILE.sdf writes one row per record, the title in
    name, the reason in error."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    path = tmp_path / "ligands.sdf.gz"
    titles = write_sdf(path, VALID)
    args = ["train", "--dataset", f"sdf:{path}", "--target-columns", "pIC50", *TINY_MODEL]
    args += ["--batch-size", "8", "--epochs", "1", "--no-progress", "--threads", "1"]
    assert cli.main(args) == 0
    out = tmp_path / "runs" / "ligands-small-urpe"
    metrics = json.loads((out / "metrics.json").read_text())
    meta_rows = metrics["train_graphs"] + metrics["valid_graphs"] + metrics["test_graphs"]
    assert meta_rows == len(VALID) - 1
    assert metrics["dataset"] == f"sdf:{path}"  # an SD run names itself so, in its logs too
    assert f"sdf:{path}" in caplog.text and f"csv:{path}" not in caplog.text
    last = capsys.readouterr().err.strip().splitlines()[-1]
    command = shlex.split(last.split("predict with: ")[1])
    assert command[command.index("--input") + 1] == str(path)
    assert cli.main([*command[1:], "--workers", "0", "--no-progress"]) == 0
    err = capsys.readouterr().err
    with open(tmp_path / "pred.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["name"] for r in rows] == titles
    assert "valence" in rows[BROKEN]["error"].lower() and rows[BROKEN]["pIC50"] == ""
    assert all(r["error"] == "" and r["pIC50"] != "" for i, r in enumerate(rows) if i != BROKEN)
    assert f"{len(VALID) - 1} molecules predicted, 1 could not be read" in err
