"""Dataset sources: featurisers, the ZINC target, ZINC, SMILES CSVs, nci5k, splits, the store."""

from __future__ import annotations

import gzip
import logging
import math
import re
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from networkx.algorithms import isomorphism
from torch_geometric.datasets import ZINC

import graphormer_urpe.datasets.store.chunks as chunks_module
from graphormer_urpe.datasets import (
    FEATURIZERS,
    ZINC_ATOM_TYPES,
    DatasetSplits,
    DatasetUnavailableError,
    InvalidMoleculeError,
    MoleculeStore,
    StoreGraphDataset,
    UnknownAtomTypeError,
    featurize_smiles,
    load_dataset,
    load_nci5k,
    load_zinc_splits,
    open_nci,
    open_zinc,
    penalized_logp,
    random_split,
    read_nci,
    regression_metrics,
    scaffold_split,
    zinc_mol_to_graph,
)
from graphormer_urpe.datasets.sources.penalized_logp import cycle_basis, largest_ring_penalty
from graphormer_urpe.datasets.sources.smiles_csv import open_csv
from graphormer_urpe.graph.structure import has_graphormer_features
from graphormer_urpe.graph.transform import GraphormerFeatures
from tests.helpers import SHARED_DATA, write_zinc_raw

ZINC_VAL_CSV = SHARED_DATA / "zinc" / "val.csv"
ZINC_VAL_GRAPHS = SHARED_DATA / "zinc" / "val_graphs.npz"


def _types(data) -> list[str]:
    return [ZINC_ATOM_TYPES[int(t)] for t in data.x.view(-1)]


# ---------------------------------------------------------------------------------------
# ZINC featuriser
# ---------------------------------------------------------------------------------------


def test_zinc_atom_types_follow_bracket_hydrogens_and_charges():
    g = zinc_mol_to_graph("C[C@@H](O)c1cc[nH]c1[NH3+]")
    # [C@@H] keeps its H; aromatic [nH] is plain N (kekulisation drops it); [NH3+] keeps all
    assert _types(g) == ["C", "C H1", "O", "C", "C", "C", "N", "C", "N H3 +"]
    assert g.x.shape == (9, 1) and g.x.dtype == torch.long
    # canonical-form rule: a redundant bracket on a plain atom does not change its type
    assert _types(zinc_mol_to_graph("[CH3]C(=O)[O-]")) == ["C", "C", "O", "O -"]
    assert _types(zinc_mol_to_graph("[NH-]c1ccccc1"))[0] == "N H1 -"


def test_zinc_bonds_are_kekulized_both_directions_sorted():
    g = zinc_mol_to_graph("c1ccccc1C#N")
    assert g.edge_attr.dtype == torch.long and g.edge_attr.dim() == 1
    assert sorted(Counter(g.edge_attr.tolist()).items()) == [(1, 8), (2, 6), (3, 2)]
    ei = g.edge_index.t().tolist()
    assert ei == sorted(ei)  # row-major, as PyG's ZINC stores them
    assert sorted(map(tuple, ei)) == sorted((b, a) for a, b in ei)  # symmetric
    # the benchmark's alternation: the first ring atom takes the double bond to its next atom
    pairs = {tuple(e): int(t) for e, t in zip(ei, g.edge_attr.tolist(), strict=True)}
    assert pairs[(0, 1)] == 2 and pairs[(1, 2)] == 1


def test_zinc_unknown_atom_type_names_smiles_and_atom():
    with pytest.raises(UnknownAtomTypeError, match=r"C\[Si\]\(C\)\(C\)C.*atom 1.*'Si'"):
        zinc_mol_to_graph("C[Si](C)(C)C")
    with pytest.raises(InvalidMoleculeError, match="not a smiles"):
        featurize_smiles("not a smiles", "zinc")


