"""Rank correlation, as both the intervals' report (does a difficulty score rank molecules
as their errors do?) and the explanations' faithfulness (do the contributions rank atoms as a
known decomposition does?) measure it."""

from __future__ import annotations

import numpy as np

__all__ = ["spearman"]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two ``[n]`` vectors (average ranks for ties); ``nan``
    when either is constant or ``n < 2``."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)
