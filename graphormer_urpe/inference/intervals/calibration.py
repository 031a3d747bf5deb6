r"""How sure: split-conformal intervals for regression, temperature-scaled probabilities for
binary tasks, both fitted on molecules the model did not train on (the validation split, or a
CSV with targets).

Regression. Each calibration molecule gives a nonconformity score per target: its absolute
residual over its *difficulty* plus ``β``, :math:`|y - \hat y| / (d + \beta)`. The difficulty
(:data:`DIFFICULTIES`) is, by default (:func:`default_difficulty`), the molecule's distance
to the training set, :math:`d = 1 - s` with ``s`` the Tanimoto similarity of its nearest
training fingerprint (``predict``'s ``nearest_similarity``); without fingerprints (a store of
graphs without SMILES) it is an ensemble's spread (the members' standard deviation ``σ``),
and for one model nothing (``absolute``: the score is the residual). ``β`` is a tenth of the
difficulty's median on the calibration set, so that a molecule of no difficulty does not get
an empty interval. The sorted scores are kept, so an interval at any level is read at
prediction time: with ``n`` scores, ``q`` is the
:math:`\lceil (n + 1) \cdot \text{level} \rceil`-th smallest, and the interval is
:math:`\hat y \pm q (d + \beta)`: wider for a molecule unlike anything trained on. On
molecules exchangeable with the calibration ones it holds the true value with probability at
least ``level`` (split conformal prediction). Scaled by a difficulty that tracks the error, it
also keeps its coverage on molecules that are farther from the training set than the
calibration molecules were, as new scaffolds often are (which difficulty tracks the error,
measured: docs/results/calibration.md).

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

    sim = record.smiles_similarity(smiles)                  # [N] nearest training similarity
    cal = fit_calibration(members, y, "regression", ["logS"], similarity=sim)  # members: [K, N, T]
    low, high = cal.interval(pred, std, 0.9, new_sim)       # [N, T] each
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

from ...io.checkpoint import write_atomic

__all__ = [
    "CALIBRATION_FILE",
    "DIFFICULTIES",
    "LEVELS",
    "REPORT_LEVEL",
    "Calibration",
    "calibration_path",
    "calibration_report",
    "check_interval_request",
    "checked_calibration",
    "coverage_lines",
    "coverage_tolerance",
    "default_difficulty",
    "difficulty_of",
    "difficulty_spearman",
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
"""``β`` of a scaled score over the median of its difficulty on the calibration set."""

DIFFICULTIES = ("absolute", "std", "distance")
"""What a regression calibrator can scale its scores by: nothing (one half-width for every
molecule), the ensemble members' std, or the distance to the training set (``1 -`` the
Tanimoto similarity of the molecule's nearest training fingerprint)."""

ECE_BINS = 10
"""Equal-width probability bins of :func:`expected_calibration_error`."""


