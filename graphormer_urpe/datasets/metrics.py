r"""The default metrics over non-missing targets: MAE and RMSE for regression, ROC-AUC and
PRC-AUC (average precision) for binary classification."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["regression_metrics", "classification_metrics"]


def regression_metrics(
    y_pred: Tensor, y_true: Tensor, target_names: Sequence[str] | None = None
) -> dict[str, float]:
    r"""MAE and RMSE over the non-missing targets.

    .. math::

        \mathrm{MAE}_t = \frac{1}{|M_t|}\sum_{i \in M_t} |\hat y_{it} - y_{it}|, \qquad
        \mathrm{MAE} = \frac{1}{T'} \sum_{t} \mathrm{MAE}_t

    where :math:`M_t` are the rows whose target :math:`t` is not ``NaN`` and the average runs
    over the :math:`T'` targets with at least one value (likewise RMSE).

    Args:
        y_pred: ``[N, T]`` (or ``[N]`` for one target) predictions.
        y_true: ``[N, T]`` (or ``[N]``) targets, ``NaN`` = missing (ignored).
        target_names: names for the per-target entries (only reported when ``T > 1``).

    Returns:
        ``{"mae", "rmse"}`` and, for ``T > 1``, ``"mae/<name>"`` and ``"rmse/<name>"``.
        ``NaN`` when no target value is present.
    """
    pred, true, names = _as_table(y_pred, y_true, target_names)
    num_targets = true.shape[1]
    mask = ~torch.isnan(true)
    out: dict[str, float] = {}
    per_mae, per_rmse = [], []
    for t in range(num_targets):
        m = mask[:, t]
        if not bool(m.any()):
            continue
        err = pred[m, t] - true[m, t]
        mae = float(err.abs().mean())
        rmse = float(err.pow(2).mean().sqrt())
        per_mae.append(mae)
        per_rmse.append(rmse)
        if num_targets > 1:
            out[f"mae/{names[t]}"] = mae
            out[f"rmse/{names[t]}"] = rmse
    out["mae"] = sum(per_mae) / len(per_mae) if per_mae else math.nan
    out["rmse"] = sum(per_rmse) / len(per_rmse) if per_rmse else math.nan
    return out


def _as_table(
    y_pred: Tensor, y_true: Tensor, target_names: Sequence[str] | None
) -> tuple[Tensor, Tensor, list[str]]:
    """``[N, T]`` float64 predictions and targets on the CPU, and ``T`` target names."""
    pred = torch.as_tensor(y_pred).detach().to("cpu", torch.float64)
    true = torch.as_tensor(y_true).detach().to("cpu", torch.float64)
    if pred.dim() == 1:
        pred = pred.unsqueeze(1)
    if true.dim() == 1:
        true = true.unsqueeze(1)
    if pred.shape != true.shape or pred.dim() != 2:
        raise ValueError(
            f"y_pred and y_true must both be [N, T]; got {tuple(y_pred.shape)} and "
            f"{tuple(y_true.shape)}"
        )
    num_targets = true.shape[1]
    names = list(target_names) if target_names is not None else [str(t) for t in range(num_targets)]
    if len(names) != num_targets:
        raise ValueError(f"{len(names)} target names for {num_targets} targets")
    return pred, true, names


def classification_metrics(
    y_pred: Tensor, y_true: Tensor, target_names: Sequence[str] | None = None
) -> dict[str, float]:
    """ROC-AUC and PRC-AUC (average precision) of binary tasks, averaged over the tasks whose
    labelled rows hold both classes (as OGB's evaluator does).

    Args:
        y_pred: ``[N, T]`` scores (logits or probabilities: both metrics use only their order).
        y_true: ``[N, T]`` labels 0 / 1, ``NaN`` = missing (ignored).
        target_names: names for the per-task entries (only reported when ``T > 1``).

    Returns:
        ``{"rocauc", "prcauc"}`` and, for ``T > 1``, ``"rocauc/<name>"`` and
        ``"prcauc/<name>"``; ``NaN`` when no task has both classes.
    """
    from sklearn.metrics import average_precision_score, roc_auc_score

    pred, true, names = _as_table(y_pred, y_true, target_names)
    out: dict[str, float] = {}
    per_roc, per_prc = [], []
    for t in range(true.shape[1]):
        m = ~torch.isnan(true[:, t])
        labels, scores = true[m, t].numpy(), pred[m, t].numpy()
        if labels.size == 0 or labels.min() == labels.max():
            continue  # one class only: no ranking to score
        roc = float(roc_auc_score(labels, scores))
        prc = float(average_precision_score(labels, scores))
        per_roc.append(roc)
        per_prc.append(prc)
        if true.shape[1] > 1:
            out[f"rocauc/{names[t]}"] = roc
            out[f"prcauc/{names[t]}"] = prc
    out["rocauc"] = sum(per_roc) / len(per_roc) if per_roc else math.nan
    out["prcauc"] = sum(per_prc) / len(per_prc) if per_prc else math.nan
    return out
