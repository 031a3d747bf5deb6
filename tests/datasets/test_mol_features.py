"""``--mol-features``: normalised RDKit descriptors and Morgan counts joined to the graph
token."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from rdkit import Chem
from rdkit.Chem import AllChem, Descriptors

from graphormer_urpe.datasets import DescriptorNormalizer, load_dataset
from graphormer_urpe.graph import Graphormer, collate
from graphormer_urpe.graph.batch import _flatten
from graphormer_urpe.graph.flat_graphs import FlatGraphs
from graphormer_urpe.graph.model import fit_tables, get_preset
from graphormer_urpe.graph.published_weights import InteropError, config_to_hf
from graphormer_urpe.io.checkpoint import save_checkpoint
from graphormer_urpe.runtime.train_config import TrainConfig
from graphormer_urpe.training import init_from_checkpoint
from tests.helpers import SMILES, graph_zoo, heavy_atoms_csv


def _tiny(**kw) -> Graphormer:
    torch.manual_seed(0)
    config = get_preset("small", num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, **kw)
    return Graphormer(fit_tables(config, "ogb")).eval()


def test_flat_graphs_carry_molecule_features_through_slice_take_and_concat():
    graphs = graph_zoo(seed=3, count=6, node_features=2, edge_features=2)
    mol_x = torch.randn(6, 4)
    for g, row in zip(graphs, mol_x, strict=True):
        g.mol_x = row.view(1, -1)
    batch = collate(graphs, 5)
    torch.testing.assert_close(batch.mol_features, mol_x)  # graph order, [B, K]
    flat = FlatGraphs.concat([_flatten(graphs[:2], 5), _flatten(graphs[2:], 5)])
    assert np.array_equal(flat.mol_x, mol_x.numpy())
    assert np.array_equal(flat.slice(1, 4).mol_x, mol_x[1:4].numpy())
    assert np.array_equal(flat.take(np.array([5, 0, 3])).mol_x, mol_x[[5, 0, 3]].numpy())
    del graphs[0].mol_x  # one graph without them: none for the batch
    assert collate(graphs, 5).mol_features is None


def test_model_joins_molecule_features_before_the_head():
    graphs = graph_zoo(seed=4, count=5, node_features=2, edge_features=2)
    mol_x = torch.randn(5, 3)
    for g, row in zip(graphs, mol_x, strict=True):
        g.mol_x = row.view(1, -1)
    for head in ("linear", "transform"):
        model = _tiny(num_mol_features=3, head=head)
        batch = collate(graphs, model.config.multi_hop_max_dist)
        with torch.no_grad():
            h, _ = model.encoder.forward_tokens(batch, graph_tokens_only=True)
            want = model.head(torch.cat([h, mol_x], dim=1))  # plain reference
            torch.testing.assert_close(model(batch), want)
        first = next(m for m in model.head.modules() if isinstance(m, torch.nn.Linear))
        assert first.in_features == 16 + 3
        batch.mol_features = None
        with pytest.raises(ValueError, match="3 per-molecule features"):
            model(batch)


def test_csv_descriptors_are_normalised_with_the_training_split(tmp_path):
    table = heavy_atoms_csv(tmp_path / "mols.csv")
    splits = load_dataset(
        f"csv:{table}", target_columns=["heavy_atoms"], split="scaffold", mol_features="rdkit2d"
    )
    assert splits.num_mol_features == 202
    names = splits.mol_features["descriptors"]["names"]
    functions = dict(Descriptors._descList)

    def raw(ds) -> np.ndarray:  # plain reference: RDKit's own functions, molecule by molecule
        mols = [Chem.MolFromSmiles(s) for s in ds.smiles()]
        return np.array([[functions[n](m) for n in names] for m in mols], dtype=np.float64)

    norm = DescriptorNormalizer.fit(raw(splits.train), names)
    for part in ("train", "valid", "test"):
        ds = getattr(splits, part)
        got = torch.cat([g.mol_x for g in ds.__getitems__(list(range(len(ds))))]).numpy()
        np.testing.assert_allclose(got, norm.transform(raw(ds)), rtol=1e-5, atol=1e-5)
    # a run's record is applied as it is (evaluate, predict): never refitted
    record = dict(splits.mol_features)
    record["descriptors"] = {**record["descriptors"], "center": [0.0] * 202, "scale": [1.0] * 202}
    again = load_dataset(
        f"csv:{table}",
        target_columns=["heavy_atoms"],
        split="scaffold",
        mol_features="rdkit2d",
        mol_features_record=record,
    )
    low, high = np.array(norm.low), np.array(norm.high)
    want = np.nan_to_num(np.clip(np.clip(raw(again.valid), low, high), -5, 5), nan=0.0)
    got = torch.cat([g.mol_x for g in again.valid.__getitems__([0, 1])]).numpy()
    np.testing.assert_allclose(got, want[:2], atol=1e-4)
    with pytest.raises(ValueError, match="csv: datasets"):
        load_dataset("nci5k", mol_features="rdkit2d")


def _morgan(smiles: list[str]) -> np.ndarray:
    """Plain reference: RDKit's older hashed count fingerprint, log(1 + count)."""
    out = np.zeros((len(smiles), 2048))
    for i, s in enumerate(smiles):
        fp = AllChem.GetHashedMorganFingerprint(Chem.MolFromSmiles(s), 2, nBits=2048)
        for bit, count in fp.GetNonzeroElements().items():
            out[i, bit] = np.log1p(count)
    return out


