"""Errors in a table's head come first: a column typo or a comma decimal in a CSV (or an SD
file's properties) is answered before torch, RDKit or featurisation are loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graphormer_urpe import cli
from graphormer_urpe.datasets.sources.table_check import check_table_head
from graphormer_urpe.datasets.store import records as store_records

ROOT = Path(__file__).resolve().parents[2]


def _csv(path: Path, rows: list[str]) -> Path:
    path.write_text("smiles,logS\n" + "".join(f"{r}\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--target-columns", "logs"], "column(s) ['logs'] not found; available columns"),
        (["--target-columns", "logS", "--smiles-column", "SMILES"], "['SMILES'] not found"),
        (["--target-columns", "logS"], "row 1 (line 3): target column 'logS' holds '5,48'"),
    ],
)
def test_header_errors_come_before_any_import_or_featurisation(tmp_path, flags, message):
    """A fresh process: the command answers in one line without importing torch or RDKit
    (so within a second or two on any machine, before any featurisation)."""
    table = _csv(tmp_path / "mols.csv", ["CCO,-0.77", '"c1ccccc1O","5,48"', "CCN,1.0"])
    argv = ["train", "--dataset", f"csv:{table}", *flags, "--out", str(tmp_path / "run")]
    code = (
        "import sys; from graphormer_urpe import cli; rc = cli.main(sys.argv[1:]); "
        "print(rc, *(m in sys.modules for m in ('torch', 'rdkit', 'pandas')))"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.stdout.split() == ["2", "False", "False", "False"], proc.stderr
    assert message in proc.stderr and not (tmp_path / "run").exists()


def test_the_header_check_runs_before_the_store_is_built(tmp_path, monkeypatch, capsys):
    table = _csv(tmp_path / "mols.csv", ["CCO,-0.77", 'CCN,"5,48"'])

    def never(*a, **kw):
        raise AssertionError("featurised before the header was checked")

    monkeypatch.setattr(store_records, "build_molecule_store", never)
    argv = ["train", "--dataset", f"csv:{table}", "--target-columns", "logS"]
    assert cli.main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert "row 1 (line 3)" in capsys.readouterr().err


def test_sd_properties_are_checked_from_the_first_records(tmp_path):
    block = "t{}\n  x\n\n  0  0  0  0  0  0  0  0  0  0999 V2000\nM  END\n> <pKi>\n{}\n\n$$$$\n"
    path = tmp_path / "a.sdf"
    path.write_text(block.format(0, "6.1") + block.format(1, "6,2"))
    with pytest.raises(ValueError, match="record 1: target column 'pKi' holds '6,2'"):
        check_table_head(f"sdf:{path}", None, ["pKi"])
    with pytest.raises(
        ValueError, match=r"\['pIC50'\] not found; available columns: \['name', 'pKi'\]"
    ):
        check_table_head(f"sdf:{path}", None, ["pIC50"])
    check_table_head(f"csv:{tmp_path / 'missing.csv'}", "smiles", ["y"])  # left to the read
