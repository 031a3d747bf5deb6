"""The pieces of ``predict --engine ray`` that need no Ray: the shard reader, the
:class:`Predictor` called as Ray Data calls it, the part writer and its manifest.

The Predictor's columns, written by the part writer, must give the very CSV that local
``predict`` writes for the same predictions (one piece of code, :class:`PredictionLayout`).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.inference.engines.predict_io import read_named_smiles, write_predictions_csv
from graphormer_urpe.inference.engines.ray.output import MANIFEST, Manifest, PartWriter
from graphormer_urpe.inference.engines.ray.predictor import (
    FEATURIZED,
    FeaturizedPredictor,
    Predictor,
    featurize_block,
)
from graphormer_urpe.inference.engines.ray.shards import list_shards, read_shard
from graphormer_urpe.inference.engines.stream import Featurizing, iter_predictions
from graphormer_urpe.inference.intervals.calibration import fit_calibration
from tests.helpers import MIXED, VALID, domain_checkpoint, input_files

# --------------------------------------------------------------------------------------
# Shards
# --------------------------------------------------------------------------------------


def test_a_folder_a_pattern_or_a_file(tmp_path):
    for name in ("b.smi", "a.smi.gz", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "notes.md").write_text("not a shard")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in list_shards(tmp_path)] == ["a.smi.gz", "b.smi", "c.txt"]
    assert [p.name for p in list_shards(tmp_path / "*.smi*")] == ["a.smi.gz", "b.smi"]
    assert list_shards(tmp_path / "b.smi") == [tmp_path / "b.smi"]
    with pytest.raises(ValueError, match="notes.md"):
        list_shards(tmp_path / "*")
    with pytest.raises(FileNotFoundError, match="no input files"):
        list_shards(tmp_path / "sub")
    (tmp_path / "d.csv").write_text("smiles\n")
    with pytest.raises(ValueError, match="run them separately"):
        list_shards(tmp_path)


def test_shards_are_read_as_local_predict_reads_them(tmp_path):
    for kind, path in input_files(tmp_path, MIXED).items():
        blocks = list(read_shard(path, 3, rows_per_block=7))
        assert [len(b["row"]) for b in blocks] == [7] * 4 + [len(MIXED) - 28], kind
        rows = np.concatenate([b["row"] for b in blocks])
        assert rows.tolist() == list(range(len(MIXED)))
        assert all((b["shard"] == 3).all() for b in blocks)
        assert [s for b in blocks for s in b["smiles"]] == MIXED, kind
        names = [n for b in blocks for n in b["name"]]
        if kind == "smi":
            assert names == [n for _, n in read_named_smiles(path)]
        else:
            assert set(names) == {""}
    (tmp_path / "bad.csv").write_text("smi\nCCO\n")
    with pytest.raises(ValueError, match="no column 'smiles'"):
        list(read_shard(tmp_path / "bad.csv", 0))


# --------------------------------------------------------------------------------------
# The Predictor, called as Ray Data calls it, and the writer
# --------------------------------------------------------------------------------------


def _local_csv(
    domain_ckpt: Path, smiles: list[str], names: list[str] | None = None, **options
) -> str:
    """What local ``predict`` writes for ``smiles`` (one window: the same batches)."""
    from graphormer_urpe.inference.intervals.calibration import load_calibration

    binary = options.pop("binary", False)
    logits = options.pop("logits", False)
    calibration = options.pop("calibration", load_calibration(domain_ckpt))
    level = options.pop("level", None)
    predictions = iter_predictions(
        domain_ckpt, smiles, batch_size=4, workers=0, device="cpu", **options
    )
    if names is not None:
        predictions = (p._replace(name=n) for p, n in zip(predictions, names, strict=True))
    out = io.StringIO()
    write_predictions_csv(
        predictions,
        out,
        ["a", "b"],
        binary,
        logits,
        domain=True,
        names=names is not None,
        calibration=calibration,
        level=level,
    )
    return out.getvalue()


def _written(tmp_path: Path, predictor: Predictor, smiles: list[str], names=None) -> str:
    """The part file the writer makes of the Predictor's columns for ``smiles``."""
    n = len(smiles)
    batch = {
        "shard": np.zeros(n, dtype=np.int32),
        "row": np.arange(n),
        "smiles": np.array(smiles, dtype=object),
        "name": np.array(names or [""] * n, dtype=object),
    }
    columns = predictor(batch)
    layout = predictor.layout
    if names is not None:
        from dataclasses import replace

        layout = replace(layout, names=True)
    manifest = Manifest(tmp_path / "out", "domain_ckpt", layout.header, False)
    writer = PartWriter(manifest, ["in.smi"], layout)
    writer.write(columns)
    writer.finish()
    return (tmp_path / "out" / "part-00000.csv").read_text()


