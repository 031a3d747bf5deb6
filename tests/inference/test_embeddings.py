"""Embeddings (:mod:`graphormer_urpe.inference.engines.embeddings_io`) against a plain reference:
each molecule featurised alone and passed through the model's encoder, its graph token joined
to its descriptors by hand (``predict --embeddings``: ``tests/cli/test_predict_embeddings.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.datasets.featurizers.descriptors import (
    DescriptorNormalizer,
    compute_descriptors,
    descriptor_functions,
)
from graphormer_urpe.inference.engines.embeddings_io import (
    EmbeddingWriter,
    embed_smiles,
    npy_header,
    side_paths,
    write_embeddings,
)
from graphormer_urpe.inference.engines.predict_io import Prediction
from graphormer_urpe.inference.loading import load_model
from tests.helpers import (
    BAD,
    EMBEDDING_HIDDEN,
    EMBEDDING_ROWS,
    VALID,
    embedding_checkpoint,
    embedding_reference,
)


def _descriptor_record() -> dict:
    names = [fn.__name__ for fn in descriptor_functions()]
    norm = DescriptorNormalizer.fit(compute_descriptors(VALID), names)
    return {"kind": "rdkit2d", "descriptors": norm.to_dict()}


@pytest.fixture(scope="module")
def desc_ckpt(tmp_path_factory) -> Path:
    return embedding_checkpoint(
        tmp_path_factory.mktemp("desc") / "best.pt", _descriptor_record(), 1
    )


def test_rows_in_input_order_with_nan_for_unreadable(embedding_ckpt):
    got = embed_smiles(
        embedding_ckpt, EMBEDDING_ROWS, device="cpu", batch_size=4, workers=0, chunk_size=5
    )
    want = embedding_reference(embedding_ckpt, EMBEDDING_ROWS)
    assert got.shape == (len(EMBEDDING_ROWS), EMBEDDING_HIDDEN) and got.dtype == np.float32
    bad = [i for i, s in enumerate(EMBEDDING_ROWS) if s in BAD]
    assert np.isnan(got[bad]).all()
    assert not np.isnan(np.delete(got, bad, axis=0)).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # NaN rows compare equal


def test_the_head_reads_the_embedding(embedding_ckpt):
    """The predictions come from the embedding: the head on it gives ``values``."""
    from graphormer_urpe.inference.engines.stream import iter_predictions

    lm = load_model(embedding_ckpt, "cpu")
    for p in iter_predictions(lm, VALID[:5], workers=0, embeddings=True):
        head = lm.model.eval().head_output(p.embedding[None])[0]
        torch.testing.assert_close(head, p.values, rtol=1e-4, atol=1e-5)


def test_descriptors_are_joined(desc_ckpt):
    got = embed_smiles(desc_ckpt, EMBEDDING_ROWS[:12], device="cpu", workers=0)
    k = len(_descriptor_record()["descriptors"]["names"])
    assert got.shape == (12, EMBEDDING_HIDDEN + k)
    np.testing.assert_allclose(
        got, embedding_reference(desc_ckpt, EMBEDDING_ROWS[:12]), rtol=1e-4, atol=1e-4
    )


def test_chunks_and_workers_give_identical_arrays(embedding_ckpt, tmp_path):
    plain = write_embeddings(
        embedding_ckpt, EMBEDDING_ROWS, tmp_path / "a.npy", device="cpu", workers=0
    )
    options = dict(device="cpu", batch_size=3, chunk_size=4)
    chunked = write_embeddings(
        embedding_ckpt, EMBEDDING_ROWS, tmp_path / "b.npy", workers=0, **options
    )
    pooled = write_embeddings(
        embedding_ckpt, iter(EMBEDDING_ROWS), tmp_path / "c.npy", workers=2, **options
    )
    assert isinstance(pooled, np.memmap) and pooled.shape == (len(EMBEDDING_ROWS), EMBEDDING_HIDDEN)
    # the model's batches differ in size (padding), so equal to float rounding
    np.testing.assert_allclose(chunked, plain, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pooled, chunked)  # the same batches, whatever the workers


def test_header_holds_any_row_count(tmp_path):
    for rows in (0, 7, 10**12):
        path = tmp_path / f"{rows}.npy"
        path.write_bytes(npy_header(rows, 3) + b"\0" * (12 * min(rows, 7)))
        if rows <= 7:
            assert np.load(path).shape == (rows, 3)
        with open(path, "rb") as fh:
            assert np.lib.format.read_magic(fh) == (1, 0)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            assert fh.tell() == 128
        assert (shape, fortran, dtype) == ((rows, 3), False, np.dtype("<f4"))


def test_interrupted_writer_keeps_a_consistent_prefix(embedding_ckpt, tmp_path):
    lm = load_model(embedding_ckpt, "cpu")
    path = tmp_path / "part.npy"
    with pytest.raises(KeyboardInterrupt), EmbeddingWriter(path, [lm.model]) as writer:
        writer.write(Prediction(0, "CCO", None, None, embedding=torch.arange(16.0)))
        writer.write(Prediction(1, "x", None, "bad"))
        raise KeyboardInterrupt
    got = np.load(path)
    assert got.shape == (2, EMBEDDING_HIDDEN) and got[0].tolist() == list(range(16))
    assert np.isnan(got[1]).all() and json.loads(side_paths(path)[0].read_text())["rows"] == 2


def test_ensemble_members_side_by_side(embedding_ckpt, tmp_path):
    other = embedding_checkpoint(tmp_path / "m1.pt", seed=5)
    lms = [load_model(embedding_ckpt, "cpu"), load_model(other, "cpu")]
    got = embed_smiles(lms, EMBEDDING_ROWS, workers=0)
    want = np.concatenate(
        [
            embedding_reference(embedding_ckpt, EMBEDDING_ROWS),
            embedding_reference(other, EMBEDDING_ROWS),
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_guide_recipes_run_as_written(tmp_path, monkeypatch, capsys):
    """The guide's two scikit-learn blocks, on a tiny model and a few molecules."""
    import re
    import shutil

    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "embeddings.md"
    ridge, forest = re.findall(r"```\{\.python notest\}\n(.*?)```", guide.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    embedding_ckpt = Path("runs/nci5k-small-urpe/best.pt")
    embedding_ckpt.parent.mkdir(parents=True)
    shutil.copy(embedding_checkpoint(tmp_path / "tiny.pt"), embedding_ckpt)
    smiles = [*VALID, *EMBEDDING_ROWS[:5]]
    y = [len(s) for s in smiles]
    table = "smiles,y\n" + "".join(f'"{s}",{v}\n' for s, v in zip(smiles, y, strict=True))
    Path("new_target.csv").write_text(table)
    readable = sum(s not in BAD for s in smiles)
    exec(compile(ridge, "ridge", "exec"), {})
    assert f"over {readable} molecules" in capsys.readouterr().out
    Path("measured.csv").write_text(table)
    write_embeddings(embedding_ckpt, smiles, "emb.npy", device="cpu", workers=0)
    scope: dict = {}
    exec(compile(forest.replace("n_estimators=500", "n_estimators=5"), "forest", "exec"), scope)
    assert (
        scope["forest"].n_features_in_ == EMBEDDING_HIDDEN and scope["readable"].sum() == readable
    )
