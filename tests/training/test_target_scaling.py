"""Standardised regression targets: the model predicts in the targets' own units, the loss is
taken on standardised values, a CSV run does not depend on the units its targets come in, and
``--loss mse`` selects the best checkpoint on RMSE."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import pandas as pd
import pytest
import torch

from graphormer_urpe.graph.batch import collate
from graphormer_urpe.graph.model import Graphormer, GraphormerConfig, fit_tables
from graphormer_urpe.graph.published_weights import InteropError, config_to_hf
from graphormer_urpe.io.checkpoint import load_checkpoint
from graphormer_urpe.training.run import masked_loss, train
from tests.helpers import SMILES, graph_zoo, tiny_train_config


def _tiny(**overrides) -> Graphormer:
    torch.manual_seed(0)
    config = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, **overrides)
    return Graphormer(fit_tables(config, "ogb"))


def _reference_loss(pred, target, kind, scale):
    """Plain loops: the mean over labelled entries of the loss of ``pred / scale`` against
    ``target / scale``."""
    total, count = 0.0, 0
    for i in range(target.shape[0]):
        for t in range(target.shape[1]):
            y = float(target[i, t])
            if math.isnan(y):
                continue
            d = (float(pred[i, t]) - y) / float(scale[t])
            if kind == "l1":
                total += abs(d)
            elif kind == "mse":
                total += d * d
            else:  # smooth_l1
                total += 0.5 * d * d if abs(d) < 1 else abs(d) - 0.5
            count += 1
    return total / count


@pytest.mark.parametrize("kind", ["l1", "mse", "smooth_l1"])
def test_loss_with_a_scale_is_the_loss_of_standardised_values(kind):
    g = torch.Generator().manual_seed(3)
    pred = torch.randn(7, 3, generator=g) * 10
    target = torch.randn(7, 3, generator=g) * 10
    target[1, 2] = target[4, 0] = float("nan")
    scale = torch.tensor([0.5, 4.0, 30.0])
    got = masked_loss(pred, target, kind, scale)
    assert got.item() == pytest.approx(_reference_loss(pred, target, kind, scale), rel=1e-5)
    unscaled = masked_loss(pred, target, kind)
    assert unscaled.item() == pytest.approx(
        _reference_loss(pred, target, kind, torch.ones(3)), rel=1e-5
    )


def test_the_model_returns_the_head_in_the_targets_units():
    graphs = graph_zoo(seed=2, count=4, node_features=2, edge_features=2)
    plain = _tiny(num_targets=2)
    scaled = _tiny(num_targets=2, target_mean=[5.0, -1.0], target_std=[10.0, 0.5])
    # the scaling is not in the state dict: weights move between the two as they are
    assert set(plain.state_dict()) == set(scaled.state_dict())
    scaled.load_state_dict(plain.state_dict())
    batch = collate(graphs, plain.config.multi_hop_max_dist)
    plain.eval(), scaled.eval()
    with torch.no_grad():
        want = plain(batch) * torch.tensor([10.0, 0.5]) + torch.tensor([5.0, -1.0])
        torch.testing.assert_close(scaled(batch), want)
    # the config carries it: a model rebuilt from the config predicts the same
    rebuilt = Graphormer(GraphormerConfig.from_dict(scaled.config.to_dict())).eval()
    rebuilt.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(batch), want)
    scaled.set_target_scaling(None, None)
    with torch.no_grad():
        torch.testing.assert_close(scaled(batch), plain(batch))
    with pytest.raises(ValueError, match="num_targets=2"):
        GraphormerConfig(num_targets=2, target_mean=[0.0], target_std=[1.0])
    with pytest.raises(ValueError, match="positive"):
        GraphormerConfig(num_targets=1, target_mean=[0.0], target_std=[0.0])
    hf = replace(plain.config, final_norm=False, head="transform", attention="graphormer")
    config_to_hf(hf)  # exportable without the scaling, refused with it
    with pytest.raises(InteropError, match="target_mean"):
        config_to_hf(replace(hf, target_mean=[1.0, 1.0], target_std=[2.0, 2.0]))


def _table(path, scale: float, shift: float):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms"])
        for s in SMILES:
            w.writerow([s, scale * sum(ch.isalpha() and ch not in "lr" for ch in s) + shift])
    return path


def test_a_csv_run_does_not_depend_on_the_units_of_its_targets(tmp_path):
    """The same molecules with targets ``y`` and ``1000 y - 7``: standardised, both runs
    train on the same numbers, so the second predicts ``1000 p - 7`` where the first
    predicts ``p``; with --no-normalize-targets the units matter."""
    runs = {}
    for name, scale, shift, extra in (
        ("units", 1.0, 0.0, {}),
        ("milli", 1000.0, -7.0, {}),
        ("raw", 1000.0, -7.0, {"normalize_targets": False}),
    ):
        table = _table(tmp_path / f"{name}.csv", scale, shift)
        out = tmp_path / name
        config = tiny_train_config(table, tmp_path / f"data-{name}", out, loss="mse", **extra)
        train(config, progress=False)
        runs[name] = (
            json.loads((out / "metrics.json").read_text()),
            pd.read_csv(out / "test_predictions.csv")["pred_heavy_atoms"].to_numpy(),
        )
    (m1, p1), (m2, p2), (m3, p3) = runs["units"], runs["milli"], runs["raw"]
    assert m1["normalized_targets"] and m2["normalized_targets"]
    assert not m3["normalized_targets"]
    assert m2["best_epoch"] == m1["best_epoch"]
    torch.testing.assert_close(
        torch.tensor(p2), torch.tensor(1000.0 * p1 - 7.0), rtol=1e-4, atol=1e-2
    )
    assert m2["test_rmse"] == pytest.approx(1000.0 * m1["test_rmse"], rel=1e-3)
    assert not torch.allclose(torch.tensor(p3), torch.tensor(1000.0 * p1 - 7.0), rtol=1e-3)


def test_mse_selects_the_best_checkpoint_on_rmse(tmp_path):
    table = _table(tmp_path / "t.csv", 1.0, 0.0)
    out = tmp_path / "run"
    train(tiny_train_config(table, tmp_path / "data", out, loss="mse"), progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    history = pd.read_csv(out / "history.csv")
    assert "valid_rmse" in history.columns and "valid_mae" not in history.columns
    assert metrics["best_valid_rmse"] == load_checkpoint(out / "best.pt")["best"]
    assert metrics["best_valid_rmse"] == pytest.approx(history["valid_rmse"].min())
    assert "best_valid_mae" in metrics  # every validation metric at the best epoch
    assert "test_rmse" in metrics and "test_mae" in metrics
