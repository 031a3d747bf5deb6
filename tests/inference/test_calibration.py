"""Calibrated intervals and probabilities: conformal coverage on synthetic data with known
noise, against plain references; temperature scaling and ECE (the commands end to end:
``tests/cli/test_intervals.py``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from graphormer_urpe.inference.intervals.calibration import (
    Calibration,
    calibration_report,
    expected_calibration_error,
    fit_calibration,
)


def _reference_quantile(scores: np.ndarray, level: float) -> float:
    """The ⌈(n + 1) level⌉-th smallest score, written plainly."""
    s = np.sort(scores)
    k = math.ceil((len(s) + 1) * level - 1e-9)
    return math.inf if k > len(s) else float(s[k - 1])


def test_single_model_intervals_match_reference_and_cover():
    gen = np.random.default_rng(0)
    sigma = 0.5
    n_cal, n_test = 999, 20000
    x = gen.normal(size=n_cal + n_test)
    y = x + gen.normal(scale=sigma, size=x.shape)  # the model predicts x: noise sigma
    pred = torch.from_numpy(x).reshape(1, -1, 1)
    target = torch.from_numpy(y).reshape(-1, 1)
    cal = fit_calibration(pred[:, :n_cal], target[:n_cal], "regression", ["y"])
    assert not cal.normalized
    for level in (0.8, 0.9, 0.95):
        q = _reference_quantile(np.abs(y[:n_cal] - x[:n_cal]), level)
        assert cal.quantiles(level)[0] == pytest.approx(q)
        # the gaussian's own half-width, which the conformal one estimates
        z = {0.8: 1.2816, 0.9: 1.6449, 0.95: 1.9600}[level]
        assert q == pytest.approx(z * sigma, rel=0.1)
        low, high = cal.interval(x[n_cal:, None], None, level)
        inside = ((low[:, 0] <= y[n_cal:]) & (y[n_cal:] <= high[:, 0])).mean()
        assert abs(inside - level) < 0.02
    report = calibration_report(cal, pred[:, n_cal:], target[n_cal:])
    assert abs(report["coverage_90"] - 0.9) < 0.02
    assert report["width_90"] == pytest.approx(2 * cal.quantiles(0.9)[0])


def test_ensemble_intervals_adapt_to_heteroscedastic_noise():
    """Members that disagree where the noise is large: normalised intervals widen there and
    keep their coverage in both halves, where absolute ones over- and under-cover."""
    gen = np.random.default_rng(1)
    n, k = 8000, 5
    noise = np.where(np.arange(n) % 2 == 0, 0.2, 1.0)  # two noise levels, alternating
    truth = gen.normal(size=n)
    y = truth + gen.normal(size=n) * noise
    members = truth + gen.normal(size=(k, n)) * noise  # spread ∝ noise
    z, target = torch.from_numpy(members)[..., None], torch.from_numpy(y)[:, None]
    half = n // 2
    cal = fit_calibration(z[:, :half], target[:half], "regression", ["y"], checkpoint=None)
    plain = fit_calibration(z[:, :half].mean(0, keepdim=True), target[:half], "regression", ["y"])
    assert cal.normalized
    mean, std = members.mean(0)[half:, None], members.std(0)[half:, None]
    test_y, quiet = y[half:], noise[half:] == 0.2
    for c, adapts in ((cal, True), (plain, False)):
        low, high = c.interval(mean, std, 0.9)
        inside = (low[:, 0] <= test_y) & (test_y <= high[:, 0])
        width = (high - low)[:, 0]
        if adapts:
            assert width[~quiet].mean() > 2.5 * width[quiet].mean()
            assert abs(inside[quiet].mean() - 0.9) < 0.04
            assert abs(inside[~quiet].mean() - 0.9) < 0.04
        else:
            assert width.std() < 1e-9
            assert inside[quiet].mean() > 0.97 and inside[~quiet].mean() < 0.85
    # the scores are the residuals over std + beta, sorted
    ref = np.abs(y[:half] - members[:, :half].mean(0)) / (members[:, :half].std(0) + cal.beta[0])
    np.testing.assert_allclose(cal.scores[0], np.sort(ref))


def test_distance_intervals_widen_with_distance_and_hold_under_shift():
    """Errors that grow with the distance to the training set: intervals scaled by the
    distance keep their coverage on molecules farther away than the calibration ones (as new
    scaffolds are), where one half-width for all under-covers them."""
    gen = np.random.default_rng(3)
    n = 6000
    d_cal = gen.uniform(0.05, 0.95, n)  # the calibration molecules' distances
    d_new = gen.uniform(0.75, 0.95, n)  # new molecules: farther on average
    # the model says 0; its error grows with the distance (beta: a tenth of the median, 0.05)
    y_cal, y_new = gen.normal(size=n) * (d_cal + 0.05), gen.normal(size=n) * (d_new + 0.05)
    z, target = torch.zeros(1, n, 1, dtype=torch.float64), torch.from_numpy(y_cal)[:, None]
    cal = fit_calibration(z, target, "regression", ["y"], similarity=1 - d_cal)
    plain = fit_calibration(z, target, "regression", ["y"], difficulty="absolute")
    assert cal.difficulty == "distance" and cal.needs_similarity and not plain.needs_similarity
    beta = 0.1 * np.median(d_cal)
    assert cal.beta == [pytest.approx(beta)]
    np.testing.assert_allclose(cal.scores[0], np.sort(np.abs(y_cal) / (d_cal + beta)))
    zeros = np.zeros((n, 1))
    low, high = cal.interval(zeros, None, 0.9, 1 - d_new)
    np.testing.assert_allclose(high[:, 0], cal.quantiles(0.9)[0] * (d_new + beta))
    assert abs(((low[:, 0] <= y_new) & (y_new <= high[:, 0])).mean() - 0.9) < 0.02
    low_abs, high_abs = plain.interval(zeros, None, 0.9)
    assert ((low_abs[:, 0] <= y_new) & (y_new <= high_abs[:, 0])).mean() < 0.8
    # one molecule at a time (predict's rows): one similarity, [T] values
    one_low, one_high = cal.interval(np.zeros(1), None, 0.9, float(1 - d_new[0]))
    assert one_high[0] == pytest.approx(cal.quantiles(0.9)[0] * (d_new[0] + beta))
    assert one_low[0] == pytest.approx(-one_high[0])
    report = calibration_report(cal, z, target, similarity=1 - d_cal)
    rho = np.corrcoef(np.argsort(np.argsort(np.abs(y_cal))), np.argsort(np.argsort(d_cal)))[0, 1]
    assert report["spearman_error_distance"] == pytest.approx(rho, abs=1e-6)
    with pytest.raises(ValueError, match="nearest training similarity"):
        cal.interval(zeros, None, 0.9)


def test_default_difficulty_and_older_calibrators():
    from graphormer_urpe.inference.intervals.calibration import default_difficulty

    known = np.array([0.5, np.nan])
    assert default_difficulty(1, known) == default_difficulty(5, known) == "distance"
    assert default_difficulty(5, None) == default_difficulty(5, np.full(2, np.nan)) == "std"
    assert default_difficulty(1, None) == "absolute"
    # a calibrator written before difficulties were named reads as it was fitted
    old = {"task_type": "regression", "target_names": ["y"], "scores": [[0.5, 1.0]]}
    assert Calibration.from_dict({**old, "method": "normalized", "beta": [0.1]}).difficulty == "std"
    assert Calibration.from_dict({**old, "method": "absolute", "beta": None}).difficulty == (
        "absolute"
    )


def test_missing_targets_and_round_trip(tmp_path):
    z = torch.tensor([[[1.0, 2.0], [2.0, float("nan")], [3.0, 1.0]]])
    y = torch.tensor([[1.5, 2.0], [1.0, float("nan")], [3.0, float("nan")]])
    cal = fit_calibration(z, y, "regression", ["a", "b"])
    assert [len(s) for s in cal.scores] == [3, 1]
    cal.save(tmp_path / "c.json")
    back = Calibration.from_dict(json.loads((tmp_path / "c.json").read_text()))
    assert back.target_names == ["a", "b"]
    np.testing.assert_array_equal(back.scores[0], [0.0, 0.5, 1.0])
    assert math.isinf(back.quantiles(0.9)[1])  # one score: too few for 90%


def _reference_ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        m = (p >= lo) & ((p < hi) if b < bins - 1 else (p <= hi))
        if m.any():
            total += m.sum() / len(p) * abs(p[m].mean() - y[m].mean())
    return total


def test_temperature_scaling_lowers_ece():
    gen = np.random.default_rng(2)
    n = 6000
    true_logit = gen.normal(scale=2.0, size=n)
    y = (gen.random(n) < 1 / (1 + np.exp(-true_logit))).astype(float)
    over = 3.0 * true_logit  # an overconfident model: temperature 3 undoes it
    assert expected_calibration_error(1 / (1 + np.exp(-over)), y) == pytest.approx(
        _reference_ece(1 / (1 + np.exp(-over)), y)
    )
    z, target = torch.from_numpy(over).reshape(1, -1, 1), torch.from_numpy(y).reshape(-1, 1)
    cal = fit_calibration(z[:, : n // 2], target[: n // 2], "binary", ["t"])
    assert cal.temperature[0] == pytest.approx(3.0, rel=0.15)
    report = calibration_report(cal, z[:, n // 2 :], target[n // 2 :])
    assert report["ece_calibrated"] < 0.03 < report["ece"]
    p = cal.probabilities(z[:, n // 2 :]).numpy()[:, 0]
    assert report["ece_calibrated"] == pytest.approx(_reference_ece(p, y[n // 2 :]))


def test_temperature_never_sharpens_on_the_split_that_chose_the_checkpoint():
    gen = np.random.default_rng(3)
    n = 4000
    true_logit = gen.normal(scale=2.0, size=n)
    y = torch.from_numpy((gen.random(n) < 1 / (1 + np.exp(-true_logit))).astype(float))
    target = y.reshape(-1, 1)
    for scale, free, kept in ((0.4, 0.4, 1.0), (2.5, 2.5, 2.5)):  # under-, over-confident
        z = torch.from_numpy(scale * true_logit).reshape(1, -1, 1)
        anywhere = fit_calibration(z, target, "binary", ["t"]).temperature[0]
        chosen = fit_calibration(z, target, "binary", ["t"], chose_checkpoint=True)
        assert anywhere == pytest.approx(free, rel=0.15)
        assert chosen.temperature[0] == pytest.approx(kept, rel=0.15)
        assert chosen.temperature[0] >= 1.0
    # the bound itself, not a point a hair inside it, when sharpening would have been best
    z = torch.from_numpy(0.4 * true_logit).reshape(1, -1, 1)
    assert fit_calibration(z, target, "binary", ["t"], chose_checkpoint=True).temperature == [1.0]


# ---------------------------------------------------------------------------------------
# the lines train closes with (the commands end to end: tests/cli/test_intervals.py)
# ---------------------------------------------------------------------------------------


def test_train_closing_lines_state_test_coverage_and_warn_when_far_from_the_level():
    from graphormer_urpe.inference.intervals.calibration import coverage_lines, coverage_tolerance

    held = {"test_coverage_90": 0.885, "test_width_90": 1.234, "test_graphs": 100}
    (line,) = coverage_lines(held)
    assert line.startswith("90% intervals: test coverage 0.885, mean width 1.23 (100 test")
    missed = {**held, "test_coverage_90": 0.66}
    lines = coverage_lines(missed)
    assert len(lines) == 2 and lines[1].startswith("warning: test coverage 0.660 is far below")
    assert coverage_lines({**held, "test_coverage_90": 1.0})[1].count("far above") == 1
    assert coverage_tolerance(0.9, 100) == pytest.approx(0.06)  # two standard errors
    assert coverage_tolerance(0.9, 10_000) == 0.05  # never below the slack
    assert coverage_lines({"test_rmse": 1.0}) == []  # no intervals: nothing said