def test_zinc_featurizer_matches_official_val_graphs():
    if not ZINC_VAL_GRAPHS.exists() or not ZINC_VAL_CSV.exists():
        pytest.skip(f"official ZINC validation graphs not available under {SHARED_DATA}")
    z = np.load(ZINC_VAL_GRAPHS)
    smiles = pd.read_csv(ZINC_VAL_CSV)["smiles"].tolist()
    assert len(smiles) == 1000
    identical = isomorphic = types_equal = 0
    for g, smi in enumerate(smiles):
        a, b = z["node_ptr"][g], z["node_ptr"][g + 1]
        e0, e1 = z["edge_ptr"][g], z["edge_ptr"][g + 1]
        x, ei, ea = z["x"][a:b], z["edge_index"][:, e0:e1], z["edge_attr"][e0:e1]
        ours = zinc_mol_to_graph(smi)
        ox, oei, oea = ours.x.view(-1).numpy(), ours.edge_index.numpy(), ours.edge_attr.numpy()
        types_equal += Counter(ox.tolist()) == Counter(x.tolist())
        if ox.shape == x.shape and oei.shape == ei.shape:
            if (ox == x).all() and (oei == ei).all() and (oea == ea).all():
                identical += 1
                isomorphic += 1
                continue
        g1, g2 = nx.Graph(), nx.Graph()
        g1.add_nodes_from((i, {"t": int(t)}) for i, t in enumerate(x))
        g1.add_edges_from(
            (int(s), int(d), {"b": int(t)}) for (s, d), t in zip(ei.T, ea, strict=True)
        )
        g2.add_nodes_from((i, {"t": int(t)}) for i, t in enumerate(ox))
        g2.add_edges_from(
            (int(s), int(d), {"b": int(t)}) for (s, d), t in zip(oei.T, oea, strict=True)
        )
        matcher = isomorphism.GraphMatcher(
            g1, g2, node_match=lambda u, v: u["t"] == v["t"], edge_match=lambda u, v: u == v
        )
        isomorphic += matcher.is_isomorphic()
    assert types_equal == 1000
    # 835 share the official node order exactly; 998 are the same labelled graph. The other
    # two were built from differently ordered SMILES, whose Kekulé alternation differs.
    assert identical >= 830
    assert isomorphic >= 998


# ---------------------------------------------------------------------------------------
# OGB featuriser and registry
# ---------------------------------------------------------------------------------------


def test_ogb_featurizer_shapes_and_registry():
    assert set(FEATURIZERS) == {"zinc", "ogb"}
    g = featurize_smiles("CC(=O)[O-].[Na+]", "ogb")
    assert g.x.shape == (5, 9) and g.x.dtype == torch.long
    assert g.edge_index.shape == (2, 6) and g.edge_attr.shape == (6, 3)
    single = featurize_smiles("[Cu]", "ogb")  # one atom, no bonds, outside ZINC's types
    assert single.num_nodes == 1 and single.edge_attr.shape == (0, 3)
    for bad in ["", "   ", "C1CC", "XYZ"]:
        with pytest.raises(InvalidMoleculeError, match=repr(bad).replace("(", r"\(")):
            featurize_smiles(bad, "ogb")
    with pytest.raises(ValueError, match="unknown featurizer 'morgan'"):
        featurize_smiles("CCO", "morgan")
    assert issubclass(InvalidMoleculeError, ValueError)


# ---------------------------------------------------------------------------------------
# penalized logP
# ---------------------------------------------------------------------------------------


def test_cycle_basis_is_the_classic_one():
    # a square with a diagonal: DFS from node 0 through ascending neighbours
    adj = np.array([[0, 1, 1, 1], [1, 0, 1, 0], [1, 1, 0, 1], [1, 0, 1, 0]])
    cycles = cycle_basis(adj)
    assert len(cycles) == 2 and sorted(map(len, cycles)) == [3, 3]
    assert cycle_basis(np.zeros((3, 3), dtype=int)) == []
    # molecules where networkx 3.6's basis gives another ring penalty (values from the data)
    from rdkit import Chem

    for smiles, expected in [
        ("C[NH+]1[C@H]2CC[C@@H]1CN(C(=O)NCCc1cccc(F)c1)CC2", 1),
        ("CN1[C@H]2CC[C@@H]1c1c(nc(N)c(C#N)c1-c1ccc(-n3cccn3)cc1)C2", 0),
        ("[NH3+]CCCC(=O)N1C[C@@H]2C[C@H](C1)Cn1c2cccc1=O", 2),
    ]:
        assert largest_ring_penalty(Chem.MolFromSmiles(smiles)) == expected