def test_predictor_columns_write_the_csv_of_local_predict(domain_ckpt, tmp_path):
    predictor = Predictor(str(domain_ckpt), batch_size=4, device="cpu")
    columns = predictor({"smiles": np.array(MIXED, dtype=object), "id": np.arange(len(MIXED))})
    assert columns["id"].tolist() == list(range(len(MIXED)))  # the batch's own columns stay
    ref = list(iter_predictions(domain_ckpt, MIXED, batch_size=4, workers=0, device="cpu"))
    for p, a, b, err in zip(ref, columns["a"], columns["b"], columns["error"], strict=True):
        if p.values is None:
            assert np.isnan(a) and np.isnan(b) and err == p.error
        else:  # the same forward passes, bit for bit
            assert [a, b] == p.values.tolist() and err == ""
    domains = set(columns["domain"].tolist())
    assert "in" in domains and any(d.startswith("out: ") for d in domains)
    names = [f"m{i}" for i in range(len(MIXED))]
    assert _written(tmp_path, predictor, MIXED, names) == _local_csv(domain_ckpt, MIXED, names)


def test_binary_probabilities_logits_and_no_similarity(tmp_path):
    binary_ckpt = domain_checkpoint(tmp_path / "best.pt", "binary")
    predictor = Predictor(binary_ckpt, batch_size=4, device="cpu", similarity=False)
    text = _written(tmp_path / "p", predictor, MIXED)
    assert text.startswith("smiles,prob_a,prob_b,domain,nearest_similarity,error\n")
    assert text == _local_csv(binary_ckpt, MIXED, binary=True, similarity=False)
    predictor = Predictor(binary_ckpt, batch_size=4, device="cpu", logits=True)
    text = _written(tmp_path / "l", predictor, MIXED)
    assert text == _local_csv(binary_ckpt, MIXED, binary=True, logits=True)


def test_intervals_and_embeddings(domain_ckpt):
    torch.manual_seed(0)
    members, y = torch.randn(1, 40, 2), torch.randn(40, 2)
    cal = fit_calibration(members, y, "regression", ["a", "b"])
    with pytest.raises(ValueError, match="calibrator"):
        Predictor(load_checkpoint_model(domain_ckpt), interval=0.9)
    predictor = Predictor(
        str(domain_ckpt), batch_size=4, device="cpu", interval=0.9, calibration=cal, embeddings=True
    )
    columns = predictor({"smiles": np.array(MIXED, dtype=object)})
    low, high = cal.interval(np.stack([columns["a"], columns["b"]], 1), None, 0.9)
    out = np.array([str(d).startswith("out") for d in columns["domain"]])
    assert out.any()  # out of the training domain: no interval, as in local predict
    low[out], high[out] = np.nan, np.nan
    assert np.allclose(columns["a_low"], low[:, 0], equal_nan=True)
    assert np.allclose(columns["b_high"], high[:, 1], equal_nan=True)
    emb = columns["embedding"]
    assert emb.shape == (len(MIXED), 16) and emb.dtype == np.float32
    readable = columns["error"] == ""
    assert np.isfinite(emb[readable]).all() and np.isnan(emb[~readable]).all()


