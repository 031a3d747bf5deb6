"""``train --ensemble --init-from`` on a table fits the trees head, and ``predict``, ``evaluate``,
``explain`` and ``serve`` all give the network blended with its trees."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.inference.trees import (
    FINGERPRINTS,
    OLD_FINGERPRINTS,
    WEIGHTS,
    tree_chunk_inputs,
)
from tests.helpers import train_args

pytest.importorskip("lightgbm")


def test_a_run_started_from_a_checkpoint_blends_its_trees_everywhere(
    table, start_checkpoint, tmp_path, monkeypatch
):
    from graphormer_urpe.datasets.featurizers.molecule_graphs import featurize_smiles
    from graphormer_urpe.inference.embeddings import WithHeadInput
    from graphormer_urpe.inference.engines.stream import StreamModel, predict_smiles
    from graphormer_urpe.inference.loading import evaluate_checkpoint, load_model
    from graphormer_urpe.inference.trees import graph_tokens, load_embedder, trees_folder
    from graphormer_urpe.training import run_trees

    fits = []
    fit = run_trees.fit_trees
    monkeypatch.setattr(run_trees, "fit_trees", lambda *a, **k: fits.append(1) or fit(*a, **k))
    out = tmp_path / "ens"
    args = train_args(
        table, tmp_path / "data", out, "--ensemble", "2", "--init-from", str(start_checkpoint)
    )
    assert cli.main(args) == 0  # trees auto: on with --init-from on a table
    # the members share one fit (the same inputs), each with its own weight in the blend
    assert len(fits) == 1
    kept = [out / f"member-{i}" / "trees" for i in (0, 1)]
    for name in ("target_0.txt", "embedder.pt"):
        assert (kept[0] / name).read_bytes() == (kept[1] / name).read_bytes()
    described = [json.loads((k / "trees.json").read_text()) for k in kept]
    weights = [d.pop("net_weight") for d in described]
    assert all(w[0] in WEIGHTS for w in weights)
    assert described[0].pop("valid") != described[1].pop("valid")  # each its own network's
    assert described[0] == described[1]
    ensemble = json.loads((out / "metrics.json").read_text())
    member_tables = []
    for i in (0, 1):
        member = out / f"member-{i}"
        m = json.loads((member / "metrics.json").read_text())
        assert m["trees"]["net_weight"][0] in WEIGHTS
        assert "test_rmse_network" in m
        assert json.loads((member / "config.json").read_text())["trees"] == "on"
        # the member's test predictions: its network's blended with its trees, by hand
        tests = pd.read_csv(member / "test_predictions.csv")
        smiles = tests["smiles"].tolist()
        lm = load_model(member / "best.pt")
        assert lm.trees is not None and lm.embedder is not None
        assert lm.trees.fingerprints == FINGERPRINTS
        trees, embedder = lm.trees, load_embedder(trees_folder(member / "best.pt"), lm.device)
        lm.trees = None
        # the embedder is the starting model: the checkpoint's encoder, untouched by training
        started = load_model(start_checkpoint).model.state_dict()
        for name, value in embedder.state_dict().items():
            if name.startswith("encoder."):
                assert torch.equal(value, started[name]), name
        net, _ = predict_smiles(lm, smiles, progress=False, workers=0)  # the network alone
        graphs = [featurize_smiles(s, lm.featurizer) for s in smiles]
        with torch.no_grad():
            h = WithHeadInput(embedder)(graphs)
        c = embedder.config
        x, _ = tree_chunk_inputs(smiles)
        x = np.hstack([x, graph_tokens(h, c.num_targets, c.hidden_dim).numpy()])
        w = trees.net_weight[0]
        want = w * net[:, 0].numpy() + (1 - w) * trees.predict(x)[:, 0]
        np.testing.assert_allclose(tests["pred_heavy_atoms"], want, rtol=1e-4, atol=1e-4)
        member_tables.append(tests)
    # predict, evaluate and explain give the blend too
    smiles = member_tables[0]["smiles"].tolist()
    pred = tmp_path / "pred.csv"
    common = ["--workers", "0", "--no-progress"]
    from graphormer_urpe.inference.trees import Trees

    calls = []
    predict = Trees.predict
    monkeypatch.setattr(Trees, "predict", lambda t, x: calls.append(len(x)) or predict(t, x))
    assert (
        cli.main(
            [
                "predict",
                "--checkpoint",
                str(out),
                "--smiles",
                *smiles,
                *common,
                "--output",
                str(pred),
            ]
        )
        == 0
    )
    got = pd.read_csv(pred)["heavy_atoms"]
    assert sum(calls) == len(smiles)  # the members' shared trees predict each molecule once
    monkeypatch.undo()
    members = [load_model(out / f"member-{i}" / "best.pt") for i in (0, 1)]
    members[1].trees.fingerprints = OLD_FINGERPRINTS  # as if kept before Avalon and ErG
    with pytest.raises(ValueError, match="different fingerprints"):
        StreamModel(members)
    mean = (member_tables[0]["pred_heavy_atoms"] + member_tables[1]["pred_heavy_atoms"]) / 2
    np.testing.assert_allclose(got, mean, rtol=1e-4, atol=1e-4)
    evaluated = evaluate_checkpoint(out / "member-0" / "best.pt", progress=False)
    m0 = json.loads((out / "member-0" / "metrics.json").read_text())
    assert evaluated["rmse"] == pytest.approx(m0["test_rmse"], rel=1e-4)
    assert ensemble["test_rmse"] == pytest.approx(
        float(np.sqrt(((mean - member_tables[0]["true_heavy_atoms"]) ** 2).mean())), rel=1e-4
    )
    _served_blend(out, smiles, got.to_numpy())
    explained = tmp_path / "explain"
    args = ["explain", "--checkpoint", str(out), "--smiles", smiles[0], "--out", str(explained)]
    assert cli.main([*args, "--no-progress", "--no-pictures"]) == 0
    row = pd.read_csv(explained / "molecules.csv").iloc[0]
    atoms = pd.read_csv(explained / "atoms.csv")["heavy_atoms"].sum()
    assert row["heavy_atoms"] == pytest.approx(got[0], rel=1e-4, abs=1e-4)
    total = row["heavy_atoms_baseline"] + row["heavy_atoms_descriptors"] + atoms
    assert total == pytest.approx(row["heavy_atoms"], abs=1e-3)


def _served_blend(checkpoint, smiles: list[str], expected: np.ndarray) -> None:
    """``serve`` answers the blend too, and describes the trees."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    pytest.importorskip("httpx", reason="the test client needs httpx")
    from fastapi.testclient import TestClient

    from graphormer_urpe.serve import ModelService, create_app

    service = ModelService.load(checkpoint, workers=0)
    try:
        with TestClient(create_app(service)) as client:
            rows = client.post("/predict", json={"smiles": smiles}).json()["rows"]
            served = [r["heavy_atoms"] for r in rows]
            np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-4)
            weights = client.get("/model").json()["trees"]["net_weight"]
            assert len(weights) == 2 and all(w[0] in WEIGHTS for w in weights)
    finally:
        service.close()