def test_penalized_logp_reproduces_val_csv():
    if not ZINC_VAL_CSV.exists():
        pytest.skip(f"ZINC validation targets not available at {ZINC_VAL_CSV}")
    df = pd.read_csv(ZINC_VAL_CSV)
    pred = np.array([penalized_logp(s) for s in df["smiles"]])
    err = np.abs(pred - df["y"].to_numpy())
    assert len(err) == 1000
    assert err.max() < 1e-5, f"max |error| {err.max()} at row {int(err.argmax())}"
    with pytest.raises(InvalidMoleculeError, match="C1CC"):
        penalized_logp("C1CC")


# ---------------------------------------------------------------------------------------
# The store: graphs as GraphormerFeatures builds them, reuse, identity
# ---------------------------------------------------------------------------------------

_GRAPH_KEYS = (
    "x",
    "edge_index",
    "edge_attr",
    "spatial_pos",
    "edge_input",
    "edge_input_hops",
    "degree",
)


def _assert_same_graph(got, ref) -> None:
    """A graph read from a store equals the one ``GraphormerFeatures`` builds (dtype, shape,
    values), and its ``y`` is ``[1, T]`` float32."""
    for key in _GRAPH_KEYS:
        a, b = getattr(got, key), getattr(ref, key)
        assert a.dtype == b.dtype, (key, a.dtype, b.dtype)
        assert a.shape == b.shape, (key, tuple(a.shape), tuple(b.shape))
        assert torch.equal(a, b), key
    assert got.y.dtype == torch.float32 and got.y.dim() == 2 and got.y.shape[0] == 1


def _expected_graph(smiles: str, featurizer: str, multi_hop_max_dist: int):
    return GraphormerFeatures(multi_hop_max_dist)(featurize_smiles(smiles, featurizer))


@pytest.fixture
def featurize_calls(monkeypatch) -> list[int]:
    """The number of molecules of every chunk the stores featurise (a reused store: none)."""
    calls: list[int] = []
    real = chunks_module.featurize_chunk

    def counting(smiles, *args, **kwargs):
        calls.append(len(smiles))
        return real(smiles, *args, **kwargs)

    monkeypatch.setattr(chunks_module, "featurize_chunk", counting)
    return calls


def _csv_store(
    path: Path,
    target_columns: list[str] | None = None,
    featurizer: str = "ogb",
    smiles_column: str = "smiles",
) -> MoleculeStore:
    """The store of a whole CSV file (no split), the one ``load_dataset`` uses for it."""
    return open_csv(path, smiles_column, featurizer, target_columns)


def _whole(cache: MoleculeStore, multi_hop_max_dist: int = 20) -> StoreGraphDataset:
    return StoreGraphDataset(cache, np.arange(len(cache)), multi_hop_max_dist, "all")


def _mtime(cache: MoleculeStore) -> int:
    return (cache.folder / "meta.json").stat().st_mtime_ns


# ---------------------------------------------------------------------------------------
# ZINC from PyG's raw files (a fixture)
# ---------------------------------------------------------------------------------------


