"""The probe's learning-rate sweep: which learning rate comes next, and the on-policy trial each run is."""

from workbench.trial.lr_sweep import MAX_POINTS, SweepPoint, _next_lr, on_policy_config
from support.toy import toy_dict


def point(lr, c, censored=False):
    return SweepPoint(lr, c, censored, 100.0, "run")


def test_the_sweep_extends_while_the_cheapest_run_is_at_an_edge_and_stops_inside():
    assert _next_lr([point(1.0, 50), point(2.0, 40), point(4.0, 30)]) == 8.0
    assert _next_lr([point(1.0, 20), point(2.0, 40), point(4.0, 60)]) == 0.5
    assert _next_lr([point(1.0, 50), point(2.0, 30), point(4.0, 40)]) is None
    # a run that never reached the target is not the cheapest: the reached one below it is inside the sweep
    assert _next_lr([point(1.0, 50), point(2.0, 30), point(4.0, 150, censored=True)]) is None
    assert _next_lr([point(1.0, 150, True), point(2.0, 150, True), point(4.0, 150, True)]) is None
    assert _next_lr([point(2.0**i, 60 - i) for i in range(MAX_POINTS)]) is None


def test_a_sweep_run_is_the_trial_on_policy_at_its_lr_and_budget():
    cfg = on_policy_config(toy_dict(replay={"ratio": 4, "capacity": 64}), lr=3e-4, budget=12)
    assert cfg.lr == 3e-4 and cfg.budget.compute_units == 12 and cfg.budget.steps is None
    assert cfg.replay.strategy == "uniform" and cfg.replay.ratio == 1 and cfg.replay.capacity == cfg.batch_size
