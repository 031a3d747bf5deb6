"""Calibrating a checkpoint on a CSV with targets (``graphormer-urpe calibrate``): for runs
that keep no calibrator (trained before intervals existed) or to recalibrate on other
molecules. The CSV's molecules must not be ones the model trained on."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .engines.stream import iter_predictions
from .intervals.calibration import (
    calibration_path,
    calibration_report,
    fit_calibration,
)
from .loading import load_models

__all__ = ["calibrate_from_csv"]


def calibrate_from_csv(
    checkpoint: str | Path,
    source: str | Path,
    target_columns: list[str],
    smiles_column: str = "smiles",
    device: str = "auto",
    workers: int = 0,
    batch_size: int = 64,
) -> dict[str, Any]:
    """Predict the molecules of ``source`` (a CSV with a SMILES column and one column per
    model target, in the model's order), fit a calibrator on them
    (:func:`~.intervals.calibration.fit_calibration`; an ensemble folder: normalised by its
    members' std) and write it where :func:`~.intervals.calibration.load_calibration` finds
    it. Rows that cannot be read or have no target are left out.

    Returns:
        A summary: the file written, the molecules used, and the calibrator's coverage and
        width (binary: ECE) on those same molecules.
    """
    import pandas as pd

    models = load_models(checkpoint, device)
    targets = models[0].target_names
    if len(target_columns) != len(targets):
        raise ValueError(
            f"{checkpoint} predicts {len(targets)} targets ({', '.join(targets)});"
            f" --target-columns names {len(target_columns)}"
        )
    table = pd.read_csv(source)
    missing = [c for c in [smiles_column, *target_columns] if c not in table.columns]
    if missing:
        raise ValueError(f"{source} has no column {', '.join(missing)}")
    y_all = table[target_columns].to_numpy(dtype=np.float64)  # [N, T]
    outputs, rows, similarity = [], [], []
    smiles = table[smiles_column].astype(str).tolist()
    preds = iter_predictions(models, smiles, batch_size=batch_size, workers=workers)
    for p in preds:
        if p.values is not None:
            outputs.append(p.values[None] if p.members is None else p.members)  # [K, T]
            rows.append(p.index)
            found = None if p.domain is None else p.domain.nearest_similarity
            similarity.append(math.nan if found is None else found)
    if not rows:
        raise ValueError(f"{source}: no molecule could be read")
    members = torch.stack(outputs, dim=1)  # [K, N, T]
    y = torch.from_numpy(y_all[rows])
    if not bool(torch.isfinite(y).any()):
        raise ValueError(f"{source}: no target values in {', '.join(target_columns)}")
    ensemble = len(models) > 1
    name = None if ensemble else Path(checkpoint).name
    sim = np.asarray(similarity) if np.isfinite(similarity).any() else None
    cal = fit_calibration(
        members, y, models[0].task_type, targets, source=Path(source).name, checkpoint=name,
        similarity=sim,
    )  # fmt: skip
    out = calibration_path(checkpoint)
    cal.save(out)
    known = int(torch.isfinite(y).any(dim=1).sum())
    report = calibration_report(cal, members, y, similarity=sim)
    return {"calibration": str(out), "molecules": known, **report}
