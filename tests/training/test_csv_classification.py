"""Binary classification on a SMILES CSV: labels checked, BCE, ROC-AUC and PRC-AUC."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from graphormer_urpe.datasets import load_dataset
from graphormer_urpe.datasets.metrics import classification_metrics
from graphormer_urpe.training import train
from tests.helpers import SMILES, tiny_train_config


def _rocauc(labels: list[float], scores: list[float]) -> float:
    """Plain reference: the share of (positive, negative) pairs ranked right, ties half."""
    pos = [s for y, s in zip(labels, scores, strict=True) if y == 1]
    neg = [s for y, s in zip(labels, scores, strict=True) if y == 0]
    right = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return right / (len(pos) * len(neg))


def _average_precision(labels: list[float], scores: list[float]) -> float:
    """Plain reference for distinct scores: the mean over positives of the precision among
    the molecules scored at least as high."""
    ranked = [y for _, y in sorted(zip(scores, labels, strict=True), reverse=True)]
    hits, total = 0, 0.0
    for k, y in enumerate(ranked, start=1):
        if y == 1:
            hits += 1
            total += hits / k
    return total / hits


def test_classification_metrics_match_plain_references():
    gen = torch.Generator().manual_seed(0)
    y = (torch.rand(60, 3, generator=gen) > 0.6).double()
    y[::7, 0] = math.nan  # missing labels are ignored
    y[:, 2] = 1.0  # one class only: no ranking, left out of the mean
    scores = torch.randn(60, 3, generator=gen, dtype=torch.float64)
    got = classification_metrics(scores, y, ["a", "b", "c"])
    want_roc, want_ap = [], []
    for t in (0, 1):
        keep = ~torch.isnan(y[:, t])
        labels, s = y[keep, t].tolist(), scores[keep, t].tolist()
        want_roc.append(_rocauc(labels, s))
        want_ap.append(_average_precision(labels, s))
        assert got[f"rocauc/{'ab'[t]}"] == pytest.approx(want_roc[-1])
        assert got[f"prcauc/{'ab'[t]}"] == pytest.approx(want_ap[-1])
    assert "rocauc/c" not in got
    assert got["rocauc"] == pytest.approx(np.mean(want_roc))
    assert got["prcauc"] == pytest.approx(np.mean(want_ap))


def _labelled_csv(path, value=lambda s: float("N" in s.upper())) -> str:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "has_n"])
        for s in SMILES:
            w.writerow([s, value(s)])
    return str(path)


def test_csv_classification_trains_with_bce_and_reports_rocauc(tmp_path):
    _labelled_csv(tmp_path / "labels.csv")
    out = tmp_path / "run"
    table = tmp_path / "labels.csv"
    config = tiny_train_config(
        table, tmp_path / "data", out, task="classification", target_columns=["has_n"]
    )
    train(config, progress=False)
    m = json.loads((out / "metrics.json").read_text())
    assert m["task_type"] == "binary" and m["loss"] == "bce" and m["higher_is_better"]
    assert {"best_valid_rocauc", "test_rocauc", "test_prcauc"} <= set(m)
    preds = pd.read_csv(out / "test_predictions.csv")
    assert ((preds["pred_has_n"] > 0) & (preds["pred_has_n"] < 1)).all()  # probabilities
    labels, scores = preds["true_has_n"].tolist(), preds["pred_has_n"].tolist()
    if 0 < sum(labels) < len(labels):
        assert m["test_rocauc"] == pytest.approx(_rocauc(labels, scores), abs=1e-6)
    # labels other than 0 / 1 are refused, naming the row and the column
    bad = _labelled_csv(tmp_path / "bad.csv", value=lambda s: float(len(s)))
    with pytest.raises(ValueError, match=r"row 0 .*'has_n' holds .*labels 0 and 1"):
        load_dataset(f"csv:{bad}", root=str(tmp_path / "r"), task="classification")
    with pytest.raises(ValueError, match="applies to csv"):
        load_dataset("nci5k", task="classification")
