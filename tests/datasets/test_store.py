"""The one store behind every dataset: where it lives, reuse and rebuild, resume, round trips."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from graphormer_urpe.datasets import (
    STORE_ENV,
    MoleculeStore,
    StoreGraphDataset,
    build_molecule_store,
    default_store_dir,
    featurize_smiles,
    load_dataset,
    load_nci5k,
    read_nci_smiles,
    store_folder,
)
from graphormer_urpe.datasets.store import build as store_build
from graphormer_urpe.datasets.store import chunks as chunks_module
from graphormer_urpe.graph.transform import GraphormerFeatures
from tests.helpers import count_chunk_rows, interrupted_chunk_writes

SMILES = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "C1CC1C(=O)O",
    "not a smiles",
    "CC[NH3+].CC(=O)[O-]",
    "C",
    "O=C(O)c1ccccc1",
    "CCN(CC)CC",
    "",
    "c1ccc2ccccc2c1",
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
]
KEYS = ("x", "edge_index", "edge_attr", "spatial_pos", "edge_input", "edge_input_hops", "degree")


def _csv(path, smiles=SMILES * 2):
    rows = [f"{s},{k * 0.25}" for k, s in enumerate(smiles)]
    path.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    return path


def _same(got, want) -> None:
    for key in KEYS:
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key


def test_store_folder_follows_argument_then_environment_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env"))
    assert default_store_dir() == tmp_path / "env"
    assert default_store_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_dir() == tmp_path / "xdg" / "graphormer-urpe"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_dir() == tmp_path / "home" / ".cache" / "graphormer-urpe"
    a = store_folder("csv", "my file!", {"sha256": "1", "featurizer": "ogb"}, tmp_path)
    b = store_folder("csv", "my file!", {"sha256": "1", "featurizer": "zinc"}, tmp_path)
    assert a.parent == b.parent == tmp_path / "csv" and a != b
    assert a.name.startswith("my_file_-")


def test_csv_store_lives_in_the_store_folder_and_is_reused(tmp_path, store_dir, monkeypatch):
    path = _csv(tmp_path / "mols.csv")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # nothing may be written to the working directory
    splits = load_dataset(f"csv:{path}", target_columns=["y"], split="random")
    store = splits.train.store
    assert store.folder.parent == store_dir / "csv" and list(work.iterdir()) == []
    assert [f.index for f in store.failures] == [4, 9, 16, 21]
    assert "line 6" in store.describe_row(4)

    calls = []
    real = chunks_module.featurize_chunk
    monkeypatch.setattr(
        chunks_module, "featurize_chunk", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    again = load_dataset(f"csv:{path}", target_columns=["y"], split="scaffold")
    assert calls == [] and again.train.store.folder == store.folder  # split: no rebuild
    other = load_dataset(f"csv:{path}", target_columns=["y"], featurizer="zinc")
    assert calls and other.train.store.folder != store.folder  # option: a new store
    calls.clear()
    _csv(path, SMILES * 2 + ["CCCC"])  # the file's content changed
    edited = load_dataset(f"csv:{path}", target_columns=["y"])
    assert calls and edited.train.store.folder != store.folder
    assert int(edited.train.store.meta["rows"]) == 2 * len(SMILES) + 1
    explicit = load_dataset(f"csv:{path}", target_columns=["y"], store_dir=str(tmp_path / "c"))
    assert explicit.train.store.folder.parent == tmp_path / "c" / "csv"


def test_interrupted_csv_store_build_resumes_with_its_finished_chunks(tmp_path, monkeypatch):
    path = _csv(tmp_path / "mols.csv", SMILES)
    monkeypatch.setattr(store_build, "DEFAULT_CHUNK_SIZE", 3)
    with interrupted_chunk_writes(monkeypatch, after=2):
        load_dataset(f"csv:{path}", target_columns=["y"])
    rows = count_chunk_rows(monkeypatch)
    resumed = load_dataset(f"csv:{path}", target_columns=["y"], split="scaffold")
    assert sorted(rows) == [6, 9]  # chunks 0 and 1 (rows 0-5) were not recomputed
    store = resumed.train.store
    assert len(store) == len(SMILES) - 2 and not (store.folder / "chunks").exists()
    for part in (resumed.train, resumed.valid, resumed.test):
        for k, row in enumerate(part.source_index):
            want = GraphormerFeatures(20)(featurize_smiles(SMILES[row], "ogb"))
            _same(part[k], want)
            assert float(part[k].y) == pytest.approx(row * 0.25)


def test_nci5k_round_trips_through_the_store(tmp_path):
    smiles = read_nci_smiles(limit=60)
    splits = load_nci5k(5, limit=60, workers=2)
    store = splits.train.store
    assert store.folder.parent.name == "nci5k"
    seen = []
    for part in (splits.train, splits.valid, splits.test):
        stored = part.smiles()
        for k, row in enumerate(part.source_index):
            assert stored[k] == smiles[row]
            _same(part[k], GraphormerFeatures(5)(featurize_smiles(smiles[row], "ogb")))
            seen.append(int(row))
    assert sorted(seen) == sorted(set(seen)) and len(seen) == len(store)


def test_split_positions_cover_the_store_and_need_labels(tmp_path):
    path = tmp_path / "f.csv"
    folds = ["train", "valid", "test", "val", "train", "test"]
    rows = [f"{s},{k},{f}" for k, (s, f) in enumerate(zip(SMILES[:6], folds, strict=True))]
    path.write_text("smiles,y,fold\n" + "\n".join(rows) + "\n")
    splits = load_dataset(f"csv:{path}", target_columns=["y"], split_column="fold")
    got = {p: sorted(getattr(splits, p).source_index.tolist()) for p in ("train", "valid", "test")}
    assert got == {"train": [0], "valid": [1, 3], "test": [2, 5]}  # row 4 is invalid
    codes = np.asarray(splits.train.store.split_codes)
    assert codes.tolist() == [0, 1, 2, 1, 2]


class _Payload:
    """Unpickling this runs ``exec`` (what a crafted store file would do)."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        import builtins

        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


