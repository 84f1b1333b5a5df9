"""The compute-aware pruner against hand-made curves."""

import numpy as np

from workbench.estimators import Sigmoid
from workbench.study.pruning import ComputePruner


def _feed(pruner, curve, units):
    for c in units:
        why = pruner.observe(float(c), float(curve(c)))
        if why:
            return c, why
    return None, None


def test_a_trial_past_the_incumbents_interval_without_the_target_is_beaten():
    slow = Sigmoid(0.4, 0.85, 120.0, 3.0, 0.0)  # crosses 0.7 at ~140 units
    at, why = _feed(ComputePruner(0.7, 200.0, incumbent_high=60.0), slow, np.arange(0, 201, 5))
    assert at == 65 and why.startswith("beaten")


def test_a_trial_that_reaches_the_target_is_never_pruned():
    fast = Sigmoid(0.4, 0.85, 20.0, 3.0, 0.0)
    assert _feed(ComputePruner(0.7, 200.0, incumbent_high=30.0), fast, np.arange(0, 201, 5)) == (None, None)


def test_a_flat_curve_is_hopeless_once_enough_budget_is_seen():
    flat = Sigmoid(0.4, 0.55, 20.0, 2.0, 0.0)  # saturates at 0.55, target 0.7
    at, why = _feed(ComputePruner(0.7, 200.0, incumbent_high=None), flat, np.arange(0, 201, 5))
    assert at == 80 and why.startswith("hopeless")  # 40% of the budget


def test_a_rising_curve_is_not_hopeless():
    rising = Sigmoid(0.4, 0.9, 150.0, 2.0, 0.0)  # reaches 0.7 at ~170 of 200 units
    assert _feed(ComputePruner(0.7, 200.0, incumbent_high=None), rising, np.arange(0, 201, 5)) == (None, None)
