"""OGB-LSC PCQM4Mv2 / PCQM4M and ogbg-mol* sets: fixtures in the official layouts, no downloads.

Covers: safe split loading, processing into the memory-mapped store (features equal to
``graph_structure`` / ``GraphormerFeatures``), NaN targets on the test splits, no prompt when
``RELEASE_v1.txt`` is missing, offline failure, resumed and parallel preprocessing giving
identical stores, failures reported by index, the submission writer, an ogbg-mol* set through
OGB's raw layout and evaluator, BCE with missing labels, and the real PCQM4Mv2 sample when it
is available (the commands on these fixtures: ``tests/cli/test_ogb_commands.py``).
"""

from __future__ import annotations

import builtins
import logging
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from ogb.utils import smiles2graph
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data

from graphormer_urpe.datasets import (
    DatasetUnavailableError,
    LSCEvaluator,
    MoleculeStore,
    build_molecule_store,
    load_dataset,
    ogb_smiles_to_graph,
    open_lsc,
    preprocess_lsc,
)
from graphormer_urpe.datasets.sources.pcqm_files import PCQM4M, PCQM4MV2, load_split_dict
from graphormer_urpe.graph.batch import collate
from graphormer_urpe.graph.structure import graph_structure
from graphormer_urpe.graph.transform import GraphormerFeatures
from graphormer_urpe.inference.submit import SubmissionError, write_submission
from graphormer_urpe.training.run import masked_loss
from tests.helpers import (
    PCQM_SMILES,
    count_chunk_rows,
    interrupted_chunk_writes,
    v2_splits,
    write_lsc_layout,
    write_ogbg_layout,
)

BAD_TRAIN = "C1CC("  # RDKit cannot parse it
KEYS = {
    "x",
    "edge_index",
    "edge_attr",
    "y",
    "spatial_pos",
    "edge_input",
    "edge_input_hops",
    "degree",
}


# ---------------------------------------------------------------------------------------
# fixture builders (official raw layouts)
# ---------------------------------------------------------------------------------------


@pytest.fixture
def lsc_root(tmp_path) -> tuple[Path, list[str], np.ndarray]:
    smiles = [*PCQM_SMILES[:5], BAD_TRAIN, *PCQM_SMILES[5:]]
    gaps = write_lsc_layout(tmp_path / "ogb", smiles, v2_splits(len(smiles)))
    return tmp_path / "ogb", smiles, gaps


def reference(smiles: str, multi_hop_max_dist: int) -> Data:
    return GraphormerFeatures(multi_hop_max_dist)(ogb_smiles_to_graph(smiles))


def assert_same_graph(got: Data, want: Data, extra: frozenset[str] = frozenset()) -> None:
    assert set(got.keys()) == KEYS | extra
    for key in KEYS - {"y"}:
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a, b), key


# ---------------------------------------------------------------------------------------
# structural features
# ---------------------------------------------------------------------------------------


def test_store_features_equal_graph_structure(tmp_path):
    smiles = PCQM_SMILES
    build_molecule_store(tmp_path / "c", smiles, np.arange(len(smiles)), progress=False)
    cache = MoleculeStore(tmp_path / "c")
    assert len(cache) == len(smiles)
    for mhd in (5, 20):
        batch = cache.graphs(range(len(smiles)), mhd)  # the batched path of __getitems__
        for i, s in enumerate(smiles):
            g = smiles2graph(s)
            ref = graph_structure(g["edge_index"], g["num_nodes"], g["edge_feat"], mhd)
            n, hops = g["num_nodes"], ref.edge_input.shape[2]
            for got in (batch[i], cache.graph(i, mhd)):
                assert int(got.edge_input_hops) == hops
                assert np.array_equal(got.spatial_pos.numpy().reshape(n, n), ref.spatial_pos)
                assert np.array_equal(got.edge_input.numpy().reshape(n, n, hops, 3), ref.edge_input)
                assert np.array_equal(got.degree.numpy(), ref.degree)
                assert np.array_equal(got.x.numpy(), g["node_feat"])
                assert float(got.y) == i
            assert_same_graph(batch[i], reference(s, mhd))
    salt = cache.graph(smiles.index("[Na+].[Cl-]"))
    assert salt.spatial_pos.tolist() == [0, 510, 510, 0]  # disconnected: 510 kept
    chain = cache.graph(smiles.index("CCCCCCCCCCCC"), 20)
    assert int(chain.edge_input_hops) == 11
    # the compact store: atoms and bonds in narrow dtypes, nothing stored per atom pair
    arrays = cache.open()
    assert arrays["x"].dtype == np.uint8 and arrays["edge_index"].dtype == np.uint8
    pair_arrays = {"dist_code", "path_code", "spatial_pos", "edge_input"}
    assert not pair_arrays & set(arrays)
    assert not any((tmp_path / "c" / f"{name}.npy").exists() for name in pair_arrays)