def test_zinc_store_subset_full_and_hops_read_from_one_store(tmp_path, store_dir):
    root = tmp_path / "ZINC"
    expected = write_zinc_raw(root)
    splits = load_zinc_splits(root, 20, subset=True)
    assert splits.name == "zinc" and splits.featurizer == "zinc"
    parts = {"train": splits.train, "val": splits.valid, "test": splits.test}
    assert all(isinstance(ds, StoreGraphDataset) for ds in parts.values())
    assert [len(ds) for ds in parts.values()] == [4, 1, 2]
    cache = splits.train.store
    assert {ds.store.folder for ds in parts.values()} == {cache.folder}
    # the official splits are the split codes stored with the graphs
    assert cache.split_codes.tolist() == [0, 0, 0, 0, 1, 2, 2]
    for split, ds in parts.items():
        for i, smiles in enumerate(expected[split]):
            d = ds[i]
            _assert_same_graph(d, GraphormerFeatures(20)(zinc_mol_to_graph(smiles)))
            assert d.x.shape[1] == 1 and d.edge_attr.dim() == 1 and has_graphormer_features(d)
            assert d.y.shape == (1, 1)
            assert d.y.item() == pytest.approx(penalized_logp(smiles), abs=1e-5)
    assert max(int(d.edge_input_hops) for d in splits.train) > 2

    # another multi_hop_max_dist reads the same store (nothing is rebuilt) with its own hops
    built = _mtime(cache)
    short = load_zinc_splits(root, 2, subset=True)
    assert short.train.store.folder == cache.folder and _mtime(cache) == built
    assert max(int(d.edge_input_hops) for d in short.train) == 2
    ref = GraphormerFeatures(2)(zinc_mol_to_graph(expected["train"][0]))
    _assert_same_graph(short.train[0], ref)
    # the store lives in the store folder, not under the dataset root
    assert cache.folder.is_relative_to(store_dir)
    assert sorted(p.name for p in root.iterdir()) == ["raw"]

    # the full dataset has its own store and uses every molecule
    splits = load_dataset("zinc-full", root=str(root), multi_hop_max_dist=20)
    assert splits.name == "zinc-full" and splits.featurizer == "zinc"
    assert [len(splits.train), len(splits.valid), len(splits.test)] == [6, 2, 2]
    full = splits.train.store
    assert full.folder != cache.folder and full.folder.is_relative_to(store_dir)
    for i, smiles in enumerate(expected["full-val"]):
        _assert_same_graph(splits.valid[i], GraphormerFeatures(20)(zinc_mol_to_graph(smiles)))
    assert splits.target_names == ["penalized_logp"] and splits.num_targets == 1
    with pytest.raises(ValueError, match="featurizer must be 'zinc'"):
        load_dataset("zinc", root=str(root), featurizer="ogb")
    assert open_zinc(root, subset=True).folder == cache.folder


