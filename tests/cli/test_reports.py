"""Reports that tell the truth: unreadable rows counted for every input form, messages that
name the real problem and leave nothing behind, run folders named after the data."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

from graphormer_urpe import cli
from tests.helpers import SMILES, TINY_MODEL

BAD = ["not_a_smiles((", "C1CC"]


def _write(path: Path, smiles: list[str]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms"])
        for s in smiles:
            w.writerow([s, sum(ch.isalpha() for ch in s)])
    return path


def _train(dataset: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "train", "--dataset", dataset, "--target-columns", "heavy_atoms", "--store-dir",
        str(tmp_path / "cache"), *TINY_MODEL, "--batch-size", "8", "--max-steps", "2",
        "--no-progress", "--threads", "1", *extra,
    ]  # fmt: skip


def test_unreadable_test_rows_of_three_csv_files_are_counted(tmp_path, caplog):
    train = _write(tmp_path / "train.csv", SMILES[:24])
    valid = _write(tmp_path / "valid.csv", SMILES[24:32])
    test = _write(tmp_path / "test.csv", [*SMILES[32:40], *BAD])
    out = tmp_path / "run"
    args = _train(f"csv:{train},{valid},{test}", tmp_path, "--out", str(out))
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["unreadable_test"] == 2 and m["unreadable_train"] == m["unreadable_valid"] == 0
    assert m["test_graphs"] == 8
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("best valid")]
    assert "over 8 test molecules (2 test rows unreadable)" in final[-1]


def test_a_folder_without_a_checkpoint_is_named_as_such(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["predict", "--checkpoint", str(empty), "--smiles", "CCO"]) == 2
    err = capsys.readouterr().err
    assert "holds no checkpoint" in err and "does not exist" not in err
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"")
    assert cli.main(["predict", "--checkpoint", str(run), "--smiles", "CCO"]) == 2
    assert f"give {run / 'best.pt'}" in capsys.readouterr().err
    missing = tmp_path / "missing.pt"
    assert cli.main(["predict", "--checkpoint", str(missing), "--smiles", "CCO"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_init_from_is_checked_before_any_store_is_built(tmp_path, capsys):
    data = _write(tmp_path / "mols.csv", SMILES)
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    out = tmp_path / "run"
    for source, words in ((empty, "holds no checkpoint"), (tmp_path / "nope.pt", "no such")):
        args = _train(f"csv:{data}", tmp_path, "--out", str(out), "--init-from", str(source))
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert "--init-from" in err and words in err
        assert not out.exists()  # no run folder left behind
        assert not (tmp_path / "cache").exists()  # and no store built
    text = " ".join(_help("train").split())
    assert "--init-from CHECKPOINT fine-tune: start from this checkpoint's weights: " in text
    assert "weights: 'pretrained' (the shipped" in text


def _help(command: str) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            cli.main([command, "--help"])
        except SystemExit:
            pass
    return buf.getvalue()


def test_run_folders_are_named_after_a_csvs_file(tmp_path, monkeypatch):
    data = _write(tmp_path / "my_mols.csv", SMILES)
    monkeypatch.chdir(tmp_path)
    assert cli.main(_train(f"csv:{data}", tmp_path)) == 0
    assert (tmp_path / "runs" / "my_mols-small-urpe" / "metrics.json").exists()