# ---------------------------------------------------------------------------------------
# PCQM4Mv2 layout, safe loading, splits
# ---------------------------------------------------------------------------------------


def test_split_dict_numpy_loads_and_unsafe_pickles_are_refused(tmp_path):
    names = ("train", "valid")
    good = tmp_path / "split_dict.pt"
    torch.save({"train": np.arange(4), "valid": np.array([7, 5])}, good)
    out = load_split_dict(good, names)
    assert out["valid"].dtype == np.int64 and out["valid"].tolist() == [7, 5]

    marker = tmp_path / "code-ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.pt"
    torch.save({"train": np.arange(3), "valid": Evil()}, evil)
    with pytest.raises(ValueError, match="cannot be loaded safely"):
        load_split_dict(evil, names)
    assert not marker.exists()

    floats = tmp_path / "floats.pt"
    torch.save({"train": np.arange(3) * 0.5, "valid": np.arange(2)}, floats)
    with pytest.raises(ValueError, match="1-D integer index array"):
        load_split_dict(floats, names)
    with pytest.raises(ValueError, match=r"lacks split\(s\) \['test'\]"):
        load_split_dict(good, ("train", "test"))


def test_split_dict_pickled_by_numpy_1_loads(tmp_path):
    # The official split_dict.pt was pickled under numpy 1.x (numpy.core.multiarray).
    import io
    import zipfile

    src = tmp_path / "v2.pt"
    torch.save({"train": np.arange(3), "valid": np.array([9])}, src)
    buf = io.BytesIO()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.endswith("data.pkl"):
                assert b"numpy._core.multiarray" in data
                data = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
            zout.writestr(name, data)
    old = tmp_path / "v1.pt"
    old.write_bytes(buf.getvalue())
    assert (
        "numpy.core.multiarray._reconstruct"
        in torch.serialization.get_unsafe_globals_in_checkpoint(old)
    )
    assert load_split_dict(old, ("train", "valid"))["valid"].tolist() == [9]