def test_zinc_offline_download_fails_fast_with_instructions(tmp_path, monkeypatch, store_dir):
    calls: list[str] = []

    def offline(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("network is unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "ZINC"
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("zinc", root=str(root))
    msg = str(info.value)
    assert calls and calls[0] == ZINC.url  # PyG's own download code ran
    assert ZINC.url in msg and "network is unreachable" in msg
    for name in ("train.pickle", "val.index", "test.index"):
        assert str(root / "raw" / name) in msg
    assert not (root / "molecules.zip").exists()
    assert info.value.__cause__ is None and info.value.__suppress_context__

    # a partial raw folder is never downloaded over (which would replace it)
    calls.clear()
    (root / "raw").mkdir(parents=True, exist_ok=True)
    (root / "raw" / "train.pickle").write_bytes(b"placeholder")
    with pytest.raises(DatasetUnavailableError, match="missing val.pickle, test.pickle"):
        open_zinc(root)
    assert calls == [] and (root / "raw" / "train.pickle").read_bytes() == b"placeholder"
    assert not any(store_dir.iterdir())  # no store was started


# ---------------------------------------------------------------------------------------
# SMILES CSV
# ---------------------------------------------------------------------------------------


CSV_SMILES = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "c1ccc2ccccc2c1",
    "CCN(CC)CC",
    "OC(=O)c1ccccc1",
    "C1CCCCC1N",
    "c1ccncc1C",
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
    "O=C1CCCC1",
    "c1ccccc1Cl",
    "CCCCCC",
]


def _write_csv(path: Path, rows: list[dict], compress: bool = False) -> Path:
    text = pd.DataFrame(rows).to_csv(index=False)
    if compress:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_csv_invalid_smiles_reported_skipped_or_strict(tmp_path, caplog, featurize_calls):
    rows = [{"smiles": s, "y": i, "note": "x"} for i, s in enumerate(CSV_SMILES[:5])]
    rows.insert(2, {"smiles": "C1CC(", "y": 99, "note": "broken"})
    rows.append({"smiles": "", "y": 98, "note": "empty"})
    path = _write_csv(tmp_path / "mols.csv", rows)
    with caplog.at_level(logging.WARNING):
        cache = _csv_store(path, ["y"])
    assert len(cache) == 5 and cache.meta["rows"] == 7
    assert [(f.index, f.smiles) for f in cache.failures] == [(2, "C1CC("), (6, "")]
    assert re.search(r"row 2 (\(line 4\) )?'C1CC\('", caplog.text)
    assert "2 of 7 molecules could not be featurised" in caplog.text
    assert cache.source_index.tolist() == [0, 1, 3, 4, 5]
    assert cache.smiles(range(5)) == CSV_SMILES[:5]
    assert [float(d.y) for d in _whole(cache)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert featurize_calls == [7]
    # strict: a fresh store raises, and so does reusing the store built with failures
    with pytest.raises(InvalidMoleculeError, match=r"2 invalid molecule\(s\).*row 2 \(line 4\)"):
        load_dataset(f"csv:{path}", target_columns=["y"], strict=True, store_dir=tmp_path / "f")
    assert featurize_calls == [7, 7]
    with pytest.raises(InvalidMoleculeError, match="C1CC"):
        load_dataset(f"csv:{path}", target_columns=["y"], strict=True)
    assert featurize_calls == [7, 7]  # the first store was reused, not rebuilt


def test_csv_missing_targets_extra_and_missing_columns(tmp_path):
    rows = [
        {"id": "a", "smiles": "CCO", "t1": 1.5, "t2": "", "comment": "keep"},
        {"id": "b", "smiles": "CCN", "t1": "NA", "t2": 2.0, "comment": "me"},
        {"id": "c", "smiles": "CCC", "t1": 3.0, "t2": 4.0, "comment": "out"},
    ]
    path = _write_csv(tmp_path / "multi.csv", rows)
    cache = _csv_store(path, ["t1", "t2"])
    ds = _whole(cache)
    y = torch.cat([ds[i].y for i in range(3)])
    assert y.shape == (3, 2) and y.dtype == torch.float32
    assert torch.isnan(y[0, 1]) and torch.isnan(y[1, 0]) and y[2].tolist() == [3.0, 4.0]
    assert torch.equal(ds.target_matrix().nan_to_num(-1.0), y.nan_to_num(-1.0))
    assert cache.target_names == ["t1", "t2"]
    # target inference picks the numeric columns only (id and comment are text)
    inferred = _csv_store(path)
    assert inferred.target_names == ["t1", "t2"]
    with pytest.raises(ValueError, match=r"\['t3'\] not found; available columns: \['id', 'smi"):
        load_dataset(f"csv:{path}", target_columns=["t3"])
    with pytest.raises(ValueError, match=r"\['SMILES'\] not found.*'comment'"):
        load_dataset(f"csv:{path}", smiles_column="SMILES", target_columns=["t1"])
    bad = _write_csv(tmp_path / "bad.csv", [{"smiles": "CCO", "y": "abc"}])
    with pytest.raises(ValueError, match=r"row 0 \(line 2\).*'y' holds 'abc'"):
        load_dataset(f"csv:{bad}", target_columns=["y"])
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_dataset(f"csv:{tmp_path / 'nowhere.csv'}")


def _check_partition(splits: DatasetSplits, total: int) -> None:
    """The three splits read one store and hold every source row exactly once."""
    parts = (splits.train, splits.valid, splits.test)
    assert len({p.store.folder for p in parts}) == 1
    rows = [int(r) for p in parts for r in p.source_index]
    assert sorted(rows) == list(range(total))


def test_csv_split_column_random_and_scaffold(tmp_path, store_dir):
    labels = ["train", "val", "test", "validation", "Train", "valid"] * 2
    rows = [
        {"smiles": s, "y": float(i), "fold": lab}
        for i, (s, lab) in enumerate(zip(CSV_SMILES, labels, strict=True))
    ]
    path = _write_csv(tmp_path / "split.csv", rows)
    by_col = load_dataset(f"csv:{path}", root=str(tmp_path / "r"), split_column="fold")
    assert by_col.name == f"csv:{path}" and by_col.featurizer == "ogb"
    assert [len(by_col.train), len(by_col.valid), len(by_col.test)] == [4, 6, 2]
    assert sorted(float(d.y) for d in by_col.test) == [2.0, 8.0]
    assert by_col.target_names == ["y"]  # the split column is not a target
    _check_partition(by_col, 12)
    # the root is not used for CSV files: the store is in the store folder
    assert not (tmp_path / "r").exists()
    assert by_col.train.store.folder.is_relative_to(store_dir)

    rand = load_dataset(f"csv:{path}", target_columns=["y"], seed=1)
    _check_partition(rand, 12)
    assert [len(rand.train), len(rand.valid), len(rand.test)] == [9, 1, 2]
    again = load_dataset(f"csv:{path}", target_columns=["y"], seed=1)
    assert again.test.source_index.tolist() == rand.test.source_index.tolist()
    other_seed = load_dataset(f"csv:{path}", target_columns=["y"], seed=2)
    assert other_seed.train.store.folder == rand.train.store.folder  # same store

    scaf = load_dataset(f"csv:{path}", target_columns=["y"], split="scaffold")
    _check_partition(scaf, 12)
    with pytest.raises(ValueError, match="unknown split method 'stratified'"):
        load_dataset(f"csv:{path}", split="stratified")
    bad = _write_csv(tmp_path / "badsplit.csv", [{"smiles": "CCO", "y": 1, "fold": "holdout"}])
    with pytest.raises(ValueError, match=r"row 0.*unknown split label 'holdout'"):
        load_dataset(f"csv:{bad}", split_column="fold")


def test_split_functions_partition_and_keep_scaffolds_together():
    for n in (1, 7, 10, 101):
        parts = random_split(n, (0.8, 0.1, 0.1), seed=3)
        assert sorted(np.concatenate(list(parts.values())).tolist()) == list(range(n))
        assert len(parts["train"]) == int(0.8 * n + 1e-9)
    assert not np.array_equal(random_split(50, seed=0)["test"], random_split(50, seed=1)["test"])
    smiles = CSV_SMILES + ["c1ccccc1CC", "c1ccccc1CCC", "c1ccccc1N"]
    parts = scaffold_split(smiles, (0.6, 0.2, 0.2))
    assert sorted(np.concatenate(list(parts.values())).tolist()) == list(range(len(smiles)))
    benzenes = {i for i, s in enumerate(smiles) if s.startswith("c1ccccc1") and "2" not in s}
    owner = {name for name, idx in parts.items() if benzenes & set(idx.tolist())}
    assert len(owner) == 1  # one scaffold, one split
    with pytest.raises(ValueError, match="sum to 1"):
        random_split(10, (0.5, 0.2, 0.2))


def _reference_balanced_scaffold_split(smiles, fractions, seed):
    """Chemprop's scaffold_balanced rule, written plainly."""
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        key = MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(s))
        groups.setdefault(key, []).append(i)
    n = len(smiles)
    n_train, n_valid = int(fractions[0] * n + 1e-9), int(fractions[1] * n + 1e-9)
    limit = min(n_valid, n - n_train - n_valid) / 2
    big = [g for g in groups.values() if len(g) > limit]
    small = [g for g in groups.values() if len(g) <= limit]
    rng = np.random.default_rng(seed)
    big = [big[i] for i in rng.permutation(len(big))]
    small = [small[i] for i in rng.permutation(len(small))]
    out: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for g in big + small:
        if len(out["train"]) + len(g) <= n_train:
            out["train"] += g
        elif len(out["valid"]) + len(g) <= n_valid:
            out["valid"] += g
        else:
            out["test"] += g
    return {k: sorted(v) for k, v in out.items()}


def test_balanced_scaffold_split_matches_the_plain_rule_and_varies_with_the_seed():
    from graphormer_urpe.datasets import balanced_scaffold_split

    rings = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCNCC1", "c1ccoc1", "C1CCOC1", "c1ccsc1"]
    smiles = [f"{r}{'C' * k}" for k in range(1, 4) for r in rings] + ["CCO", "CCN", "CCCl"]
    smiles += [f"c1ccc2ccccc2c1{'O' * k}" for k in range(1, 9)]  # one big scaffold family
    tests = set()
    for seed in range(4):
        parts = balanced_scaffold_split(smiles, (0.8, 0.1, 0.1), seed)
        ref = _reference_balanced_scaffold_split(smiles, (0.8, 0.1, 0.1), seed)
        assert {k: v.tolist() for k, v in parts.items()} == ref
        assert sorted(np.concatenate(list(parts.values())).tolist()) == list(range(len(smiles)))
        naphthalenes = set(range(len(smiles) - 8, len(smiles)))
        owner = [k for k, v in parts.items() if naphthalenes & set(v.tolist())]
        assert len(owner) == 1  # one scaffold, one split
        tests.add(tuple(parts["test"].tolist()))
    assert len(tests) > 1


def test_scaffold_split_keeps_the_moleculenet_train_and_deals_held_families_alike():
    """Train: the largest families while they fit (the MoleculeNet / OGB rule, whatever the
    seed); the families held out: dealt in a seeded order to valid while it fits, else test,
    so that valid and test hold new scaffolds of the same kind (plain reference below)."""
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    rings = ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCNCC1", "c1ccoc1", "C1CCOC1", "c1ccsc1"]
    smiles = [f"{r}{'C' * k}" for k in range(1, 4) for r in rings] + ["CCO", "CCN", "CCCl"]
    smiles += [f"c1ccc2ccccc2c1{'O' * k}" for k in range(1, 9)]  # one big scaffold family
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(smiles):
        groups.setdefault(
            MurckoScaffold.MurckoScaffoldSmiles(mol=Chem.MolFromSmiles(s)), []
        ).append(i)
    n_train, n_valid = int(0.8 * len(smiles) + 1e-9), int(0.1 * len(smiles) + 1e-9)
    train, held = [], []
    for g in sorted(groups.values(), key=lambda g: (-len(g), g[0])):
        if len(train) + len(g) <= n_train:
            train += g
        else:
            held.append(g)
    seen = set()
    for seed in range(4):
        valid, test = [], []
        for k in np.random.default_rng(seed).permutation(len(held)):
            (valid if len(valid) + len(held[k]) <= n_valid else test).extend(held[k])
        parts = {k: v.tolist() for k, v in scaffold_split(smiles, (0.8, 0.1, 0.1), seed).items()}
        assert parts == {"train": sorted(train), "valid": sorted(valid), "test": sorted(test)}
        seen.add(tuple(parts["test"]))
    assert len(seen) > 1  # the seed deals the held-out families, never the training ones


def test_csv_gzip_separate_files_and_store_keys(tmp_path, featurize_calls):
    rows = [{"smiles": s, "y": float(i)} for i, s in enumerate(CSV_SMILES)]
    gz = _write_csv(tmp_path / "mols.csv.gz", rows, compress=True)
    zinc = _csv_store(gz, ["y"], featurizer="zinc")
    ds = _whole(zinc)
    assert len(ds) == 12 and ds[0].x.shape[1] == 1 and ds[0].edge_attr.dim() == 1
    for i in (0, 3, 11):
        _assert_same_graph(ds[i], _expected_graph(CSV_SMILES[i], "zinc", 20))
    assert featurize_calls == [12]  # built
    built = _mtime(zinc)
    same = _csv_store(gz, ["y"], featurizer="zinc")
    assert same.folder == zinc.folder and _mtime(same) == built
    assert featurize_calls == [12]  # reused
    other = _csv_store(gz, ["y"], featurizer="ogb")
    assert other.folder != zinc.folder and featurize_calls == [12, 12]
    assert _whole(other)[0].x.shape[1] == 9
    _assert_same_graph(_whole(other)[5], _expected_graph(CSV_SMILES[5], "ogb", 20))
    # multi_hop_max_dist is applied when graphs are read: the same store, other hops
    hops = load_dataset(f"csv:{gz}", target_columns=["y"], multi_hop_max_dist=1)
    assert hops.train.store.folder == other.folder and featurize_calls == [12, 12]
    assert max(int(d.edge_input_hops) for d in hops.train) == 1
    for i, smiles in enumerate(hops.test.smiles()):
        _assert_same_graph(hops.test[i], _expected_graph(smiles, "ogb", 1))
    _write_csv(gz, rows + [{"smiles": "CCCl", "y": 12.0}], compress=True)  # content changed
    edited = _csv_store(gz, ["y"], featurizer="zinc")
    assert edited.folder not in (zinc.folder, other.folder) and len(edited) == 13
    assert featurize_calls == [12, 12, 13]

    parts = [
        _write_csv(tmp_path / f"{name}.csv", chunk)
        for name, chunk in (("tr", rows[:8]), ("va", rows[8:10]), ("te", rows[10:]))
    ]
    spec = "csv:" + ",".join(map(str, parts))
    splits = load_dataset(spec)
    assert [len(splits.train), len(splits.valid), len(splits.test)] == [8, 2, 2]
    assert len({s.store.folder for s in (splits.train, splits.valid, splits.test)}) == 3
    assert splits.target_names == ["y"]
    assert float(splits.test[1].y) == 11.0
    assert splits.test.smiles() == CSV_SMILES[10:]
    with pytest.raises(ValueError, match="three comma-separated paths"):
        load_dataset(f"csv:{parts[0]},{parts[1]}")
    with pytest.raises(ValueError, match="unknown dataset 'qm9'"):
        load_dataset("qm9")


# ---------------------------------------------------------------------------------------
# nci5k
# ---------------------------------------------------------------------------------------


def test_nci5k_subset_labels_features_and_split(store_dir, featurize_calls):
    splits = load_nci5k(5, limit=120)
    assert splits.name == "nci5k" and splits.featurizer == "ogb"
    assert splits.target_names == ["penalized_logp"] and splits.metric == "mae"
    total = len(splits.train) + len(splits.valid) + len(splits.test)
    assert total == 120  # the first 120 NCI molecules all parse
    assert [len(splits.train), len(splits.valid)] == [96, 12]
    _check_partition(splits, 120)
    assert all(isinstance(p, StoreGraphDataset) for p in (splits.train, splits.valid))
    assert featurize_calls == [120]
    base = open_nci(limit=120)
    assert base.folder == splits.train.store.folder
    assert featurize_calls == [120]  # the store is reused
    assert base.folder.parent == store_dir / "nci5k"
    smiles = base.smiles(range(len(base)))
    assert base.source_index.tolist() == list(range(120))
    for i in (0, 57, 119):
        d = base.graph(i, 5)
        assert d.x.shape[1] == 9 and d.edge_attr.shape[1] == 3 and has_graphormer_features(d)
        _assert_same_graph(d, _expected_graph(smiles[i], "ogb", 5))
        assert float(d.y) == pytest.approx(penalized_logp(smiles[i]), abs=1e-4)
        assert int(d.edge_input_hops) <= 5


def test_nci5k_reports_and_skips_bad_molecules(tmp_path, caplog):
    src = tmp_path / "nci.csv"
    src.write_text(
        "# comment\nCCO,20.2\nO=C1O[Al]23(OC1=O)(OC(=O)C(=O)O2)OC(=O)C(=O)O3,1\nc1ccccc1,0\n"
    )
    records = read_nci(str(src))
    assert records.rows.tolist() == [0, 2] and records.smiles == ["CCO", "c1ccccc1"]
    assert [(s.index, "[Al]" in s.smiles) for s in records.skipped] == [(1, True)]
    assert "cannot parse" in records.skipped[0].reason
    with caplog.at_level(logging.WARNING):
        cache = open_nci(str(src), progress=False)
    assert len(cache) == 2 and cache.smiles([0, 1]) == ["CCO", "c1ccccc1"]
    assert cache.source_index.tolist() == [0, 2]
    assert [f.index for f in cache.failures] == [1] and cache.meta["rows"] == 3
    assert "1 of 3 molecules could not be featurised" in caplog.text and "[Al]" in caplog.text


# ---------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------


def test_evaluate_masks_missing_targets():
    y_true = torch.tensor([[1.0, float("nan")], [2.0, 4.0], [float("nan"), 0.0]])
    y_pred = torch.tensor([[2.0, 100.0], [2.0, 1.0], [100.0, 1.0]])
    splits = DatasetSplits("csv:x", [], [], [], "ogb", ["a", "b"])
    out = splits.evaluate(y_pred, y_true)
    assert out["mae/a"] == pytest.approx(0.5) and out["mae/b"] == pytest.approx(2.0)
    assert out["mae"] == pytest.approx(1.25)
    assert out["rmse/b"] == pytest.approx(math.sqrt(5.0))
    single = regression_metrics(torch.tensor([1.0, 3.0]), torch.tensor([[2.0], [3.0]]))
    assert single == {"mae": 0.5, "rmse": pytest.approx(math.sqrt(0.5))}
    assert math.isnan(regression_metrics(torch.ones(2, 1), torch.full((2, 1), math.nan))["mae"])
    with pytest.raises(ValueError, match=r"\(3, 2\) and \(3, 1\)"):
        splits.evaluate(y_pred, y_true[:, :1])
