r"""How sure: split-conformal intervals for regression, temperature-scaled probabilities for
binary tasks, both fitted on molecules the model did not train on (the validation split, or a
CSV with targets).

Regression. Each calibration molecule gives a nonconformity score per target: the absolute
residual :math:`|y - \hat y|` for one model, or for an ensemble the residual over the members'
spread, :math:`|y - \hat y| / (\sigma + \beta)` (``σ``: the members' standard deviation,
``β``: a tenth of its median on the calibration set, so that a molecule on which the
members agree does not get an empty interval). The sorted scores are kept, so an interval at
any level is read at prediction time: with ``n`` scores, ``q`` is the
:math:`\lceil (n + 1) \cdot \text{level} \rceil`-th smallest, and the interval is
:math:`\hat y \pm q` (one model) or :math:`\hat y \pm q (\sigma + \beta)` (an ensemble, wider
where its members disagree). On exchangeable molecules it holds the true value with
probability at least ``level`` (split conformal prediction, as crepes' ``ConformalRegressor``
computes it).

Binary tasks. One temperature ``T`` per task, fitted by minimising the log loss of
:math:`\frac1K \sum_k \text{sigmoid}(z_k / T)` over the calibration molecules (``z_k``: member
``k``'s logit); the expected calibration error (:func:`expected_calibration_error`) is
reported before and after. When the calibration molecules also chose the checkpoint (the
validation split of ``train``), the model looks more accurate on them than on new molecules,
and a temperature fitted there sharpens probabilities that new molecules then find
over-confident (measured on scaffold splits: docs/results/calibration.md). On those
molecules ``T`` is kept at 1 or above: the calibration may soften the probabilities, never
sharpen them. Molecules that played no part in training (``graphormer-urpe calibrate`` on a
CSV with targets) get the full range.

A run keeps its calibrator in ``calibration.json`` beside ``best.pt`` (an ensemble: in its
folder); :func:`load_calibration` finds it, and ``graphormer-urpe calibrate`` builds one for a
checkpoint that has none.

Example::

    cal = fit_calibration(members, y, "regression", ["logS"])  # members: [K, N, T]
    low, high = cal.interval(pred, std, 0.9)                   # [N, T] each
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..io.checkpoint import write_atomic

__all__ = [
    "CALIBRATION_FILE",
    "LEVELS",
    "REPORT_LEVEL",
    "Calibration",
    "calibration_path",
    "calibration_report",
    "coverage_lines",
    "coverage_tolerance",
    "error_spearman",
    "expected_calibration_error",
    "fit_calibration",
    "fit_temperature",
    "load_calibration",
    "uncalibrated_message",
]

CALIBRATION_FILE = "calibration.json"
"""A run's (or an ensemble folder's) calibrator, beside ``best.pt``."""

LEVELS = (0.8, 0.9, 0.95)
"""The levels whose coverage and width ``metrics.json`` and ``evaluate`` report."""

REPORT_LEVEL = 0.9
"""The level of the interval an ensemble's ``test_predictions.csv`` holds and whose test
coverage ``train``'s closing lines state."""

BETA_FRACTION = 0.1
"""``β`` of a normalised score over the median of the members' std on the calibration set."""

ECE_BINS = 10
"""Equal-width probability bins of :func:`expected_calibration_error`."""