def test_pcqm4mv2_splits_features_nan_tests_and_failures(lsc_root, caplog):
    root, smiles, gaps = lsc_root
    with caplog.at_level(logging.WARNING):
        splits = load_dataset("pcqm4mv2", root=str(root), multi_hop_max_dist=5)
    assert "row 5 'C1CC(' left out" in caplog.text and "1 of" in caplog.text
    data = open_lsc("pcqm4mv2", root)
    assert data.missing["train"].tolist() == [5] and data.missing["test-dev"].size == 0
    assert splits.unreadable == {"train": 1}  # counted for the run's final line and metrics
    split_file = v2_splits(len(smiles))
    assert len(splits.train) == len(split_file["train"]) - 1
    assert splits.train.source_index.tolist() == [r for r in split_file["train"] if r != 5]
    assert splits.test.source_index.tolist() == split_file["test-dev"]  # the file's order
    for ds in (splits.train, splits.valid, splits.test):
        for k, row in enumerate(ds.source_index):
            g = ds[k]
            assert_same_graph(g, reference(smiles[row], 5))
            assert g.y.shape == (1, 1) and g.y.dtype == torch.float32
            if ds is splits.test:
                assert torch.isnan(g.y).all()
            else:
                assert float(g.y) == pytest.approx(gaps[row], rel=1e-6)
    challenge = data.split("test-challenge")
    assert torch.isnan(challenge.target_matrix()).all() and len(challenge) == 3
    # OGB's evaluator, over the labelled rows only
    y = splits.valid.target_matrix()
    pred = y + torch.linspace(-0.5, 0.5, len(y)).unsqueeze(1)
    want = float((pred - y).abs().mean())
    assert isinstance(splits.evaluator, LSCEvaluator)
    assert splits.evaluate(pred, y)["mae"] == pytest.approx(want, rel=1e-6)
    mixed = torch.cat([y, torch.full((2, 1), float("nan"))])
    assert splits.evaluate(torch.cat([pred, torch.zeros(2, 1)]), mixed)["mae"] == pytest.approx(
        want, rel=1e-6
    )
    # a DataLoader batch goes through __getitems__ and the existing collate
    batch = collate(splits.train.__getitems__([0, 3, 4]), multi_hop_max_dist=5)
    assert batch.x.shape[0] == 3 and batch.edge_input.shape[3] <= 5
    with pytest.raises(ValueError, match="ships OGB features"):
        load_dataset("pcqm4mv2", root=str(root), featurizer="zinc")
    with pytest.raises(Exception, match="could not be featurised"):
        load_dataset("pcqm4mv2", root=str(root), strict=True)


def test_no_prompt_without_release_file(tmp_path, monkeypatch, caplog):
    write_lsc_layout(tmp_path, PCQM_SMILES[:20], v2_splits(20), release=False)

    def no_input(*args, **kwargs):
        raise AssertionError("input() was called")

    monkeypatch.setattr(builtins, "input", no_input)
    with caplog.at_level(logging.WARNING):
        splits = load_dataset("pcqm4mv2", root=str(tmp_path))
    assert len(splits.train) == 8 and "no RELEASE_v1.txt" in caplog.text


