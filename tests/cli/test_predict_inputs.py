"""``predict`` end to end against the plain in-memory reference: every input format, the id
columns asked for, standard input and output, probabilities and logits, and a run
interrupted while reading that leaves a prefix of the output."""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.inference.engines import predict_io
from tests.helpers import BAD, MIXED, named_inputs, tiny_checkpoint
from tests.reference import predict_reference


@pytest.fixture(scope="module")
def ogb_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ogb") / "best.pt", "ogb")


@pytest.fixture(scope="module")
def binary_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("bin") / "best.pt", "ogb", "binary", seed=2)


def _expected_rows(ckpt: Path, smiles: list[str], batch_size: int) -> list[list[str]]:
    values, errors = predict_reference(ckpt, smiles, batch_size)
    return [
        [s, *(["", ""] if e else [f"{x:.6g}" for x in v.tolist()]), e and "ERR" or ""]
        for s, v, e in zip(smiles, values, errors, strict=True)
    ]


def _read_output(path_or_text: Path | str, names: list[str] | None = None) -> list[list[str]]:
    """The rows of a predict CSV as ``_expected_rows`` gives them, checking the domain columns
    and, where the input had names (one SMILES a line), that ``names`` are in order."""
    text = path_or_text.read_text() if isinstance(path_or_text, Path) else path_or_text
    rows = list(csv.reader(io.StringIO(text)))
    if names is not None:
        assert rows[0][1] == "name" and [r[1] for r in rows[1:]] == names
        rows = [[r[0], *r[2:]] for r in rows]
    assert rows[0] == ["smiles", "a", "b", "domain", "nearest_similarity", "error"]
    # this checkpoint records no training domain: "unknown" for every molecule read
    assert all(r[3:5] == (["", ""] if r[5] else ["unknown", ""]) for r in rows[1:])
    return [[*r[:3], r[-1] and "ERR"] for r in rows[1:]]


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "smi", "txt"])
def test_cli_predicts_every_input_format(ogb_ckpt, tmp_path, capsys, kind):
    path = named_inputs(tmp_path, MIXED)[kind]
    out = tmp_path / "pred.csv"
    args = ["predict", "--checkpoint", str(ogb_ckpt), "--input", str(path), "--output", str(out)]
    opts = ["--batch-size", "6", "--workers", "1", "--chunk-size", "8", "--no-progress"]
    assert cli.main([*args, *opts, "--device", "cpu", "--threads", "1"]) == 0
    # a .smi line's name follows its SMILES; .txt lines have none; a CSV's name column is kept
    names = {
        "smi": [f"mol {i}" if s else "" for i, s in enumerate(MIXED)],
        "txt": [""] * len(MIXED),
        "csv": [f"m{i}" for i in range(len(MIXED))],
        "csv.gz": [f"m{i}" for i in range(len(MIXED))],
    }
    assert _read_output(out, names.get(kind)) == _expected_rows(ogb_ckpt, MIXED, 6)
    err = capsys.readouterr().err
    bad = sum(s in BAD for s in MIXED)
    assert f"{len(MIXED) - bad} molecules predicted, {bad} could not be read" in err


def test_cli_keeps_the_id_columns_asked_for(ogb_ckpt, tmp_path, capsys):
    path = named_inputs(tmp_path, MIXED)["csv"]
    args = ["predict", "--checkpoint", str(ogb_ckpt), "--input", str(path), "--no-progress"]
    assert cli.main([*args, "--workers", "0", "--id-columns", "other", "name"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][:5] == ["smiles", "other", "name", "a", "b"]
    assert [r[1:3] for r in rows[1:]] == [[str(i), f"m{i}"] for i in range(len(MIXED))]
    assert [r[0] for r in rows[1:]] == MIXED  # input order, unreadable rows kept
    assert cli.main([*args, "--id-columns", "compound"]) == 2
    err = capsys.readouterr().err
    assert "no column 'compound'; columns: name, smiles, other" in err
    smi = named_inputs(tmp_path, MIXED)["smi"]
    assert cli.main([*args[:3], "--input", str(smi), "--id-columns", "other"]) == 2
    assert "only a 'name' id column" in capsys.readouterr().err
    # an id column with the name of an output column is refused before any work
    clash = tmp_path / "clash.csv"
    clash.write_text("smiles,a\nCCO,1\n")
    assert cli.main([*args[:3], "--input", str(clash), "--id-columns", "a"]) == 2
    assert "'a' has the name of an output column" in capsys.readouterr().err


def test_cli_reads_standard_input_and_writes_standard_output(ogb_ckpt, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{s}\n" for s in MIXED)))
    args = ["predict", "--checkpoint", str(ogb_ckpt), "--input", "-", "--no-progress"]
    assert cli.main([*args, "--batch-size", "4", "--workers", "0"]) == 0
    captured = capsys.readouterr()
    assert _read_output(captured.out, [""] * len(MIXED)) == _expected_rows(ogb_ckpt, MIXED, 4)
    assert "could not be read" in captured.err


def test_cli_smiles_and_binary_columns(binary_ckpt, tmp_path, capsys):
    args = ["predict", "--checkpoint", str(binary_ckpt), "--smiles", "CCO", "xx((", "C"]
    assert cli.main([*args, "--no-progress"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["smiles", "prob_a", "prob_b", "domain", "nearest_similarity", "error"]
    values, _ = predict_reference(binary_ckpt, ["CCO", "xx((", "C"], 256)
    assert rows[1][1:3] == [f"{x:.6g}" for x in torch.sigmoid(values[0]).tolist()]
    assert rows[2][1:3] == ["", ""] and rows[2][5]
    assert cli.main([*args, "--no-progress", "--logits"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][1] == "logit_a" and rows[3][1:3] == [f"{x:.6g}" for x in values[2].tolist()]


def test_interrupted_cli_run_leaves_a_prefix_of_the_output(ogb_ckpt, tmp_path, monkeypatch):

    path = named_inputs(tmp_path, MIXED)["smi"]
    full, part = tmp_path / "full.csv", tmp_path / "part.csv"
    args = ["predict", "--checkpoint", str(ogb_ckpt), "--input", str(path), "--no-progress"]
    opts = ["--batch-size", "3", "--workers", "1", "--chunk-size", "5"]
    assert cli.main([*args, *opts, "--output", str(full)]) == 0
    read = predict_io.read_named_smiles

    def failing_read(*a, **kw):
        yield from itertools.islice(read(*a, **kw), 17)
        raise KeyboardInterrupt  # Ctrl-C while reading row 17

    monkeypatch.setattr(predict_io, "read_named_smiles", failing_read)
    monkeypatch.setattr("graphormer_urpe.cli.sys.stderr", io.StringIO())
    assert cli.main([*args, *opts, "--output", str(part)]) == 130  # interrupted
    text = part.read_text()
    assert full.read_text().startswith(text) and text.endswith("\n")
    assert 1 < len(text.splitlines()) < len(MIXED)