def test_crafted_store_array_is_refused_without_running(tmp_path):
    path = _csv(tmp_path / "mols.csv")
    store = load_dataset(f"csv:{path}", target_columns=["y"]).train.store
    marker = tmp_path / "ran"
    crafted = np.empty(1, dtype=object)
    crafted[0] = _Payload(marker)
    np.save(store.folder / "y.npy", crafted, allow_pickle=True)
    with pytest.raises(ValueError, match=r"y\.npy cannot be read"):
        load_dataset(f"csv:{path}", target_columns=["y"])
    assert not marker.exists()


def test_chunk_featurised_at_once_equals_one_molecule_at_a_time(monkeypatch):
    """A chunk's arrays and failures: each kept molecule's rows exactly as ``smiles2graph``
    gives them alone, and every failure (unparsable, empty, not a string, a bond stereo OGB
    does not list) in its row with its reason."""
    from ogb.utils import smiles2graph
    from rdkit import Chem

    parse = Chem.MolFromSmiles

    def atropisomer_acetanilide(smiles, *args):
        mol = parse(smiles, *args)
        if smiles == "CC(=O)Nc1ccc(O)cc1":  # a bond stereo tag outside OGB's list
            mol.GetBondWithIdx(0).SetStereo(Chem.BondStereo.STEREOATROPCW)
        return mol

    monkeypatch.setattr(Chem, "MolFromSmiles", atropisomer_acetanilide)
    smiles = [*SMILES, None]
    arrays, failures, _ = chunks_module.featurize_chunk(
        smiles, np.arange(len(smiles), dtype=float), first_index=100
    )
    bad = {2, 4, 9, 12}
    assert [f.index for f in failures] == [100 + k for k in sorted(bad)]
    assert failures[0].reason.endswith("ValueError: a bond stereo value is not in OGB's list")
    assert failures[1].reason == "RDKit cannot parse SMILES 'not a smiles'"
    assert failures[2].reason == failures[3].reason == "empty SMILES ''"
    kept = [k for k in range(len(smiles)) if k not in bad]
    assert arrays["source_index"].tolist() == [100 + k for k in kept]
    assert arrays["y"][:, 0].tolist() == [float(k) for k in kept]
    refs = [smiles2graph(smiles[k]) for k in kept]
    assert np.array_equal(arrays["x"], np.concatenate([r["node_feat"] for r in refs]))
    assert np.array_equal(arrays["edge_attr"], np.concatenate([r["edge_feat"] for r in refs]))
    ei = np.concatenate([r["edge_index"] for r in refs], axis=1)
    assert np.array_equal(arrays["edge_index"], ei)
    assert arrays["num_nodes"].tolist() == [r["num_nodes"] for r in refs]
    assert arrays["num_edges"].tolist() == [r["edge_index"].shape[1] for r in refs]