def test_offline_download_fails_fast_with_instructions(tmp_path, monkeypatch):
    calls: list[str] = []

    def offline(url, *args, **kwargs):
        calls.append(url if isinstance(url, str) else url.full_url)
        raise urllib.error.URLError("network is unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DatasetUnavailableError) as info:
        preprocess_lsc("pcqm4mv2", tmp_path / "none", progress=False)
    msg = str(info.value)
    assert calls == [PCQM4MV2.url]  # OGB's URL was tried
    assert "network is unreachable" in msg and PCQM4MV2.url in msg
    assert str(tmp_path / "none" / "pcqm4m-v2" / "raw" / "data.csv.gz") in msg
    assert str(tmp_path / "none" / "pcqm4m-v2" / "split_dict.pt") in msg
    assert not [p for p in (tmp_path / "none").iterdir() if "part" in p.name]
    # an incomplete folder is never downloaded over
    calls.clear()
    write_lsc_layout(tmp_path / "half", PCQM_SMILES[:20], v2_splits(20))
    (tmp_path / "half" / "pcqm4m-v2" / "split_dict.pt").unlink()
    with pytest.raises(DatasetUnavailableError, match="incomplete: missing .*split_dict.pt"):
        open_lsc("pcqm4mv2", tmp_path / "half")
    assert calls == []


def test_pcqm4m_v1_layout_and_evaluator(tmp_path):
    n = 20
    splits = {"train": list(range(12)), "valid": list(range(12, 16)), "test": list(range(16, n))}
    write_lsc_layout(tmp_path, PCQM_SMILES[:n], splits, folder=PCQM4M.folder)
    ds = load_dataset("pcqm4m", root=str(tmp_path))
    assert (len(ds.train), len(ds.valid), len(ds.test)) == (12, 4, 4)
    assert torch.isnan(ds.test.target_matrix()).all()
    assert type(ds.evaluator.evaluator).__name__ == "PCQM4MEvaluator"
    assert_same_graph(ds.valid[1], reference(PCQM_SMILES[13], 5))


# ---------------------------------------------------------------------------------------
# preprocessing at scale: resumable, parallel, reported
# ---------------------------------------------------------------------------------------


def _cache_arrays(path: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.load(p) for p in sorted(path.glob("*.npy"))}


def test_interrupted_preprocessing_resumes_without_recomputing(tmp_path, monkeypatch):
    smiles = [*PCQM_SMILES, BAD_TRAIN]
    y = np.arange(len(smiles), dtype=float)
    ref = build_molecule_store(tmp_path / "ref", smiles, y, chunk_size=5, progress=False)
    assert ref.chunks == 8 and [f.index for f in ref.failures] == [len(PCQM_SMILES)]

    with interrupted_chunk_writes(monkeypatch, after=3) as written:
        build_molecule_store(tmp_path / "run", smiles, y, chunk_size=5, progress=False)
    assert not (tmp_path / "run" / "meta.json").exists()
    assert sorted(p.name for p in (tmp_path / "run" / "chunks").iterdir()) == written
    (tmp_path / "run" / "chunks" / ".000007.tmp-1").mkdir()  # a writer's leftover

    computed = count_chunk_rows(monkeypatch)
    # a different chunk size on resume: the recorded plan wins
    report = build_molecule_store(tmp_path / "run", smiles, y, chunk_size=7, progress=False)
    assert sorted(computed) == [15, 20, 25, 30, 35] and report.chunks_computed == 5
    assert report.graphs == ref.graphs and report.failures == ref.failures
    a, b = _cache_arrays(tmp_path / "ref"), _cache_arrays(tmp_path / "run")
    names = {"x", "edge_index", "edge_attr", "y", "node_ptr", "edge_ptr", "source_index"}
    assert a.keys() == b.keys() == names
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key], equal_nan=True), key
    assert not (tmp_path / "run" / "chunks").exists()
    # a finished store is reused, nothing recomputed
    computed.clear()
    again = build_molecule_store(tmp_path / "run", smiles, y, progress=False)
    assert not again.built and computed == [] and again.store_bytes == report.store_bytes


def test_two_workers_give_the_same_store_as_one(tmp_path):
    smiles = [*PCQM_SMILES, BAD_TRAIN, ""]
    y = np.linspace(0, 1, len(smiles))
    one = build_molecule_store(tmp_path / "w1", smiles, y, workers=1, chunk_size=6, progress=False)
    two = build_molecule_store(tmp_path / "w2", smiles, y, workers=2, chunk_size=6, progress=False)
    assert two.workers == 2 and two.chunks_computed == one.chunks_computed == 7
    a, b = _cache_arrays(tmp_path / "w1"), _cache_arrays(tmp_path / "w2")
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key], equal_nan=True), key
    assert [f.index for f in two.failures] == [len(PCQM_SMILES), len(PCQM_SMILES) + 1]
    assert "empty SMILES" in two.failures[1].reason
    for report in (one, two):
        assert report.molecules_per_second and report.molecules_per_second > 0
        assert report.store_bytes > 0 and report.load_seconds >= 0
        assert set(report.stage_seconds) == {"featurize", "arrays", "write", "merge"}


# ---------------------------------------------------------------------------------------
# submission files
# ---------------------------------------------------------------------------------------


