"""Compute-to-target estimators against hand-made curves, and the fitted curve recovering known parameters."""

import math

import numpy as np
import pytest

from workbench import estimators as E
from workbench.compute import censored_value

C = np.arange(0.0, 101.0, 5.0)  # evaluations every 5 units up to 100


def test_known_linear_crossing():
    acc = 0.3 + 0.005 * C  # reaches 0.6 at exactly 60 units, 0.58 at 56 (between evaluations 55 and 60)
    assert E.first(C, acc, 0.6).value == 60 and not E.first(C, acc, 0.6).censored
    res = E.interpolated(C, acc, 0.58)
    assert res.value == pytest.approx(56.0) and res.low == 55.0 and E.first(C, acc, 0.58).value == 60
    assert E.sustained(C, acc, 0.58).value == pytest.approx(56.0)  # a moving average of a line is the line
    assert E.fitted(C, acc, 0.58).value == pytest.approx(56.0, rel=0.08)


def test_never_reaching_the_target_is_censored_at_the_total():
    acc = 0.3 + 0.002 * C  # ends at 0.5
    for name, f in E.ESTIMATORS.items():
        res = f(C, acc, 0.7)
        assert res.censored, name
        assert res.total == 100.0 and res.low == 100.0
        assert res.value == pytest.approx(censored_value(100.0, 0.5, 0.7)) and res.value > res.total


def test_fitted_is_censored_when_the_crossing_lies_beyond_the_run():
    curve = E.Sigmoid(0.3, 0.9, 150.0, 2.0, 0.0)  # reaches 0.7 at 150 * 2^(1/2) = 212 units, past the run's 100
    res = E.fitted(C, curve(C), 0.7)
    assert res.censored and res.total == 100.0


def _noisy_runs(true, target, n=40, sd=0.04):
    rng = np.random.default_rng(0)
    out = {name: [] for name in E.ESTIMATORS}
    for _ in range(n):
        acc = true(C) + rng.normal(0, sd, len(C))
        for name, f in E.ESTIMATORS.items():
            out[name].append(f(C, acc, target).value)
    return out


def test_noisy_plateau_first_passage_is_early():
    true = E.Sigmoid(0.3, 0.8, 30.0, 3.0, 0.0)  # plateau at 0.8; crosses 0.77 at 75 units
    runs = _noisy_runs(true, 0.77)
    crossing = true.inverse(0.77)
    # Jitter crosses a target near the plateau long before the curve does; the smoothed and fitted readings do not.
    assert np.median(runs["first"]) < 0.9 * crossing
    assert abs(np.median(runs["fitted"]) / crossing - 1) < 0.1
    assert np.median(runs["sustained"]) > crossing


def test_on_the_rising_part_the_whole_curve_estimators_are_less_noisy():
    true = E.Sigmoid(0.3, 0.8, 30.0, 3.0, 0.0)
    runs = _noisy_runs(true, 0.6)  # crosses at 34 units, where the curve is steep
    sd = {name: np.std(np.log(v)) for name, v in runs.items()}
    assert sd["fitted"] < 0.7 * sd["first"] and sd["sustained"] < 0.7 * sd["first"]
    assert abs(np.median(runs["fitted"]) / true.inverse(0.6) - 1) < 0.05


def test_fit_recovers_known_parameters():
    rng = np.random.default_rng(1)
    true = E.Sigmoid(0.35, 0.85, 40.0, 2.5, 0.0)
    fit = E.fit_sigmoid(C, true(C) + rng.normal(0, 0.01, len(C)))
    assert fit.r0 == pytest.approx(true(C)[0] + 0, abs=0.03)
    assert fit.asymptote == pytest.approx(0.85, abs=0.03)
    assert fit.midpoint == pytest.approx(40.0, rel=0.1)
    assert fit.slope == pytest.approx(2.5, rel=0.25)
    assert fit.rmse < 0.02
    assert fit.inverse(0.6) == pytest.approx(true.inverse(0.6), rel=0.05)


def test_sigmoid_inverse_edges():
    s = E.Sigmoid(0.4, 0.8, 10.0, 2.0, 0.0)
    assert s.inverse(0.3) == 0.0 and s.inverse(0.9) == math.inf
    assert s(s.inverse(0.6)) == pytest.approx(0.6)


def test_auc_accuracy_at_and_summary():
    flat = np.full(len(C), 0.5)
    assert E.normalized_auc(C, flat) == pytest.approx(0.5)
    assert E.normalized_auc(C, 0.01 * C, budget=100) == pytest.approx(0.5)
    assert E.normalized_auc(C[:11], 0.01 * C[:11], budget=100) == pytest.approx((0.5 * 50 * 0.5 + 50 * 0.5) / 100)
    assert E.accuracy_at(C, 0.01 * C, 42.5) == pytest.approx(0.425)
    s = E.curve_summary(C, 0.3 + 0.005 * C, 0.58, budget=100)
    assert s["compute_to_target_interpolated"] == pytest.approx(56.0) and s["censored_first"] == 0.0
    assert s["accuracy_at_50pct"] == pytest.approx(0.55) and "fit_asymptote" in s


def test_auto_target_sits_on_the_rising_part():
    true = E.Sigmoid(0.4, 0.8, 40.0, 3.0, 0.0)
    curves = [(C, true(C) + d) for d in (-0.01, 0.0, 0.01)]
    target = E.auto_target(curves, 0.5)
    assert target == pytest.approx(0.4 + 0.5 * (true(100.0) - 0.4), abs=0.01)
    with pytest.raises(ValueError, match="did not improve"):
        E.auto_target([(C, np.full(len(C), 0.5))], 0.5)


def test_bad_curves_are_rejected():
    with pytest.raises(ValueError):
        E.first([0, 10, 5], [0.1, 0.2, 0.3], 0.2)
    with pytest.raises(ValueError):
        E.first([], [], 0.2)