# The names from before the store was called a store keep working for one release.


@pytest.mark.parametrize(
    "old, new",
    [
        ("MoleculeCache", "MoleculeStore"),
        ("CachedGraphDataset", "StoreGraphDataset"),
        ("build_molecule_cache", "build_molecule_store"),
        ("default_cache_dir", "default_store_dir"),
        ("CACHE_ENV", "STORE_ENV"),
        ("store_dir", "store_folder"),
    ],
)
def test_a_previous_public_name_still_resolves_with_a_deprecation_warning(old, new):
    import graphormer_urpe.datasets as datasets

    with pytest.warns(DeprecationWarning, match=f"datasets.{old} is deprecated: use .*{new}"):
        value = getattr(datasets, old)
    assert value is getattr(datasets, new) and old not in datasets.__all__


def test_the_store_folder_s_previous_variable_still_works_and_warns(tmp_path, monkeypatch, caplog):
    from graphormer_urpe.datasets.store import location

    location._warn_old_env.cache_clear()  # it says so once per process
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("GRAPHORMER_URPE_CACHE", str(tmp_path / "old"))
    with caplog.at_level(logging.WARNING, logger=location.__name__):
        assert default_store_dir() == tmp_path / "old"
    assert "GRAPHORMER_URPE_CACHE is deprecated: set GRAPHORMER_URPE_STORE" in caplog.text
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "new"))
    assert default_store_dir() == tmp_path / "new"  # the name now wins


def test_a_store_s_previous_attribute_and_report_key_names(tmp_path):
    report = build_molecule_store(tmp_path / "s", SMILES[:4], np.zeros((4, 1)), progress=False)
    d = report.to_dict()
    assert d["folder"] == d["cache_dir"] == str(tmp_path / "s")
    assert d["store_bytes"] == d["cache_bytes"] == report.store_bytes > 0
    store = MoleculeStore(tmp_path / "s")
    with pytest.warns(DeprecationWarning, match="use MoleculeStore.folder"):
        assert store.cache_dir == store.folder == tmp_path / "s"
    split = StoreGraphDataset(store, np.arange(len(store)))
    with pytest.warns(DeprecationWarning, match="use StoreGraphDataset.store"):
        assert split.cache is split.store is store


def test_a_config_that_names_cache_dir_still_loads(tmp_path):
    """(The flag's old name, ``--cache-dir``: ``tests/cli/test_store_flags.py``.)"""
    from graphormer_urpe.runtime.train_config import TrainConfig, make_config, read_config

    old = TrainConfig().to_dict()
    del old["store_dir"]
    (tmp_path / "config.json").write_text(json.dumps({**old, "cache_dir": "/stores"}))
    assert read_config(tmp_path / "config.json").store_dir == "/stores"
    assert "cache_dir" not in TrainConfig(store_dir="/s").to_dict()
    with pytest.warns(DeprecationWarning, match="use store_dir"):
        assert make_config("small", cache_dir="/m").store_dir == "/m"
    with pytest.warns(DeprecationWarning, match="use store_dir"):
        assert TrainConfig(cache_dir="/t").store_dir == "/t"
