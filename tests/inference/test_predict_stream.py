"""Streaming prediction against a plain in-memory reference, bit for bit.

The reference featurises each molecule with ``featurize_smiles`` + ``GraphormerFeatures``,
cuts the valid molecules into batches of ``batch_size`` consecutive ones in input order, and
runs the model on each collated batch. The stream must give exactly those numbers, whatever
the worker count and chunk size, with every invalid row in its place with its reason.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
from pathlib import Path

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.inference import iter_predictions, load_model, predict_smiles, read_smiles
from graphormer_urpe.inference.engines import predict_io, stream
from graphormer_urpe.inference.engines.predict_io import Prediction, write_predictions_csv
from graphormer_urpe.inference.engines.stream import default_threads
from tests.helpers import BAD, MIXED, SALT, SELENIUM, VALID, tiny_checkpoint
from tests.reference import predict_reference


@pytest.fixture(scope="module")
def ogb_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ogb") / "best.pt", "ogb")


@pytest.fixture(scope="module")
def zinc_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("zinc") / "best.pt", "zinc", seed=1)


@pytest.fixture(scope="module")
def binary_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("bin") / "best.pt", "ogb", "binary", seed=2)


def _check(results: list[Prediction], smiles: list[str], ref) -> None:
    values, errors = ref
    assert [p.index for p in results] == list(range(len(smiles)))
    assert [p.smiles for p in results] == smiles
    for p, v, e in zip(results, values, errors, strict=True):
        if e is None:
            assert p.error is None and p.values is not None
            assert p.values.dtype == torch.float32 and torch.equal(p.values, v), p.smiles
        else:
            assert p.values is None and p.error, p.smiles


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 1000])
def test_stream_equals_in_memory_reference_bit_for_bit(ogb_ckpt, workers, chunk_size):
    ref = predict_reference(ogb_ckpt, MIXED, batch_size=5)
    loaded = load_model(ogb_ckpt, "cpu")
    results = list(
        iter_predictions(loaded, iter(MIXED), batch_size=5, workers=workers, chunk_size=chunk_size)
    )
    _check(results, MIXED, ref)
    bad = {p.smiles: p.error for p in results if p.error}
    assert set(bad) == set(BAD)
    assert "not_a_smiles((" in bad["not_a_smiles(("] and "empty" in bad[""]


@pytest.mark.parametrize("workers,chunk_size", [(0, 3), (2, 5)])
def test_zinc_featurizer_unknown_atom_types_keep_their_place(zinc_ckpt, workers, chunk_size):
    ref = predict_reference(zinc_ckpt, MIXED, batch_size=4)
    results = list(
        iter_predictions(zinc_ckpt, MIXED, batch_size=4, workers=workers, chunk_size=chunk_size)
    )
    _check(results, MIXED, ref)
    bad = {p.smiles: p.error for p in results if p.error}
    assert set(bad) == {*BAD, SALT, SELENIUM}
    assert "'Se'" in bad[SELENIUM] and "ZINC" in bad[SELENIUM]


def test_batches_do_not_depend_on_chunks(ogb_ckpt):
    """A batch of valid molecules spans chunk boundaries and invalid rows."""
    ref = predict_reference(ogb_ckpt, MIXED, batch_size=2)  # windows of 16 valid molecules
    for chunk_size in (2, 9):
        results = list(iter_predictions(ogb_ckpt, MIXED, batch_size=2, chunk_size=chunk_size))
        _check(results, MIXED, ref)


def test_predict_smiles_keeps_its_contract(ogb_ckpt):
    values, errors = predict_reference(ogb_ckpt, MIXED, batch_size=256)
    pred, errs = predict_smiles(ogb_ckpt, MIXED, "cpu", progress=False)
    assert pred.shape == (len(MIXED), 2) and len(errs) == len(MIXED)
    for row, v, e, got in zip(pred, values, errors, errs, strict=True):
        assert (got is None) == (e is None)
        if e is None:
            assert torch.equal(row, v)
        else:
            assert all(math.isnan(x) for x in row.tolist())


def test_input_is_read_lazily(ogb_ckpt):
    """An endless input works: only a bounded number of chunks is read ahead."""
    read = 0

    def endless():
        nonlocal read
        for smi in itertools.cycle(VALID):
            read += 1
            yield smi

    results = iter_predictions(ogb_ckpt, endless(), batch_size=4, workers=2, chunk_size=10)
    got = list(itertools.islice(results, 50))
    assert [p.index for p in got] == list(range(50))
    # 50 rows out; at most 2 x workers chunks in flight, one being decoded, one batch pending
    assert read <= 50 + (2 * 2 + 1) * 10 + 4
    results.close()


def test_model_threads_leave_the_workers_their_cores():
    assert default_threads(10**6) == 1
    assert default_threads(0) >= default_threads(1) >= 1


# --------------------------------------------------------------------------------------
# Input formats and the command line
# --------------------------------------------------------------------------------------


def _write_inputs(folder: Path, smiles: list[str]) -> dict[str, Path]:
    paths = {}
    table = io.StringIO()
    w = csv.writer(table, lineterminator="\n")
    w.writerow(["name", "smiles", "other"])
    for i, s in enumerate(smiles):
        w.writerow([f"m{i}", s, i])
    paths["csv"] = folder / "in.csv"
    paths["csv"].write_text(table.getvalue())
    paths["csv.gz"] = folder / "in.csv.gz"
    with gzip.open(paths["csv.gz"], "wt") as fh:
        fh.write(table.getvalue())
    paths["smi"] = folder / "in.smi"
    # a name may follow the SMILES; an empty SMILES is a blank line
    paths["smi"].write_text("".join(f"{s}\tmol {i}\n" if s else "\n" for i, s in enumerate(smiles)))
    paths["txt"] = folder / "in.txt"
    paths["txt"].write_text("smiles\n" + "".join(f"{s}\n" for s in smiles))
    return paths


def test_read_smiles_every_format(tmp_path):
    smiles = ["CCO", "", "c1ccccc1", "xx(("]
    for kind, path in _write_inputs(tmp_path, smiles).items():
        assert list(read_smiles(path)) == smiles, kind
    with pytest.raises(ValueError, match="no column 'smi'"):
        list(read_smiles(tmp_path / "in.csv", "smi"))
    with pytest.raises(ValueError, match="an SD file holds records"):
        list(read_smiles(tmp_path / "in.sdf"))  # not the contradiction "unknown ... .sdf"
    with pytest.raises(ValueError, match="unknown input format"):
        list(read_smiles(tmp_path / "in.xyz"))
    lines = io.StringIO("CCO name\nc1ccccc1\n")
    assert list(read_smiles("-", stdin=lines)) == ["CCO", "c1ccccc1"]
    table = io.StringIO("id,smiles\n1,CCO\n2,c1ccccc1\n")
    assert list(read_smiles("-", stdin=table)) == ["CCO", "c1ccccc1"]


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
    path = _write_inputs(tmp_path, MIXED)[kind]
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
    path = _write_inputs(tmp_path, MIXED)["csv"]
    args = ["predict", "--checkpoint", str(ogb_ckpt), "--input", str(path), "--no-progress"]
    assert cli.main([*args, "--workers", "0", "--id-columns", "other", "name"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][:5] == ["smiles", "other", "name", "a", "b"]
    assert [r[1:3] for r in rows[1:]] == [[str(i), f"m{i}"] for i in range(len(MIXED))]
    assert [r[0] for r in rows[1:]] == MIXED  # input order, unreadable rows kept
    assert cli.main([*args, "--id-columns", "compound"]) == 2
    err = capsys.readouterr().err
    assert "no column 'compound'; columns: name, smiles, other" in err
    smi = _write_inputs(tmp_path, MIXED)["smi"]
    assert cli.main([*args[:3], "--input", str(smi), "--id-columns", "other"]) == 2
    assert "only a 'name' id column" in capsys.readouterr().err
    # an id column with the name of an output column is refused before any work
    clash = tmp_path / "clash.csv"
    clash.write_text("smiles,a\nCCO,1\n")
    assert cli.main([*args[:3], "--input", str(clash), "--id-columns", "a"]) == 2
    assert "'a' has the name of an output column" in capsys.readouterr().err


def test_read_input_table_keeps_sd_titles_and_properties(tmp_path):
    from rdkit import Chem

    sdf = tmp_path / "in.sdf"
    with Chem.SDWriter(str(sdf)) as w:
        for i, smi in enumerate(["CCO", "c1ccccc1"]):
            mol = Chem.MolFromSmiles(smi)
            mol.SetProp("_Name", f"cpd-{i}")
            mol.SetProp("batch", f"B{i}")
            w.write(mol)
    table = predict_io.read_input_table(sdf)
    assert table.id_columns == ["name"]
    assert [r[1] for r in table.rows] == [("cpd-0",), ("cpd-1",)]
    table = predict_io.read_input_table(sdf, id_columns=["batch", "name"])
    assert [(r[0], r[1]) for r in table.rows] == [
        ("CCO", ("B0", "cpd-0")),
        ("c1ccccc1", ("B1", "cpd-1")),
    ]
    plain = predict_io.read_input_table(_write_inputs(tmp_path, ["CCO"])["csv"])
    assert plain.id_columns == ["name"] and list(plain.rows) == [("CCO", ("m0",), None)]
    text = io.StringIO("smiles,id\nCCO,7\n")
    stdin = predict_io.read_input_table("-", id_columns=["id"], stdin=text)
    assert list(stdin.rows) == [("CCO", ("7",), None)]


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


# --------------------------------------------------------------------------------------
# Interrupted runs
# --------------------------------------------------------------------------------------


def test_interrupted_writer_leaves_a_valid_prefix(ogb_ckpt, tmp_path):
    full = list(iter_predictions(ogb_ckpt, MIXED, batch_size=5, workers=0))

    def interrupted(k: int):
        yield from full[:k]
        raise KeyboardInterrupt

    whole = io.StringIO()
    write_predictions_csv(full, whole, ["a", "b"])
    for k in (0, 1, 7, len(full) - 1):
        path = tmp_path / f"part{k}.csv"
        with open(path, "w", newline="") as fh, pytest.raises(KeyboardInterrupt):
            write_predictions_csv(interrupted(k), fh, ["a", "b"])
        text = path.read_text()
        assert whole.getvalue().startswith(text) and text.endswith("\n")
        assert len(list(csv.reader(io.StringIO(text)))) == k + 1


def test_interrupted_cli_run_leaves_a_prefix_of_the_output(ogb_ckpt, tmp_path, monkeypatch):

    path = _write_inputs(tmp_path, MIXED)["smi"]
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


def test_the_heap_is_trimmed_only_once_memory_grew_by_the_slack(monkeypatch):
    resident = iter([1000, 1100, 1300, 1301, 900, 1200, 1500, 1200])  # bytes, read in turn
    calls: list[int] = []
    monkeypatch.setattr(stream, "_malloc_trim", lambda: calls.append)
    monkeypatch.setattr(stream._HeapTrimmer, "_resident", staticmethod(lambda: next(resident)))
    trim = stream._HeapTrimmer(slack=300)  # reads 1000: the limit is 1300
    trim()  # 1100
    trim()  # 1300, not above the limit
    assert calls == []
    trim()  # 1301: trims, then reads 900: the limit is 1200
    assert calls == [0]
    trim()  # 1200
    trim()  # 1500: trims, reads 1200
    assert calls == [0, 0]
    assert trim.limit == 1500


def test_without_malloc_trim_the_heap_is_left_alone(monkeypatch):
    monkeypatch.setattr(stream, "_malloc_trim", lambda: None)
    monkeypatch.setattr(stream._HeapTrimmer, "_resident", staticmethod(lambda: 10**12))
    trim = stream._HeapTrimmer(slack=1)
    trim()
    assert trim.limit is None
