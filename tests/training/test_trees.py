"""The trees head: LightGBM beside the network, blended with weights chosen on validation (the
commands that give the blend: ``tests/cli/test_trees_blend.py``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from graphormer_urpe.inference.trees import (
    FINGERPRINTS,
    OLD_FINGERPRINTS,
    WEIGHTS,
    Trees,
    fit_trees,
    tree_chunk_inputs,
)
from graphormer_urpe.training import train
from tests.helpers import SMILES, tiny_train_config

pytest.importorskip("lightgbm")


def _rmse(p: torch.Tensor, y: torch.Tensor) -> float:
    return float(((p - y) ** 2).mean().sqrt())


def test_blend_weights_each_member_and_keeps_the_network_without_trees():
    rng = np.random.default_rng(0)
    trees = Trees("regression", ["a", "b"], [object(), None], [0.3, 1.0], 0, "set")
    members = torch.from_numpy(rng.normal(size=(3, 5, 2)))
    t = rng.normal(size=(5, 2))
    t[:, 1] = np.nan  # target b has no trees
    got = trees.blend(members, t).numpy()
    for k in range(3):
        for i in range(5):
            assert got[k, i, 0] == pytest.approx(0.3 * members[k, i, 0].item() + 0.7 * t[i, 0])
            assert got[k, i, 1] == members[k, i, 1].item()


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_choose_weights_takes_the_best_blend_on_validation(task):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(1)
    n = 80
    if task == "binary":
        y = torch.from_numpy(rng.integers(0, 2, size=(n, 1)).astype(float))
        net = (2 * y - 1) + torch.from_numpy(rng.normal(scale=1.5, size=(n, 1)))
        trees_out = (2 * y - 1).numpy() + rng.normal(scale=1.5, size=(n, 1))
        metric, higher = (lambda p, t: float(roc_auc_score(t[:, 0], p[:, 0]))), True
    else:
        y = torch.from_numpy(rng.normal(size=(n, 1)))
        net = y + torch.from_numpy(rng.normal(scale=0.5, size=(n, 1)))
        trees_out = y.numpy() + rng.normal(scale=0.7, size=(n, 1))
        metric, higher = _rmse, False
    y[3, 0] = math.nan  # a missing label is left out
    trees = Trees(task, ["t"], [object()], [1.0], 0, "set")
    trees.choose_weights(net, trees_out, y, metric, higher)
    known = ~torch.isnan(y[:, 0])
    scores = []
    for w in [i / 10 for i in range(11)]:
        blend = w * net[known] + (1 - w) * torch.from_numpy(trees_out[known.numpy()])
        scores.append(metric(blend, y[known]))
    best = int(np.argmax(scores) if higher else np.argmin(scores))
    assert trees.net_weight == [pytest.approx(best / 10)]
    assert trees.net_weight[0] in WEIGHTS
    assert trees.valid[0]["blend"] == pytest.approx(scores[best])
    assert trees.valid[0]["network"] == pytest.approx(scores[10])
    assert trees.valid[0]["trees"] == pytest.approx(scores[0])


@pytest.mark.parametrize("task", ["regression", "binary"])
def test_trees_learn_the_signal_and_read_back_the_same(task, tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    signal = 2 * x[:, 0] - x[:, 1]
    y = (signal > 0).astype(float) if task == "binary" else signal + rng.normal(0, 0.1, 300)
    parts = {"train": slice(0, 240), "valid": slice(240, 300)}
    xs = {p: x[s] for p, s in parts.items()}
    ys = {p: torch.from_numpy(y[s, None]).float() for p, s in parts.items()}
    trees = fit_trees(xs, ys, task, ["t"], seed=0, embedding_dim=0)
    out = trees.predict(xs["valid"])[:, 0]
    if task == "binary":
        from sklearn.metrics import roc_auc_score

        assert roc_auc_score(y[240:], out) > 0.9
    else:
        assert np.corrcoef(out, y[240:])[0, 1] > 0.9
    trees.net_weight = [0.4]
    trees.save(tmp_path / "trees")
    again = Trees.load(tmp_path / "trees")
    assert again.net_weight == [0.4] and again.task_type == task
    np.testing.assert_array_equal(again.predict(xs["valid"]), trees.predict(xs["valid"]))


@pytest.mark.parametrize("fingerprints", [FINGERPRINTS, OLD_FINGERPRINTS])
def test_attribution_is_exact_and_puts_the_present_bits_on_their_atoms(fingerprints):
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    smiles = SMILES * 3
    x, _ = tree_chunk_inputs(smiles, fingerprints)
    y = torch.tensor([[float(s.count("O") + 2 * s.count("N"))] for s in smiles])
    xs = {"train": x, "valid": x[:20]}
    y = {"train": y, "valid": y[:20]}
    trees = fit_trees(xs, y, "regression", ["t"], 0, 0, fingerprints=fingerprints)
    for s in ("CC(=O)Nc1ccc(O)cc1", "NCCN", "c1ccncc1"):
        row, _ = tree_chunk_inputs([s], fingerprints)
        atoms, rest, expected = trees.attribution(s, row)
        assert expected[0] + atoms.sum() + rest[0] == pytest.approx(
            trees.predict(row)[0, 0], abs=1e-5
        )
        # a plain reference: each present bit's value, shared among its environments' centres
        phi = trees.boosters[0].predict(row, pred_contrib=True)[0]
        mol = Chem.MolFromSmiles(s)
        info = rdFingerprintGenerator.AdditionalOutput()
        info.AllocateBitInfoMap()
        gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
        gen.GetCountFingerprintAsNumPy(mol, additionalOutput=info)
        want = np.zeros(mol.GetNumAtoms())
        for bit, places in info.GetBitInfoMap().items():
            for atom, _ in places:
                want[atom] += phi[202 + bit] / len(places)
        np.testing.assert_allclose(atoms[:, 0], want, atol=1e-9)


def test_trees_kept_before_avalon_and_erg_read_morgan_alone(tmp_path):
    smiles = SMILES * 2
    x, _ = tree_chunk_inputs(smiles, OLD_FINGERPRINTS)  # [N, 202 + 2048]
    assert x.shape[1] == 202 + 2048
    y = torch.tensor([[float(s.count("C"))] for s in smiles])
    y = {"train": y, "valid": y[:10]}
    trees = fit_trees({"train": x, "valid": x[:10]}, y, "regression", ["t"], 0, 0, 1, ("morgan",))
    trees.save(tmp_path / "trees")
    kept = json.loads((tmp_path / "trees" / "trees.json").read_text())
    assert kept["fingerprints"] == ["morgan"]
    del kept["fingerprints"]  # as such trees were written
    (tmp_path / "trees" / "trees.json").write_text(json.dumps(kept))
    again = Trees.load(tmp_path / "trees")
    assert again.fingerprints == OLD_FINGERPRINTS
    row, _ = tree_chunk_inputs(smiles, again.fingerprints)
    np.testing.assert_array_equal(again.predict(row), trees.predict(x))
    new, _ = tree_chunk_inputs(smiles)
    assert new.shape[1] == 202 + 2048 + 1024 + 315
    np.testing.assert_array_equal(new[:, : x.shape[1]], x)


def test_the_trees_leave_the_network_as_it_trains_without_them(table, start_checkpoint, tmp_path):
    from graphormer_urpe.io.checkpoint import load_checkpoint

    states = {}
    for trees in ("on", "off"):
        out = tmp_path / trees
        start = str(start_checkpoint)
        config = tiny_train_config(table, tmp_path / "data", out, trees=trees, init_from=start)
        train(config, progress=False)
        states[trees] = load_checkpoint(out / "best.pt")["model"]
    assert (tmp_path / "on" / "trees" / "embedder.pt").exists()  # its passes ran
    assert not (tmp_path / "off" / "trees").exists()
    for name, value in states["off"].items():
        assert torch.equal(states["on"][name], value), name


def test_trees_without_a_starting_model_read_no_graph_token(table, tmp_path):
    out = tmp_path / "run"
    train(tiny_train_config(table, tmp_path / "data", out, trees="on"), progress=False)
    kept = json.loads((out / "trees" / "trees.json").read_text())
    assert kept["embedding_dim"] == 0 and not (out / "trees" / "embedder.pt").exists()


def test_trees_on_needs_a_table(tmp_path):
    from graphormer_urpe.runtime.train_config import make_config, resolve_trees

    with pytest.raises(ValueError, match="tables of SMILES"):
        resolve_trees(make_config("small", dataset="zinc", trees="on"))
    table_cfg = make_config("small", dataset="csv:x.csv")
    assert resolve_trees(table_cfg).trees == "off"  # auto: no starting model
    assert resolve_trees(make_config("small", dataset="csv:x.csv", init_from="p")).trees == "on"
    assert (
        resolve_trees(make_config("small", dataset="csv:x.csv", init_from="p"), True).trees == "off"
    )