def test_submission_writer_checks_size_and_writes_ogb_format(tmp_path):
    rng = np.random.default_rng(0)
    pred = rng.normal(5.0, 1.0, PCQM4MV2.sizes["test-dev"]).astype(np.float32)
    path = write_submission(pred, "test-dev", tmp_path / "sub")
    assert path.name == "y_pred_pcqm4m-v2_test-dev.npz"
    with np.load(path) as z:
        assert z.files == ["y_pred"] and np.array_equal(z["y_pred"], pred)
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == [path.name]

    with pytest.raises(SubmissionError) as info:
        write_submission(pred[:125], "test-challenge", tmp_path / "sub")
    msg = str(info.value)
    assert "125" in msg and "147,432" in msg and "--allow-partial" in msg and "\n" not in msg
    partial = write_submission(
        torch.from_numpy(pred[:125]), "test-challenge", tmp_path / "p", allow_partial=True
    )
    with np.load(partial) as z:
        assert partial.name == "y_pred_pcqm4m-v2_test-challenge.npz"
        assert z["y_pred"].dtype == np.float32 and np.array_equal(z["y_pred"], pred[:125])
    bad = pred[:10].copy()
    bad[3] = np.nan
    with pytest.raises(SubmissionError, match="not finite"):
        write_submission(bad, "test-dev", tmp_path / "x", allow_partial=True)
    with pytest.raises(SubmissionError, match="test-dev or test-challenge"):
        write_submission(pred, "valid", tmp_path / "x")
    v1 = write_submission(pred[:7], "test", tmp_path / "v1", dataset="pcqm4m", allow_partial=True)
    assert v1.name == "y_pred_pcqm4m.npz"


# ---------------------------------------------------------------------------------------
# ogbg-mol* through OGB's raw layout and evaluator
# ---------------------------------------------------------------------------------------


def test_ogbg_molhiv_through_ogb_loader_and_evaluator(tmp_path, monkeypatch, capsys, store_dir):
    labels = (np.arange(len(PCQM_SMILES)) % 3 == 0).astype(np.int64).reshape(-1, 1)
    folder = write_ogbg_layout(tmp_path, "ogbg-molhiv", PCQM_SMILES, labels)

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(builtins, "input", no_network)
    splits = load_dataset("ogbg-molhiv", root=str(tmp_path), multi_hop_max_dist=5)
    assert capsys.readouterr().out == ""  # OGB's prints went to the log
    assert (splits.task_type, splits.metric, splits.higher_is_better) == ("binary", "rocauc", True)
    assert splits.target_names == ["HIV_active"]
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (len(PCQM_SMILES) - 12, 6, 6)
    for k in range(len(splits.valid)):
        row = len(PCQM_SMILES) - 12 + k
        g = splits.valid[k]
        assert_same_graph(g, reference(PCQM_SMILES[row], 5))
        assert int(g.y) == labels[row, 0]
    store = splits.valid.store
    assert store.folder.parent == store_dir / "ogbg"  # in the store folder, not the root
    assert not (folder / "processed").exists()
    meta = store.folder / "meta.json"
    mtime = meta.stat().st_mtime_ns
    again = load_dataset("ogbg-molhiv", root=str(tmp_path), multi_hop_max_dist=3)
    assert meta.stat().st_mtime_ns == mtime  # reused, not re-processed: hops apply on reading
    assert again.valid.store.folder == store.folder
    assert_same_graph(again.valid[0], reference(PCQM_SMILES[len(PCQM_SMILES) - 12], 3))
    # an edited raw file builds a new store next to the old one
    labels[0, 0] = 1 - labels[0, 0]
    pd.DataFrame(labels).to_csv(
        folder / "raw" / "graph-label.csv.gz", header=False, index=False, compression="gzip"
    )
    edited = load_dataset("ogbg-molhiv", root=str(tmp_path))
    assert edited.train.store.folder != store.folder
    assert int(edited.train[0].y) == labels[0, 0]

    y = torch.tensor([[0.0], [1.0], [1.0], [0.0], [float("nan")], [1.0]])
    scores = torch.tensor([[0.1], [0.8], [0.3], [0.4], [0.9], [0.7]])
    keep = ~torch.isnan(y[:, 0])
    want = roc_auc_score(y[keep, 0].numpy(), scores[keep, 0].numpy())
    assert splits.evaluate(scores, y)["rocauc"] == pytest.approx(want)


