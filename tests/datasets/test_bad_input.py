"""Bad input: every case is answered by a clear error or by an explicit, logged skip.

One test per case of ``docs/bad_input.md``: invalid SMILES, empty molecules, single atoms,
salts, molecules above ``max_nodes``, atoms outside ZINC's types, missing targets, CSVs without
the named columns, empty splits and a loss that overflows.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rdkit import Chem

from graphormer_urpe.datasets import (
    DatasetSplits,
    InvalidMoleculeError,
    UnknownAtomTypeError,
    apply_input_policy,
    build_molecule_store,
    featurize_smiles,
    graph_sizes,
    load_dataset,
    ogb_smiles_to_graph,
    zinc_mol_to_graph,
)
from graphormer_urpe.datasets.sources.smiles_csv import open_csv
from graphormer_urpe.datasets.store import MoleculeStore, StoreGraphDataset
from graphormer_urpe.graph.batch import collate
from graphormer_urpe.graph.model import Graphormer, fit_tables, get_preset
from graphormer_urpe.graph.structure import UNREACHABLE
from graphormer_urpe.graph.transform import GraphormerFeatures
from graphormer_urpe.io.checkpoint import load_checkpoint
from graphormer_urpe.runtime import make_config
from graphormer_urpe.training import masked_loss, train

TINY = dict(num_layers=1, hidden_dim=16, ffn_dim=16, num_heads=2)
NONE_UNREADABLE = {f"unreadable_{k}": 0 for k in ("train", "valid", "test", "unsplit")}

# small valid molecules, 2 to 9 heavy atoms
GOOD = [
    "CCO",
    "CCN",
    "CCC",
    "c1ccccc1",
    "CC(=O)O",
    "CCOC",
    "C1CCCCC1",
    "OCCO",
    "c1ccncc1",
    "CC#N",
    "CCCl",
    "CC(C)C",
]


def _csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _csv_store(path: Path, target_columns: list[str], featurizer: str = "ogb") -> MoleculeStore:
    """The store of a whole CSV file (no split), the one ``load_dataset`` uses for it."""
    return open_csv(path, "smiles", featurizer, target_columns)


def _whole(store: MoleculeStore, multi_hop_max_dist: int = 5) -> StoreGraphDataset:
    """Every graph of a store, in source order."""
    return StoreGraphDataset(store, np.arange(len(store)), multi_hop_max_dist, "all")


def _forward(graphs: list, featurizer: str, **model: object) -> torch.Tensor:
    """Collate ``graphs`` and run a tiny Graphormer on them; returns ``[B, 1]``."""
    torch.manual_seed(0)
    config = fit_tables(get_preset("small", **TINY, **model), featurizer)
    net = Graphormer(config)
    batch = collate(graphs, config.multi_hop_max_dist, config.spatial_pos_max)
    out = net(batch)
    out.sum().backward()  # gradients flow (one training step would be finite too)
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    return out.detach()


# ---------------------------------------------------------------------------------------
# molecules
# ---------------------------------------------------------------------------------------


def test_invalid_smiles_are_skipped_with_row_and_smiles_or_raise_under_strict(tmp_path, caplog):
    smiles = GOOD[:3] + ["C1CC("] + GOOD[3:6] + ["XYZ"] + GOOD[6:]
    path = _csv(tmp_path / "mols.csv", [{"smiles": s, "y": float(i)} for i, s in enumerate(smiles)])
    with caplog.at_level(logging.WARNING):
        store = _csv_store(path, ["y"])
    assert len(store) == len(GOOD) and store.meta["rows"] == len(smiles)
    assert [(f.index, f.smiles) for f in store.failures] == [(3, "C1CC("), (7, "XYZ")]
    assert all("C1CC(" in f.reason or "XYZ" in f.reason for f in store.failures)
    assert re.search(re.escape(f"{path}: row 3 ") + r"(\(line 5\) )?'C1CC\('", caplog.text)
    assert re.search(r"row 7 (\(line 9\) )?'XYZ'", caplog.text)
    assert f"{path}: 2 of {len(smiles)} molecules could not be featurised" in caplog.text
    assert store.source_index.tolist() == [r for r in range(len(smiles)) if r not in (3, 7)]
    assert store.smiles(range(len(store))) == GOOD
    # the reasons stay with the store
    meta = json.loads((store.folder / "meta.json").read_text())
    assert [f["index"] for f in meta["failures"]] == [3, 7]

    with pytest.raises(InvalidMoleculeError) as info:
        load_dataset(f"csv:{path}", target_columns=["y"], strict=True)
    msg = str(info.value)
    assert str(path) in msg and "2 invalid molecule(s)" in msg
    assert "row 3 (line 5) 'C1CC('" in msg and "row 7 (line 9) 'XYZ'" in msg


def test_skipped_row_warnings_give_the_file_line(tmp_path, caplog):
    rows = [{"smiles": s, "y": 1.0} for s in GOOD[:3] + ["C1CC("]]
    path = _csv(tmp_path / "line.csv", rows)
    with caplog.at_level(logging.WARNING):
        store = _csv_store(path, ["y"])
    assert [f.index for f in store.failures] == [3]
    assert f"{path}: row 3 (line 5) 'C1CC('" in caplog.text


def test_empty_molecules_are_invalid(tmp_path, caplog):
    for featurizer in ("ogb", "zinc"):
        for text in ("", "   "):
            with pytest.raises(InvalidMoleculeError, match=re.escape(f"empty SMILES {text!r}")):
                featurize_smiles(text, featurizer)
    for fn in (ogb_smiles_to_graph, zinc_mol_to_graph):
        with pytest.raises(InvalidMoleculeError, match="no atoms"):
            fn(Chem.Mol())  # a molecule object with zero atoms
    rows = [{"smiles": s, "y": 1.0} for s in GOOD[:4]]
    rows[1]["smiles"] = ""
    path = _csv(tmp_path / "empty.csv", rows)
    with caplog.at_level(logging.WARNING):
        store = _csv_store(path, ["y"])
    assert len(store) == 3 and [f.index for f in store.failures] == [1]
    assert store.failures[0].reason == "empty SMILES ''"
    assert re.search(r"row 1 (\(line 3\) )?'' left out: empty SMILES", caplog.text)
    with pytest.raises(InvalidMoleculeError, match=r"row 1 \(line 3\) '': empty SMILES"):
        load_dataset(f"csv:{path}", target_columns=["y"], strict=True)


def test_single_atom_is_a_valid_graph_that_trains(tmp_path):
    features = GraphormerFeatures(5)
    for featurizer, atom in (("ogb", "[Na+]"), ("ogb", "C"), ("zinc", "C"), ("zinc", "[O-]")):
        g = features(featurize_smiles(atom, featurizer))
        assert g.num_nodes == 1 and g.edge_index.shape == (2, 0)
        assert g.spatial_pos.tolist() == [0] and g.degree.tolist() == [0]
        assert torch.isfinite(_forward([g], featurizer)).all()  # alone in its batch
        mixed = _forward([g, features(featurize_smiles("CCO", featurizer))], featurizer)
        assert mixed.shape == (2, 1) and torch.isfinite(mixed).all()
    # through a stored dataset too
    rows = [{"smiles": s, "y": float(i)} for i, s in enumerate(["C", "O", "[Na+]", "CCO"])]
    store = _csv_store(_csv(tmp_path / "one.csv", rows), ["y"])
    ds = _whole(store)
    assert len(ds) == 4 and not store.failures and graph_sizes(ds).tolist() == [1, 1, 1, 3]
    assert ds[2].spatial_pos.tolist() == [0] and ds[2].edge_index.shape == (2, 0)
    assert torch.isfinite(_forward([ds[i] for i in range(4)], "ogb")).all()


def test_salts_stay_one_disconnected_graph(tmp_path, caplog):
    features = GraphormerFeatures(5)
    for featurizer, salt, counter in (
        ("ogb", "CC(=O)[O-].[Na+]", [4]),
        ("zinc", "CC(=O)[O-].C[NH3+]", [4, 5]),
    ):
        g = features(featurize_smiles(salt, featurizer))
        n = g.num_nodes
        spd = g.spatial_pos.view(n, n)
        acid = [i for i in range(n) if i not in counter]
        assert (spd[acid][:, counter] == UNREACHABLE).all()  # other component: unreachable
        assert (spd[acid][:, acid] < UNREACHABLE).all()
        graphs = [g, features(featurize_smiles("CCO", featurizer))]
        assert torch.isfinite(_forward(graphs, featurizer)).all()
        # masking the unreachable pairs (spatial_pos_max below 510) is finite as well
        assert torch.isfinite(_forward(graphs, featurizer, spatial_pos_max=20)).all()
    rows = [{"smiles": s, "y": 1.0} for s in ["CC(=O)[O-].[Na+]", "[Na+].[Cl-]", "CCO"]]
    with caplog.at_level(logging.WARNING):
        store = _csv_store(_csv(tmp_path / "s.csv", rows), ["y"])
    assert len(store) == 3 and not store.failures and "left out" not in caplog.text
    ds = _whole(store)
    assert graph_sizes(ds).tolist() == [5, 2, 3]
    assert (ds[1].spatial_pos == UNREACHABLE).sum() == 2  # two ions, unreachable from each other


def test_unknown_zinc_atom_types_are_named_and_skipped_or_raise(tmp_path, caplog):
    with pytest.raises(UnknownAtomTypeError, match=r"SMILES '\[U\]': atom 0 has type 'U'"):
        featurize_smiles("[U]", "zinc")  # uranium
    with pytest.raises(UnknownAtomTypeError, match=r"atom 0 has type 'C -'"):
        featurize_smiles("[C-]#[O+]", "zinc")  # a charge state ZINC does not have
    assert featurize_smiles("C[Se]C", "ogb").num_nodes == 3  # OGB encodes every element

    smiles = GOOD[:4] + ["C[Se]C"] + GOOD[4:6] + ["[C-]#[O+]"]
    path = _csv(tmp_path / "z.csv", [{"smiles": s, "y": 1.0} for s in smiles])
    with caplog.at_level(logging.WARNING):
        store = _csv_store(path, ["y"], featurizer="zinc")
    assert len(store) == 6 and [f.index for f in store.failures] == [4, 7]
    assert re.search(r"row 4 (\(line 6\) )?'C\[Se\]C'", caplog.text)
    assert "atom 1 has type 'Se'" in caplog.text
    assert re.search(r"row 7 (\(line 9\) )?'\[C-\]#\[O\+\]'", caplog.text)
    assert "2 of 8 molecules could not be featurised" in caplog.text
    # the OGB featuriser encodes both: a store of its own with no failure
    ogb = _csv_store(path, ["y"], featurizer="ogb")
    assert ogb.folder != store.folder and len(ogb) == 8 and not ogb.failures
    with pytest.raises(InvalidMoleculeError) as info:
        load_dataset(f"csv:{path}", target_columns=["y"], featurizer="zinc", strict=True)
    msg = str(info.value)
    assert str(path) in msg and "row 4 (line 6) 'C[Se]C'" in msg and "type 'Se'" in msg


# ---------------------------------------------------------------------------------------
# targets, columns, splits
# ---------------------------------------------------------------------------------------


def _split_rows(n_train: int = 8, n_valid: int = 2, n_test: int = 2) -> list[dict]:
    labels = ["train"] * n_train + ["valid"] * n_valid + ["test"] * n_test
    return [
        {"smiles": GOOD[i % len(GOOD)], "t1": float(i), "t2": float(-i), "fold": lab}
        for i, lab in enumerate(labels)
    ]


def _load_split_rows(tmp_path, path):
    """``path`` (written from :func:`_split_rows`) loaded with its two targets and fold."""
    return load_dataset(
        f"csv:{path}", root=str(tmp_path / "r"), target_columns=["t1", "t2"], split_column="fold"
    )


def test_missing_targets_unlabelled_train_rows_skipped_partial_rows_masked(tmp_path, caplog):
    rows = _split_rows()
    for i in (1, 4):  # every target missing
        rows[i]["t1"] = rows[i]["t2"] = ""
    rows[2]["t2"] = "NA"  # partially missing: kept
    rows[9]["t1"] = rows[9]["t2"] = ""  # an unlabelled valid row: kept
    path = _csv(tmp_path / "t.csv", rows)
    with caplog.at_level(logging.INFO):
        splits = _load_split_rows(tmp_path, path)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (6, 2, 2)
    assert splits.dropped_train_unlabelled == 2 and splits.dropped_train_oversize == 0
    assert (
        f"csv:{path}: left 2 of 8 training graphs out: every target is missing "
        "(row 1 (line 3) 'CCN', row 4 (line 6) 'CC(=O)O')"
    ) in caplog.text
    assert "1 of 2 valid graphs have no target value; kept" in caplog.text
    y = torch.cat([d.y for d in splits.train])
    assert y.shape == (6, 2) and int(torch.isnan(y).sum()) == 1  # the partial row
    pred = torch.zeros_like(y)
    want = float(y[~torch.isnan(y)].abs().mean())
    assert masked_loss(pred, y, "l1").item() == pytest.approx(want)

    # no training row with a target: an error, not an empty run
    for r in rows[:8]:
        r["t1"] = r["t2"] = ""
    bare = _csv(tmp_path / "bare.csv", rows)
    with pytest.raises(ValueError, match=r"the train split is empty after filtering: of its 8"):
        _load_split_rows(tmp_path, bare)
    # a validation split without labels cannot select a checkpoint
    rows = _split_rows()
    for r in rows[8:10]:
        r["t1"] = r["t2"] = ""
    novalid = _csv(tmp_path / "novalid.csv", rows)
    with pytest.raises(ValueError, match=r"the valid split \(2 graphs\) has no target value"):
        _load_split_rows(tmp_path, novalid)
    # infinite or non-numeric targets are errors naming the row and column
    rows = _split_rows()
    rows[5]["t2"] = "inf"
    infinite = _csv(tmp_path / "inf.csv", rows)
    with pytest.raises(ValueError, match=r"row 5 \(line 7\): target column 't2' holds 'inf'"):
        load_dataset(f"csv:{infinite}", root=str(tmp_path / "r"), target_columns=["t1", "t2"])


def test_csv_without_the_named_columns(tmp_path):
    path = _csv(tmp_path / "cols.csv", _split_rows())
    present = "['smiles', 't1', 't2', 'fold']"
    for kwargs, missing in (
        (dict(smiles_column="SMILES"), "['SMILES']"),
        (dict(target_columns=["t1", "gap"]), "['gap']"),
        (dict(split_column="split"), "['split']"),
    ):
        with pytest.raises(ValueError) as info:
            load_dataset(f"csv:{path}", root=str(tmp_path / "r"), **kwargs)
        msg = str(info.value)
        assert str(path) in msg and f"{missing} not found" in msg and present in msg
    header_only = tmp_path / "header.csv"
    header_only.write_text("smiles,y\n")
    with pytest.raises(ValueError, match=re.escape(f"{header_only}: no data rows")):
        load_dataset(f"csv:{header_only}", root=str(tmp_path / "r"), target_columns=["y"])


def test_empty_splits_are_errors_naming_split_and_dataset(tmp_path):
    rows = _split_rows(n_test=0)
    path = _csv(tmp_path / "notest.csv", rows)
    name = f"csv:{path}"
    with pytest.raises(ValueError) as info:
        load_dataset(name, root=str(tmp_path / "r"), split_column="fold")
    msg = str(info.value)
    assert msg.startswith(f"{name}: the test split is empty")
    assert str(path) in msg and "labels present: ['train', 'valid']" in msg
    # every test row invalid: the split column still names the empty split
    rows = _split_rows()
    rows[10]["smiles"] = rows[11]["smiles"] = "C1CC("
    path = _csv(tmp_path / "badtest.csv", rows)
    with pytest.raises(ValueError, match=r"the test split is empty: no valid row"):
        load_dataset(f"csv:{path}", root=str(tmp_path / "r"), split_column="fold")
    # too few molecules for a random split
    tiny = _csv(tmp_path / "tiny.csv", [{"smiles": s, "y": 1.0} for s in GOOD[:3]])
    with pytest.raises(ValueError, match=r"the valid split is empty: a random split of 3"):
        load_dataset(f"csv:{tiny}", root=str(tmp_path / "r"))
    # every molecule invalid: the file is named, with the reasons
    bad = _csv(tmp_path / "allbad.csv", [{"smiles": "C1CC(", "y": 1.0}, {"smiles": "", "y": 2}])
    with pytest.raises(ValueError, match=re.escape(f"{bad}: no valid molecule among 2 rows")):
        load_dataset(f"csv:{bad}", root=str(tmp_path / "r"), target_columns=["y"])
    # three files: the one without a valid molecule is named
    good = [_csv(tmp_path / f"{p}.csv", [{"smiles": s, "y": 1.0} for s in GOOD]) for p in "ab"]
    with pytest.raises(ValueError, match=re.escape(f"{bad}: no valid molecule")):
        load_dataset(f"csv:{good[0]},{bad},{good[1]}", root=str(tmp_path / "r"))


def test_empty_column_split_names_the_split_column(tmp_path):
    path = _csv(tmp_path / "notest.csv", _split_rows(n_test=0))
    with pytest.raises(ValueError, match="the test split is empty") as info:
        load_dataset(f"csv:{path}", split_column="fold")
    assert "'fold'" in str(info.value)


# ---------------------------------------------------------------------------------------
# max_nodes
# ---------------------------------------------------------------------------------------


def test_max_nodes_drops_oversize_graphs_from_train_only(tmp_path, caplog):
    rows = _split_rows()
    big = "CCCCCCCCCCCCCCCC"  # 16 atoms
    bigger = "CCCCCCCCCCCCCCCCCCCC"  # 20 atoms
    rows[2]["smiles"], rows[6]["smiles"] = big, bigger
    rows[9]["smiles"], rows[11]["smiles"] = bigger, big
    path = _csv(tmp_path / "big.csv", rows)
    kwargs = dict(root=str(tmp_path / "r"), target_columns=["t1"], split_column="fold")
    plain = load_dataset(f"csv:{path}", **kwargs)
    assert (len(plain.train), len(plain.valid), len(plain.test)) == (8, 2, 2)
    assert plain.input_report() == {
        "max_nodes": None,
        "dropped_train_unlabelled": 0,
        "dropped_train_oversize": 0,
        "oversize_valid": 0,
        "oversize_test": 0,
        **NONE_UNREADABLE,
    }
    with caplog.at_level(logging.WARNING):
        splits = load_dataset(f"csv:{path}", max_nodes=10, **kwargs)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (6, 2, 2)
    assert graph_sizes(splits.train).max() <= 10
    assert graph_sizes(splits.valid).tolist() == graph_sizes(plain.valid).tolist()
    assert splits.input_report() == {
        "max_nodes": 10,
        "dropped_train_unlabelled": 0,
        "dropped_train_oversize": 2,
        "oversize_valid": 1,
        "oversize_test": 1,
        **NONE_UNREADABLE,
    }
    assert (
        "left 2 of 8 training graphs out: more than max_nodes=10 atoms (largest 20; "
        f"row 2 (line 4) {big!r}, row 6 (line 8) {bigger!r})"
    ) in caplog.text
    assert (
        "1 of 2 valid graphs have more than max_nodes=10 atoms (largest 20; row 9 (line 11)"
    ) in caplog.text
    assert "1 of 2 test graphs have more than max_nodes=10 atoms" in caplog.text
    assert "kept and evaluated anyway" in caplog.text
    with pytest.raises(ValueError, match="8 have more than max_nodes=1 atoms"):
        load_dataset(f"csv:{path}", max_nodes=1, **kwargs)
    with pytest.raises(ValueError, match="max_nodes must be a positive"):
        load_dataset(f"csv:{path}", max_nodes=0, **kwargs)


def test_max_nodes_on_a_memory_mapped_store(tmp_path, caplog):
    smiles = GOOD + ["CCCCCCCCCCCCCCCC", "CCCCCCCCCCCC"]
    y = np.arange(len(smiles), dtype=np.float64)
    y[3] = np.nan  # an unlabelled training molecule
    build_molecule_store(tmp_path / "store", smiles, y, progress=False)
    store = MoleculeStore(tmp_path / "store")
    sizes = [ogb_smiles_to_graph(s).num_nodes for s in smiles]
    parts = {
        "train": np.array([0, 1, 2, 3, 12, 4, 5, 6, 7]),
        "valid": np.array([8, 13, 9]),
        "test": np.array([10, 11]),
    }
    ds = {k: StoreGraphDataset(store, v, 5, k) for k, v in parts.items()}
    assert graph_sizes(ds["train"]).tolist() == [sizes[i] for i in parts["train"]]
    splits = DatasetSplits("stored", ds["train"], ds["valid"], ds["test"], "ogb", ["y"])
    with caplog.at_level(logging.WARNING):
        out = apply_input_policy(splits, max_nodes=10)
    assert isinstance(out.train, StoreGraphDataset)
    assert out.train.source_index.tolist() == [0, 1, 2, 4, 5, 6, 7]
    assert (out.dropped_train_unlabelled, out.dropped_train_oversize) == (1, 1)
    assert (out.oversize_valid, out.oversize_test) == (1, 0) and len(out.valid) == 3
    assert "every target is missing (row 3)" in caplog.text
    assert "more than max_nodes=10 atoms (largest 16; row 12)" in caplog.text
    assert "1 of 3 valid graphs have more than max_nodes=10 atoms (largest 12; row 13)" in (
        caplog.text
    )
    with pytest.raises(ValueError, match="stored: the test split is empty"):
        apply_input_policy(replace(splits, test=StoreGraphDataset(store, np.zeros(0), 5)))


# ---------------------------------------------------------------------------------------
# training: a loss that overflows
# ---------------------------------------------------------------------------------------


def test_nonfinite_loss_stops_with_a_checkpoint_and_a_message(tmp_path):
    rows = _split_rows()
    for r in rows:
        r["t1"] = 1e38  # squared, it overflows float32
    path = _csv(tmp_path / "huge.csv", rows)
    out = tmp_path / "run"
    config = make_config(
        "small",
        model_overrides=TINY,
        dataset=f"csv:{path}",
        data_root=str(tmp_path / "r"),
        out=str(out),
        target_columns=["t1"],
        split_column="fold",
        max_steps=3,
        batch_size=4,
        warmup_steps=1,
        loss="mse",
        normalize_targets=False,  # raw targets: the squared error itself overflows
        device="cpu",
        precision="fp32",
        threads=1,
    )
    with pytest.raises(RuntimeError, match=r"non-finite loss at step 0.*nonfinite\.pt"):
        train(config, progress=False)
    ckpt = load_checkpoint(out / "nonfinite.pt")
    weights = ckpt["model"]
    assert weights and all(
        torch.isfinite(w).all() for w in weights.values() if w.is_floating_point()
    )


def test_unreadable_test_rows_are_counted_and_test_predictions_written(tmp_path, caplog):
    """A test row RDKit cannot read is counted by split and named in the final log line; the
    test predictions file lists every scored test molecule with its SMILES, true value and
    prediction, and its MAE is the run's test MAE."""
    rows = _split_rows(n_test=4)
    rows[11]["smiles"] = "C1CC"  # unclosed ring: unreadable, in the test split
    rows[12]["t2"] = ""  # a missing test label stays an empty cell
    path = _csv(tmp_path / "t.csv", rows)
    out = tmp_path / "run"
    config = make_config(
        "small", model_overrides=TINY, dataset=f"csv:{path}", data_root=str(tmp_path / "r"),
        out=str(out), target_columns=["t1", "t2"], split_column="fold", max_steps=4,
        batch_size=4, warmup_steps=1, device="cpu", threads=1,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        metrics = train(config, progress=False)
    assert metrics["unreadable_test"] == 1 and metrics["unreadable_train"] == 0
    assert "over 3 test molecules (1 test rows unreadable)" in caplog.text
    table = pd.read_csv(out / "test_predictions.csv")
    assert list(table.columns) == [
        "smiles",
        "source_row",
        "true_t1",
        "pred_t1",
        "true_t2",
        "pred_t2",
    ]
    assert table["source_row"].tolist() == [10, 12, 13]
    assert table["smiles"].tolist() == [rows[i]["smiles"] for i in (10, 12, 13)]
    assert table["true_t1"].tolist() == [10.0, 12.0, 13.0]
    assert table["true_t2"].isna().tolist() == [False, True, False]
    for name in ("t1", "t2"):
        error = (table[f"true_{name}"] - table[f"pred_{name}"]).abs().mean()  # missing skipped
        assert error == pytest.approx(metrics[f"test_mae/{name}"], rel=1e-4)
    # a random split leaves unreadable rows out before splitting
    random_config = replace(config, split_column=None, out=str(tmp_path / "random"))
    assert train(random_config, progress=False)["unreadable_unsplit"] == 1