def test_morgan_counts_follow_the_descriptors(tmp_path):
    table = heavy_atoms_csv(tmp_path / "mols.csv")
    both = load_dataset(
        f"csv:{table}",
        target_columns=["heavy_atoms"],
        split="scaffold",
        mol_features="rdkit2d+morgan",
    )
    alone = load_dataset(
        f"csv:{table}", target_columns=["heavy_atoms"], split="scaffold", mol_features="morgan"
    )
    assert both.num_mol_features == 202 + 2048 and alone.num_mol_features == 2048
    assert "descriptors" not in alone.mol_features
    for part in ("train", "test"):
        ds, ds_alone = getattr(both, part), getattr(alone, part)
        rows = list(range(len(ds)))
        got = torch.cat([g.mol_x for g in ds.__getitems__(rows)]).numpy()
        morgan = _morgan(ds.smiles())
        np.testing.assert_allclose(got[:, 202:], morgan, rtol=1e-6)
        got_alone = torch.cat([g.mol_x for g in ds_alone.__getitems__(rows)]).numpy()
        np.testing.assert_allclose(got_alone, morgan, rtol=1e-6)
        again = torch.cat([g.mol_x for g in ds.__getitems__(rows[::-1])]).numpy()  # kept
        np.testing.assert_allclose(again[:, 202:], morgan[::-1], rtol=1e-6)
    with pytest.raises(ValueError, match="csv: datasets"):
        load_dataset("nci5k", mol_features="morgan")


def test_init_from_resets_the_head_when_molecule_features_are_added(tmp_path):
    source = _tiny()
    cfg = TrainConfig(model=source.config)
    path = tmp_path / "plain.pt"
    save_checkpoint(path, {"config": cfg.to_dict(), "model": source.state_dict()})
    model, report = init_from_checkpoint(path, source.config, "ogb", 1, num_mol_features=7)
    assert model.config.num_mol_features == 7 and model.head.in_features == 16 + 7
    assert set(report.initialised) == {"head.weight", "head.bias"}
    for name, tensor in source.encoder.state_dict().items():
        torch.testing.assert_close(model.encoder.state_dict()[name], tensor)
    with pytest.raises(InteropError, match="num_mol_features=7"):
        config_to_hf(replace(model.config, final_norm=False, head="transform"))


def test_count_fingerprints_are_each_kind_side_by_side():
    from rdkit.Avalon import pyAvalonTools
    from rdkit.Chem import rdReducedGraphs

    from graphormer_urpe.datasets.featurizers.fingerprints import count_fingerprints

    smiles = [*SMILES[:6], "not a smiles", "[Na+].[Cl-]"]
    got = count_fingerprints(smiles, ["morgan", "avalon", "erg"])
    assert got.shape == (len(smiles), 2048 + 1024 + 315) and got.dtype == np.float32
    # a plain reference: each kind from RDKit's own calls, one molecule at a time
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        want = np.zeros(2048 + 1024 + 315)
        if mol is not None:
            morgan = AllChem.GetHashedMorganFingerprint(mol, 2, nBits=2048)
            for bit, count in morgan.GetNonzeroElements().items():
                want[bit] = min(count, 255)
            avalon = pyAvalonTools.GetAvalonCountFP(mol, nBits=1024)
            for bit, count in avalon.GetNonzeroElements().items():
                want[2048 + bit] = count
            want[2048 + 1024 :] = rdReducedGraphs.GetErGFingerprint(mol)
        np.testing.assert_allclose(got[i], want, rtol=1e-6, err_msg=s)
    assert not got[smiles.index("not a smiles")].any()
    alone = count_fingerprints(smiles, ["erg"])
    np.testing.assert_array_equal(alone, got[:, 2048 + 1024 :])
    with pytest.raises(ValueError, match="unknown fingerprints"):
        count_fingerprints(smiles, ["maccs"])