def test_ogbg_offline_and_incomplete_folders(tmp_path, monkeypatch):
    calls: list[str] = []

    def offline(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("offline (test)")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("ogbg-molbace", root=str(tmp_path))
    assert calls == ["http://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/bace.zip"]
    assert "offline (test)" in str(info.value) and "ogbg_molbace" in str(info.value)
    raw = tmp_path / "ogbg_molesol" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv.gz").write_bytes(b"")
    with pytest.raises(DatasetUnavailableError, match="incomplete: missing edge-feat"):
        load_dataset("ogbg-molesol", root=str(tmp_path))
    with pytest.raises(ValueError, match="unknown OGB molecule dataset"):
        load_dataset("ogbg-ppa", root=str(tmp_path))


def test_masked_bce_ignores_missing_labels():
    pred = torch.tensor([[0.3, -1.0], [2.0, 0.5], [-0.7, 0.1]])
    target = torch.tensor([[1.0, float("nan")], [0.0, 1.0], [float("nan"), 0.0]])
    keep = ~torch.isnan(target)
    want = torch.nn.functional.binary_cross_entropy_with_logits(pred[keep], target[keep])
    assert masked_loss(pred, target, "bce") == pytest.approx(float(want), rel=1e-6)
    assert torch.isfinite(masked_loss(pred, target, "l1"))


# ---------------------------------------------------------------------------------------
# the real PCQM4Mv2 sample (skipped when ../shared is absent)
# ---------------------------------------------------------------------------------------


def test_real_pcqm4mv2_sample_end_to_end(shared_copy):
    root = shared_copy("pcqm4mv2-sample")
    report = preprocess_lsc("pcqm4mv2", root, workers=2, chunk_size=700, progress=False)
    assert report["molecules"] == report["graphs"] == 1999 and report["num_failures"] == 0
    assert report["chunks"] == 3 and report["bytes_per_molecule"] < 2000
    data = open_lsc("pcqm4mv2", root)
    assert {k: v.size for k, v in data.positions.items()} == {
        "train": 1500,
        "valid": 250,
        "test-dev": 125,
        "test-challenge": 124,
    }
    table = pd.read_csv(root / "pcqm4m-v2" / "raw" / "data.csv.gz")
    train = data.split("train")
    assert np.allclose(
        train.target_matrix()[:, 0].numpy(),
        table["homolumogap"].to_numpy()[train.source_index],
        rtol=1e-6,
    )
    labels = pd.read_csv(root / "test_labels.csv")
    for split in ("test-dev", "test-challenge"):
        ds = data.split(split)
        assert torch.isnan(ds.target_matrix()).all()
        truth = labels[labels["split"] == split].set_index("idx")["homolumogap"]
        y_true = torch.tensor(truth.loc[ds.source_index].to_numpy()).unsqueeze(1)
        evaluator = LSCEvaluator(PCQM4MV2)
        assert evaluator(y_true, y_true)["mae"] == 0.0
        assert evaluator(y_true + 0.25, y_true)["mae"] == pytest.approx(0.25)
    rng = np.random.default_rng(0)
    picks = rng.choice(len(train), size=40, replace=False)
    for k, got in zip(picks, train.__getitems__(list(picks)), strict=True):
        assert_same_graph(got, reference(table["smiles"][train.source_index[k]], 5))


def test_pcqm4mv2_small_preset_matches_graphormer_small():
    from graphormer_urpe.graph.model import Graphormer, get_preset
    from graphormer_urpe.runtime.train_config import make_config

    cfg = make_config("pcqm4mv2-small")
    m = cfg.model
    assert (m.num_layers, m.hidden_dim, m.ffn_dim, m.num_heads) == (6, 512, 512, 32)
    assert m.multi_hop_max_dist == 5 and m.num_atoms == get_preset("pcqm4mv2-base").num_atoms
    assert (cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.batch_size) == (
        2e-4,
        60_000,
        1_000_000,
        256,
    )
    # the 12.5M of Graphormer-Small (spec 3.2: 12,550,721 by a hand count of the v1 code)
    assert sum(p.numel() for p in Graphormer(m).parameters()) == 12_550_721
