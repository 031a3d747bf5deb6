"""OGB-LSC submission files: predict a whole test split and write it in OGB's format.

:func:`submit_checkpoint` predicts every molecule of ``test-dev`` or ``test-challenge``
(PCQM4Mv2) or ``test`` (PCQM4M) with a trained checkpoint, in the split file's order, and
:func:`write_submission` writes ``y_pred_pcqm4m-v2_<split>.npz`` (``y_pred_pcqm4m.npz`` for v1)
with OGB's own ``save_test_submission``.

OGB's writer asserts the official split size (147,037 test-dev, 147,432 test-challenge) with a
bare ``assert``; the count is checked first here and a mismatch is a one-line error naming
both sizes. ``allow_partial=True`` writes a non-official split anyway (a sample, for checking
the pipeline end to end) with numpy in the same format: a compressed ``.npz`` holding one
float32 array ``y_pred`` ``[N]``. A submission is refused when any molecule of the split could
not be featurised (OGB needs a prediction for every one) or a prediction is not finite. Files
are written to a temporary folder inside ``out_dir`` and renamed into place.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .loading import load_model

__all__ = ["SubmissionError", "write_submission", "submit_checkpoint"]

log = logging.getLogger(__name__)


class SubmissionError(ValueError):
    """A submission file cannot be written as asked (wrong size, missing molecules, NaN)."""


def write_submission(
    y_pred: np.ndarray | torch.Tensor,
    split: str,
    out_dir: str | os.PathLike[str],
    dataset: str = "pcqm4mv2",
    *,
    allow_partial: bool = False,
) -> Path:
    """Write OGB's submission file for ``split``.

    Args:
        y_pred: ``[N]`` (or ``[N, 1]``) predictions in the split file's order.
        split: ``test-dev`` / ``test-challenge`` (PCQM4Mv2) or ``test`` (PCQM4M).
        out_dir: folder to write into (created).
        dataset: ``pcqm4mv2`` or ``pcqm4m``.
        allow_partial: write a split of non-official size with numpy (same format) instead of
            refusing.

    Returns:
        The written file.

    Raises:
        SubmissionError: wrong size (without ``allow_partial``), non-finite predictions, or a
            split that is not a test split.
    """
    import ogb.lsc

    from ..datasets.sources.pcqm_files import LSC_DATASETS

    if dataset not in LSC_DATASETS:
        raise SubmissionError(
            f"submission files exist for {sorted(LSC_DATASETS)}, not for {dataset!r}"
        )
    info = LSC_DATASETS[dataset]
    if split not in info.test_splits:
        raise SubmissionError(
            f"{info.title} submissions are for {' or '.join(info.test_splits)}, not {split!r}"
        )
    pred = torch.as_tensor(y_pred).detach().cpu().numpy().astype(np.float32)
    if pred.ndim == 2 and pred.shape[1] == 1:
        pred = pred[:, 0]
    if pred.ndim != 1:
        raise SubmissionError(f"expected [N] predictions, got shape {pred.shape}")
    bad = np.flatnonzero(~np.isfinite(pred))
    if bad.size:
        raise SubmissionError(
            f"{bad.size} of {pred.size} predictions are not finite (first at position "
            f"{int(bad[0])}); refusing to write a submission"
        )
    official = info.sizes[split]
    name = info.submission_file(split)
    if pred.size != official and not allow_partial:
        raise SubmissionError(
            f"{info.title} {split} has {pred.size:,} predictions, not the official "
            f"{official:,}, so OGB's save_test_submission would reject it; pass "
            f"--allow-partial (allow_partial=True) to write {name} anyway"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".submission-", dir=out_dir))
    try:
        if pred.size == official:
            evaluator = getattr(ogb.lsc, info.evaluator)()
            if info.name == "pcqm4mv2":
                evaluator.save_test_submission({"y_pred": pred}, str(tmp), mode=split)
            else:
                evaluator.save_test_submission({"y_pred": pred}, str(tmp))
        else:
            log.warning(
                "%s %s: writing %d predictions (official: %d) with numpy in OGB's format; "
                "this file is not a valid leaderboard submission",
                info.title,
                split,
                pred.size,
                official,
            )
            np.savez_compressed(tmp / name, y_pred=pred)
        os.replace(tmp / name, out_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote %d predictions to %s", pred.size, out_dir / name)
    return out_dir / name


def submit_checkpoint(
    checkpoint: str | os.PathLike[str],
    split: str,
    out_dir: str | os.PathLike[str],
    *,
    data_root: str | None = None,
    device: str = "auto",
    batch_size: int | None = None,
    allow_partial: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Predict a whole OGB-LSC test split with a checkpoint and write the submission file.

    Args:
        checkpoint: a ``best.pt`` / ``last.pt`` trained on ``pcqm4mv2`` or ``pcqm4m``.
        split: the test split (``test-dev``, ``test-challenge``; ``test`` for PCQM4M).
        out_dir: folder for the file.
        data_root: the dataset root, if it moved since training.
        device: ``auto``, ``cpu``, ``cuda``, ...
        batch_size: graphs per batch (default: the run's).
        allow_partial: see :func:`write_submission`.
        progress: show a progress bar.

    Returns:
        ``{"dataset", "split", "predictions", "official_size", "partial", "file",
        "mean_prediction"}``.

    Raises:
        SubmissionError: molecules of the split that could not be featurised, or a size
            mismatch without ``allow_partial``.
    """
    from ..datasets.sources.pcqm import open_lsc
    from ..datasets.sources.pcqm_files import LSC_DATASETS

    loaded = load_model(checkpoint, device)
    cfg = loaded.config if data_root is None else replace(loaded.config, data_root=data_root)
    if cfg.dataset not in LSC_DATASETS:
        raise SubmissionError(
            f"checkpoint {checkpoint} was trained on {cfg.dataset!r}; submission files exist "
            f"for {sorted(LSC_DATASETS)}"
        )
    info = LSC_DATASETS[cfg.dataset]
    if split not in info.test_splits:
        raise SubmissionError(
            f"{info.title} submissions are for {' or '.join(info.test_splits)}, not {split!r}"
        )
    data = open_lsc(cfg.dataset, cfg.data_root, progress=progress)
    missing = data.missing[split]
    if missing.size:
        raise SubmissionError(
            f"{info.title} {split}: {missing.size} molecule(s) could not be featurised (rows "
            f"{', '.join(map(str, missing[:10]))}{' ...' if missing.size > 10 else ''}); OGB "
            "needs a prediction for every molecule, so no submission is written"
        )
    dataset = data.split(split, loaded.model.config.multi_hop_max_dist)
    pred, _ = loaded.predict_dataset(dataset, batch_size, progress, split)
    pred = pred[:, 0]
    path = write_submission(pred, split, out_dir, info.name, allow_partial=allow_partial)
    return {
        "dataset": info.name,
        "split": split,
        "predictions": int(pred.numel()),
        "official_size": info.sizes[split],
        "partial": int(pred.numel()) != info.sizes[split],
        "file": str(path),
        "mean_prediction": float(pred.mean()),
    }