@dataclass
class Calibration:
    """A fitted calibrator (see the module's text).

    Attributes:
        task_type: ``regression`` or ``binary``.
        target_names: the model's targets, in output order.
        scores: regression: per target, its nonconformity scores sorted ascending.
        beta: an ensemble's per-target ``β`` (scores normalised by ``σ + β``); ``None``:
            absolute residuals.
        temperature: binary: per task, its temperature.
        ece: binary: per task, ``{"before": ..., "after": ...}`` on the calibration set.
        source: what it was fitted on (``valid split``, a CSV's name).
        checkpoint: the checkpoint file it belongs to (``best.pt``); ``None``: an ensemble.
    """

    task_type: str
    target_names: list[str]
    scores: list[np.ndarray] = field(default_factory=list)
    beta: list[float] | None = None
    temperature: list[float] | None = None
    ece: list[dict[str, float]] | None = None
    source: str = "valid split"
    checkpoint: str | None = "best.pt"
    _quantiles: dict[float, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def normalized(self) -> bool:
        """Scores are residuals over the members' spread (an ensemble's calibrator)."""
        return self.beta is not None

    def quantiles(self, level: float) -> np.ndarray:
        """``[T]`` the score quantile ``q`` of each target at ``level`` (``inf`` where there are
        too few scores for it: fewer than ``1 / (1 - level) - 1``)."""
        if not 0.0 < level < 1.0:
            raise ValueError(f"the interval level must lie between 0 and 1, got {level}")
        if self.task_type != "regression":
            raise ValueError("intervals apply to regression targets; this model is binary")
        if level not in self._quantiles:
            self._quantiles[level] = np.array([_quantile(s, level) for s in self.scores])
        return self._quantiles[level]

    def interval(
        self, values: np.ndarray | Tensor, std: np.ndarray | Tensor | None, level: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)``, each shaped like ``values`` (``[..., T]``, the prediction or an
        ensemble's mean); ``std`` (same shape) is the members' spread, needed by a
        normalised calibrator and ignored otherwise."""
        values = np.asarray(values, dtype=np.float64)
        half = np.broadcast_to(self.quantiles(level), values.shape)
        if self.normalized:
            if std is None:
                raise ValueError("this calibrator needs the ensemble members' std")
            half = half * (np.asarray(std, dtype=np.float64) + np.asarray(self.beta))
        return values - half, values + half

    def probabilities(self, logits: Tensor) -> Tensor:
        """Calibrated probabilities ``[N, T]`` (or ``[T]``) from member logits ``[K, N, T]``
        (or ``[K, T]``): the members' mean of ``sigmoid(z / T)``."""
        if self.temperature is None:
            raise ValueError("probabilities are calibrated for binary tasks only")
        t = torch.tensor(self.temperature, dtype=logits.dtype)
        return torch.sigmoid(logits / t).mean(dim=0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:meth:`from_dict` reads it back)."""
        return {
            "task_type": self.task_type,
            "target_names": self.target_names,
            "method": "normalized" if self.normalized else "absolute",
            "scores": [s.tolist() for s in self.scores],
            "beta": self.beta,
            "temperature": self.temperature,
            "ece": self.ece,
            "source": self.source,
            "checkpoint": self.checkpoint,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        """A calibrator from :meth:`to_dict`'s form."""
        return cls(
            task_type=d["task_type"],
            target_names=list(d["target_names"]),
            scores=[np.asarray(s, dtype=np.float64) for s in d.get("scores") or []],
            beta=d.get("beta"),
            temperature=d.get("temperature"),
            ece=d.get("ece"),
            source=d.get("source", ""),
            checkpoint=d.get("checkpoint"),
        )

    def save(self, path: str | Path) -> None:
        """Write the JSON form to ``path``."""
        write_atomic(Path(path), json.dumps(self.to_dict()).encode())


def _quantile(scores: np.ndarray, level: float) -> float:
    """The ``⌈(n + 1) level⌉``-th smallest of the ``n`` ``scores`` (``inf`` where ``n`` is
    too small for ``level``: fewer than ``1 / (1 - level) - 1``)."""
    n = len(scores)
    k = math.ceil(round((n + 1) * level, 9))  # round: (n + 1) * 0.9 may land a hair above
    return math.inf if k > n else float(np.sort(scores)[k - 1])


def expected_calibration_error(prob: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error of probabilities ``prob`` ``[N]`` against 0/1 labels ``y``
    ``[N]``: over ``bins`` equal-width bins of ``prob``, the share of molecules in the bin
    times ``|mean prob - positive fraction|``, summed."""
    prob, y = np.asarray(prob, dtype=np.float64), np.asarray(y, dtype=np.float64)
    which = np.minimum((prob * bins).astype(int), bins - 1)
    gap = np.bincount(which, weights=prob - y, minlength=bins)
    return float(np.abs(gap).sum() / max(len(prob), 1))


def fit_temperature(logits: np.ndarray, y: np.ndarray, lowest: float = 0.05) -> float:
    """The temperature ``T`` minimising the log loss of ``mean_k sigmoid(logits[k] / T)``
    against 0/1 labels ``y`` ``[N]`` (``logits``: ``[K, N]``), searched over
    ``[lowest, 20]``."""
    from scipy.optimize import minimize_scalar

    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)

    def loss(log_t: float) -> float:
        p = np.clip((1.0 / (1.0 + np.exp(-z / math.exp(log_t)))).mean(axis=0), 1e-12, 1 - 1e-12)
        return float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).mean())

    found = minimize_scalar(loss, bounds=(math.log(lowest), math.log(20.0)), method="bounded")
    best = float(math.exp(found.x))
    # the bounded search stops a hair inside its bounds; the bound itself when it is no worse
    return lowest if loss(math.log(lowest)) <= loss(math.log(best)) else best


def fit_calibration(
    members: Tensor,
    y: Tensor,
    task_type: str,
    target_names: list[str],
    source: str = "valid split",
    checkpoint: str | None = "best.pt",
    chose_checkpoint: bool = False,
) -> Calibration:
    """Fit a calibrator on molecules the model did not train on.

    Args:
        members: ``[K, N, T]`` raw outputs (logits for binary tasks) of each of ``K`` models
            (``K = 1``: one model, absolute residuals; ``K > 1``: scores normalised by the
            members' std).
        y: ``[N, T]`` targets, ``NaN`` where missing.
        task_type: ``regression`` or ``binary``.
        target_names: the ``T`` targets' names.
        source: what the molecules are (recorded).
        checkpoint: the checkpoint file it belongs to; ``None`` for an ensemble folder.
        chose_checkpoint: the molecules also chose the checkpoint (a validation split):
            binary temperatures are kept at 1 or above (soften, never sharpen).
    """
    z, y_np = members.double().numpy(), y.double().numpy()
    cal = Calibration(task_type, list(target_names), source=source, checkpoint=checkpoint)
    known = np.isfinite(y_np)
    if task_type == "binary":
        cal.temperature, cal.ece = [], []
        for t in range(y_np.shape[1]):
            zt, yt = z[:, known[:, t], t], y_np[known[:, t], t]
            lowest = 1.0 if chose_checkpoint else 0.05
            temp = fit_temperature(zt, yt, lowest) if len(yt) else 1.0
            before = (1.0 / (1.0 + np.exp(-zt))).mean(axis=0)
            after = (1.0 / (1.0 + np.exp(-zt / temp))).mean(axis=0)
            cal.temperature.append(temp)
            cal.ece.append(
                {
                    "before": expected_calibration_error(before, yt),
                    "after": expected_calibration_error(after, yt),
                }
            )
        return cal
    mean, std = z.mean(axis=0), z.std(axis=0)  # [N, T] each
    residual = np.abs(y_np - mean)
    if len(z) > 1:
        cal.beta = [
            BETA_FRACTION * float(np.median(std[known[:, t], t])) if known[:, t].any() else 1.0
            for t in range(y_np.shape[1])
        ]
        cal.beta = [b if b > 0 else 1e-6 for b in cal.beta]
        residual = residual / (std + np.asarray(cal.beta))
    cal.scores = [np.sort(residual[known[:, t], t]) for t in range(y_np.shape[1])]
    return cal


def calibration_report(
    cal: Calibration, members: Tensor, y: Tensor, levels: tuple[float, ...] = LEVELS
) -> dict[str, float]:
    """How the calibrator does on other molecules (``members`` ``[K, N, T]``, ``y``
    ``[N, T]``): regression: per level (``90`` for 0.9) the share of known targets inside
    their interval (``coverage_90``) and the intervals' mean width (``width_90``), over every
    target, and for an ensemble (``K > 1``) the Spearman correlation of the absolute error
    with the members' std (``spearman_error_std``, :func:`error_spearman`); binary: the
    expected calibration error of the raw (``ece``) and calibrated (``ece_calibrated``)
    probabilities, averaged over tasks."""
    z, y_np = members.double(), y.double().numpy()
    known = np.isfinite(y_np)
    if not known.any():
        return {}
    if cal.task_type == "binary":
        raw = torch.sigmoid(z).mean(dim=0).numpy()
        fitted = cal.probabilities(z).numpy()
        cols = [t for t in range(y_np.shape[1]) if known[:, t].any()]
        ece = [expected_calibration_error(raw[known[:, t], t], y_np[known[:, t], t]) for t in cols]
        after = [
            expected_calibration_error(fitted[known[:, t], t], y_np[known[:, t], t]) for t in cols
        ]
        return {"ece": float(np.mean(ece)), "ece_calibrated": float(np.mean(after))}
    mean, std = z.mean(dim=0).numpy(), z.std(dim=0, unbiased=False).numpy()
    report: dict[str, float] = {}
    if len(z) > 1:  # does the members' spread track the error? (rank correlation)
        report["spearman_error_std"] = error_spearman(np.abs(y_np - mean), std)
    for level in levels:
        low, high = cal.interval(mean, std, level)
        inside = (low <= y_np) & (y_np <= high)
        name = f"{round(level * 100):d}"
        report[f"coverage_{name}"] = float(inside[known].mean())
        report[f"width_{name}"] = float((high - low)[known].mean())
    return report


COVERAGE_SLACK = 0.05
"""The least gap between test coverage and its level that :func:`coverage_lines` warns of."""


def coverage_tolerance(level: float, n: int) -> float:
    """How far test coverage may fall from ``level`` by chance alone on ``n`` molecules: two
    binomial standard errors, and at least :data:`COVERAGE_SLACK`."""
    return max(COVERAGE_SLACK, 2.0 * math.sqrt(level * (1.0 - level) / max(n, 1)))


def coverage_lines(metrics: dict[str, Any], level: float = REPORT_LEVEL) -> list[str]:
    """``train``'s closing lines on its intervals, from its ``metrics.json``: the test
    coverage and mean width at ``level``, and a warning when the coverage is further from
    ``level`` than :func:`coverage_tolerance` (none for a run without test intervals)."""
    name = f"{round(level * 100):d}"
    coverage, width = metrics.get(f"test_coverage_{name}"), metrics.get(f"test_width_{name}")
    if coverage is None or width is None:
        return []
    n = int(metrics.get("test_graphs") or 0)
    lines = [
        f"{name}% intervals: test coverage {coverage:.3f}, mean width {width:.3g} "
        f"({n} test molecules; calibrated on the validation split)"
    ]
    tol = coverage_tolerance(level, n)
    if abs(coverage - level) > tol:
        side, kind = ("below", "harder") if coverage < level else ("above", "easier")
        lines.append(
            f"warning: test coverage {coverage:.3f} is far {side} the {level:g} asked (by more "
            f"than {tol:.3f}): the test molecules were {kind} for the model than the "
            f"validation molecules its intervals were calibrated on, as new scaffolds can be; "
            "read the intervals as a guide, not a guarantee (docs: calibration)"
        )
    return lines


def error_spearman(error: np.ndarray, score: np.ndarray) -> float:
    """The Spearman correlation of ``|error|`` ``[N, T]`` with a difficulty ``score``
    ``[N, T]`` (e.g. an ensemble's std) over the known entries, targets pooled: near 1 when
    the score ranks molecules as their errors do, near 0 when it tells nothing."""
    from .faithfulness import spearman

    known = np.isfinite(error) & np.isfinite(score)
    return spearman(error[known], score[known])


def calibration_path(checkpoint: str | Path) -> Path:
    """Where the calibrator of ``checkpoint`` lives: ``calibration.json`` in an ensemble's
    folder or beside ``best.pt``; ``<name>.calibration.json`` beside another checkpoint."""
    path = Path(checkpoint)
    if path.is_dir():
        return path / CALIBRATION_FILE
    if path.name == "best.pt":
        return path.parent / CALIBRATION_FILE
    return path.parent / f"{path.stem}.{CALIBRATION_FILE}"


def load_calibration(checkpoint: str | Path) -> Calibration | None:
    """The calibrator of a checkpoint file or ensemble folder, ``None`` where it has none."""
    path = calibration_path(checkpoint)
    if not path.exists():
        return None
    return Calibration.from_dict(json.loads(path.read_text()))


def uncalibrated_message(checkpoint: str | Path, target_names: list[str]) -> str:
    """The one line that says how to calibrate a checkpoint that has no calibrator."""
    return (
        f"{checkpoint} has no calibration data ({calibration_path(checkpoint).name}; runs "
        "trained before intervals existed keep none): build it from molecules it did not "
        f"train on with graphormer-urpe calibrate --checkpoint {checkpoint} --input FILE.csv "
        f"--target-columns {' '.join(target_names)}"
    )