@dataclass
class Calibration:
    """A fitted calibrator (see the module's text).

    Attributes:
        task_type: ``regression`` or ``binary``.
        target_names: the model's targets, in output order.
        scores: regression: per target, its nonconformity scores sorted ascending.
        difficulty: regression: what the scores are scaled by (:data:`DIFFICULTIES`).
        beta: per target, the ``β`` added to the difficulty (``None``: ``absolute``).
        temperature: binary: per task, its temperature.
        ece: binary: per task, ``{"before": ..., "after": ...}`` on the calibration set.
        source: what it was fitted on (``valid split``, a CSV's name).
        checkpoint: the checkpoint file it belongs to (``best.pt``); ``None``: an ensemble.
    """

    task_type: str
    target_names: list[str]
    scores: list[np.ndarray] = field(default_factory=list)
    difficulty: str = "absolute"
    beta: list[float] | None = None
    temperature: list[float] | None = None
    ece: list[dict[str, float]] | None = None
    source: str = "valid split"
    checkpoint: str | None = "best.pt"
    _quantiles: dict[float, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def normalized(self) -> bool:
        """Scores are residuals over a difficulty (the members' spread, the distance)."""
        return self.difficulty != "absolute"

    @property
    def needs_similarity(self) -> bool:
        """Its intervals are scaled by each molecule's distance to the training set, so the
        nearest-similarity search must run wherever they are given."""
        return self.difficulty == "distance"

    def scale(
        self, std: np.ndarray | Tensor | None, similarity: np.ndarray | None, shape: tuple
    ) -> np.ndarray:
        """``[N, T]`` (``shape``) what each molecule's score is scaled by: 1, or its
        difficulty (:func:`difficulty_of`) plus ``β``."""
        if not self.normalized:
            return np.ones(shape)
        return difficulty_of(self.difficulty, std, similarity, shape) + np.asarray(self.beta)

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
        self,
        values: np.ndarray | Tensor,
        std: np.ndarray | Tensor | None,
        level: float,
        similarity: np.ndarray | float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)``, each shaped like ``values`` (``[N, T]`` or ``[T]``, the prediction
        or an ensemble's mean); ``std`` (same shape) is the members' spread and
        ``similarity`` (``[N]`` or one number) each molecule's nearest training similarity,
        each needed by the calibrator that scales by it (:attr:`difficulty`) and ignored
        otherwise."""
        values = np.asarray(values, dtype=np.float64)
        half = self.quantiles(level) * self.scale(std, similarity, values.shape)
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
            "difficulty": self.difficulty,
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
            difficulty=d.get("difficulty") or ("std" if d.get("beta") else "absolute"),
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
    difficulty: str | None = None,
    similarity: np.ndarray | None = None,
) -> Calibration:
    """Fit a calibrator on molecules the model did not train on.

    Args:
        members: ``[K, N, T]`` raw outputs (logits for binary tasks) of each of ``K`` models.
        y: ``[N, T]`` targets, ``NaN`` where missing.
        task_type: ``regression`` or ``binary``.
        target_names: the ``T`` targets' names.
        source: what the molecules are (recorded).
        checkpoint: the checkpoint file it belongs to; ``None`` for an ensemble folder.
        chose_checkpoint: the molecules also chose the checkpoint (a validation split):
            binary temperatures are kept at 1 or above (soften, never sharpen).
        difficulty: what the regression scores are scaled by (:data:`DIFFICULTIES`);
            ``None``: :func:`default_difficulty`.
        similarity: ``[N]`` each molecule's nearest training similarity (``distance``).
    """
    z, y_np = members.double().numpy(), y.double().numpy()
    cal = Calibration(task_type, list(target_names), source=source, checkpoint=checkpoint)
    if task_type == "binary":
        _fit_temperatures(cal, z, y_np, lowest=1.0 if chose_checkpoint else 0.05)
        return cal
    cal.difficulty = difficulty or default_difficulty(len(z), similarity)
    if cal.difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {', '.join(DIFFICULTIES)}")
    mean, std = z.mean(axis=0), z.std(axis=0)  # [N, T] each
    known = np.isfinite(y_np)
    if cal.normalized:
        d = difficulty_of(cal.difficulty, std, similarity, y_np.shape)
        known &= np.isfinite(d)
        cal.beta = [_beta(d[known[:, t], t]) for t in range(y_np.shape[1])]
    residual = np.abs(y_np - mean) / cal.scale(std, similarity, y_np.shape)
    cal.scores = [np.sort(residual[known[:, t], t]) for t in range(y_np.shape[1])]
    return cal


def difficulty_of(
    kind: str, std: np.ndarray | Tensor | None, similarity: np.ndarray | None, shape: tuple
) -> np.ndarray:
    """``[N, T]`` (``shape``) each molecule's difficulty of ``kind`` (:data:`DIFFICULTIES`,
    not ``absolute``): the members' ``std`` (``[N, T]``) or the distance to the training set,
    ``1 - similarity`` (``similarity``: ``[N]``, or one number for one molecule)."""
    if kind == "std":
        if std is None:
            raise ValueError("this calibrator needs the ensemble members' std")
        return np.broadcast_to(np.asarray(std, dtype=np.float64), shape)
    if similarity is None:
        raise ValueError(
            "this calibrator scales its intervals by the distance to the training set: it "
            "needs each molecule's nearest training similarity"
        )
    d = 1.0 - np.asarray(similarity, dtype=np.float64)
    return np.broadcast_to(d.reshape(d.shape + (1,) * (len(shape) - d.ndim)), shape)


def default_difficulty(members: int, similarity: np.ndarray | None) -> str:
    """The difficulty a regression calibrator scales by unless told: the distance to the
    training set where the similarities are known, else the members' spread for an ensemble,
    else none (see the module's text)."""
    if similarity is not None and np.isfinite(similarity).any():
        return "distance"
    return "std" if members > 1 else "absolute"


def _beta(d: np.ndarray) -> float:
    """``β`` of a scaled score: :data:`BETA_FRACTION` of the median difficulty ``d`` (so that a
    molecule of no difficulty does not get an empty interval), 1 where there is none."""
    if not len(d):
        return 1.0
    return BETA_FRACTION * float(np.median(d)) or 1e-6


def _fit_temperatures(cal: Calibration, z: np.ndarray, y: np.ndarray, lowest: float) -> None:
    """A binary calibrator's temperature per task, with its ECE before and after."""
    known = np.isfinite(y)
    cal.temperature, cal.ece = [], []
    for t in range(y.shape[1]):
        zt, yt = z[:, known[:, t], t], y[known[:, t], t]
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


def calibration_report(
    cal: Calibration,
    members: Tensor,
    y: Tensor,
    levels: tuple[float, ...] = LEVELS,
    similarity: np.ndarray | None = None,
) -> dict[str, float]:
    """How the calibrator does on other molecules (``members`` ``[K, N, T]``, ``y``
    ``[N, T]``, ``similarity`` ``[N]`` their nearest training similarity, needed by a
    ``distance`` calibrator): regression: per level (``90`` for 0.9) the share of known
    targets inside their interval (``coverage_90``) and the intervals' mean width
    (``width_90``), over every target, and the Spearman correlation of the absolute error with
    each difficulty known (:func:`error_spearman`): the members' std for an ensemble
    (``spearman_error_std``), the distance to the training set (``spearman_error_distance``);
    binary: the expected calibration error of the raw (``ece``) and calibrated
    (``ece_calibrated``) probabilities, averaged over tasks."""
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
    report = difficulty_spearman(np.abs(y_np - mean), std if len(z) > 1 else None, similarity)
    for level in levels:
        low, high = cal.interval(mean, std, level, similarity)
        inside = (low <= y_np) & (y_np <= high)
        name = f"{round(level * 100):d}"
        report[f"coverage_{name}"] = float(inside[known].mean())
        report[f"width_{name}"] = float((high - low)[known].mean())
    return report


def difficulty_spearman(
    error: np.ndarray, std: np.ndarray | None, similarity: np.ndarray | None
) -> dict[str, float]:
    """Does a difficulty track the error? The Spearman correlation of ``|error|`` ``[N, T]``
    with the members' ``std`` (``spearman_error_std``) and with the distance to the training
    set, ``1 - similarity`` (``[N]``; ``spearman_error_distance``), for those given."""
    out = {}
    if std is not None:
        out["spearman_error_std"] = error_spearman(error, std)
    if similarity is not None:
        distance = np.broadcast_to(1.0 - np.asarray(similarity, float)[:, None], error.shape)
        out["spearman_error_distance"] = error_spearman(error, distance)
    return out


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
    from ..rank_correlation import spearman

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


def check_interval_request(
    checkpoint: str | Path, level: float | None, task_type: str, target_names: list[str]
) -> Calibration | None:
    """The calibrator ``predict`` uses (``None``: none), after checking that an interval
    asked for (``level``) can be given: a regression model with a calibrator
    (:func:`checked_calibration` on the checkpoint's calibrator).

    Raises:
        ValueError: an interval for a binary task, or for a checkpoint without a
            calibrator (the message says how to build one).
    """
    cal = load_calibration(checkpoint)
    return checked_calibration(cal, checkpoint, level, task_type, target_names)


def checked_calibration(
    cal: Calibration | None,
    checkpoint: str | Path,
    level: float | None,
    task_type: str,
    target_names: list[str],
) -> Calibration | None:
    """``cal`` (the calibrator of ``checkpoint``, already loaded, or ``None``) after checking
    that an interval at ``level`` can be given (``level`` ``None``: nothing to check).

    Raises:
        ValueError: an interval for a binary task, or for a checkpoint without a
            calibrator (the message says how to build one).
    """
    if level is None:
        return cal
    if task_type == "binary":
        raise ValueError(
            "--interval applies to regression targets; a binary task's probabilities are "
            "calibrated (temperature scaling) wherever the run keeps its calibration"
        )
    if cal is None:
        raise ValueError(uncalibrated_message(checkpoint, target_names))
    return cal