def test_blocks_featurised_in_tasks_give_the_same_columns(domain_ckpt):
    predictor = Predictor(str(domain_ckpt), batch_size=4, device="cpu", embeddings=True)
    gpu_side = FeaturizedPredictor(str(domain_ckpt), batch_size=4, device="cpu", embeddings=True)
    featurizing = Featurizing.of(load_checkpoint_model(domain_ckpt))
    blocks = [MIXED[:9], MIXED[9:]]
    packed = [featurize_block({"smiles": np.array(b, dtype=object)}, featurizing) for b in blocks]
    got = gpu_side({FEATURIZED: np.concatenate([p[FEATURIZED] for p in packed])})
    want = [predictor({"smiles": np.array(b, dtype=object)}) for b in blocks]
    assert set(got) == set(want[0])
    for key in got:
        joined = np.concatenate([w[key] for w in want])
        if joined.dtype == object:
            assert got[key].tolist() == joined.tolist(), key
        else:
            assert np.array_equal(got[key], joined, equal_nan=True), key


def load_checkpoint_model(path: Path):
    from graphormer_urpe.inference.loading import load_model

    return load_model(path, "cpu")


def test_rows_lost_or_repeated_are_refused(domain_ckpt, tmp_path):
    predictor = Predictor(str(domain_ckpt), batch_size=4, device="cpu")
    smiles = VALID[:6]
    batch = {
        "shard": np.zeros(6, dtype=np.int32),
        "row": np.arange(6),
        "smiles": np.array(smiles, dtype=object),
        "name": np.array([""] * 6, dtype=object),
    }
    columns = predictor(batch)
    manifest = Manifest(tmp_path, "domain_ckpt", predictor.layout.header, False)
    for rows in ([0, 1, 2, 4, 5, 6], [0, 1, 1, 2, 3, 4], [1, 2, 3, 4, 5, 6]):
        writer = PartWriter(manifest, ["in.csv"], predictor.layout)
        with pytest.raises(RuntimeError, match="was due"):
            writer.write({**columns, "row": np.array(rows)})
        writer.abort()
    assert list(tmp_path.iterdir()) == []  # no part, no temporary file


def test_shards_in_order_empty_ones_and_the_manifest(domain_ckpt, tmp_path):
    predictor = Predictor(str(domain_ckpt), batch_size=4, device="cpu")
    layout = predictor.layout

    def rows(shard: int, first: int, n: int) -> dict:
        smiles = [VALID[(first + i) % len(VALID)] for i in range(n)]
        batch = {
            "shard": np.full(n, shard, dtype=np.int32),
            "row": np.arange(first, first + n),
            "smiles": np.array(smiles, dtype=object),
            "name": np.array([""] * n, dtype=object),
        }
        return predictor(batch)

    sources = ["s0.csv", "s1.csv", "s2.csv", "s3.csv"]
    manifest = Manifest(tmp_path, "domain_ckpt", layout.header, False)
    writer = PartWriter(manifest, sources, layout)
    writer.write(rows(0, 0, 3))
    both = {
        k: np.concatenate([a, b])
        for (k, a), b in zip(rows(0, 3, 2).items(), rows(2, 0, 4).values(), strict=True)
    }
    writer.write(both)  # the end of shard 0, then shard 2: shard 1 is empty
    writer.finish()  # shard 3 too
    record = json.loads((tmp_path / MANIFEST).read_text())
    assert [(s["input"], s["output"], s["rows"]) for s in record["shards"]] == [
        ("s0.csv", "part-00000.csv", 5),
        ("s1.csv", "part-00001.csv", 0),
        ("s2.csv", "part-00002.csv", 4),
        ("s3.csv", "part-00003.csv", 0),
    ]
    assert (tmp_path / "part-00001.csv").read_text() == ",".join(layout.header) + "\n"
    assert len((tmp_path / "part-00002.csv").read_text().splitlines()) == 5
    # a re-run: complete shards are recognised, a part of the wrong size is not
    again = Manifest(tmp_path, "domain_ckpt", layout.header, False)
    assert all(again.complete(s) for s in sources)
    with open(tmp_path / "part-00002.csv", "a") as fh:
        fh.write("x\n")
    assert not again.complete("s2.csv") and again.complete("s0.csv")
    assert again.part_names(["new.csv", "s2.csv"]) == {
        "new.csv": "part-00004.csv",
        "s2.csv": "part-00002.csv",
    }
    with pytest.raises(ValueError, match="another run"):
        Manifest(tmp_path, "other.pt", layout.header, False)
