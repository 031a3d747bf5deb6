r"""The default regression metrics (MAE, RMSE) over non-missing targets."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["regression_metrics"]


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
