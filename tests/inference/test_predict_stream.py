"""Streaming prediction against a plain in-memory reference, bit for bit.

The reference featurises each molecule with ``featurize_smiles`` + ``GraphormerFeatures``,
cuts the valid molecules into batches of ``batch_size`` consecutive ones in input order, and
runs the model on each collated batch. The stream must give exactly those numbers, whatever
the worker count and chunk size, with every invalid row in its place with its reason.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from pathlib import Path

import pytest
import torch

from graphormer_urpe.inference import iter_predictions, load_model, predict_smiles, read_smiles
from graphormer_urpe.inference.engines import predict_io, stream
from graphormer_urpe.inference.engines.predict_io import Prediction, write_predictions_csv
from graphormer_urpe.inference.engines.stream import default_threads
from tests.helpers import BAD, MIXED, SALT, SELENIUM, VALID, named_inputs, tiny_checkpoint
from tests.reference import predict_reference


@pytest.fixture(scope="module")
def ogb_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ogb") / "best.pt", "ogb")


@pytest.fixture(scope="module")
def zinc_ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("zinc") / "best.pt", "zinc", seed=1)


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


def test_read_smiles_every_format(tmp_path):
    smiles = ["CCO", "", "c1ccccc1", "xx(("]
    for kind, path in named_inputs(tmp_path, smiles).items():
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
    plain = predict_io.read_input_table(named_inputs(tmp_path, ["CCO"])["csv"])
    assert plain.id_columns == ["name"] and list(plain.rows) == [("CCO", ("m0",), None)]
    text = io.StringIO("smiles,id\nCCO,7\n")
    stdin = predict_io.read_input_table("-", id_columns=["id"], stdin=text)
    assert list(stdin.rows) == [("CCO", ("7",), None)]


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
