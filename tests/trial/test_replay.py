import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from support.toy import rollout

from workbench.trial.replay import FreshCredit, ReplayBuffer, batch_stats, group_advantages


def test_fifo_eviction_by_capacity_keeps_the_newest():
    buf = ReplayBuffer(capacity=5)
    buf.add([rollout(i, 0) for i in range(8)])
    assert [r.uid for r in buf.evict(step=0)] == [0, 1, 2]
    assert [r.uid for r in buf.items] == [3, 4, 5, 6, 7]


def test_age_eviction_uses_the_horizon_in_optimizer_steps():
    buf = ReplayBuffer(capacity=100, horizon=2)
    for step in range(5):
        buf.add([rollout(10 * step + i, step) for i in range(3)])
        buf.evict(step)
        # age = step - birth_step; a rollout older than the horizon is gone before the draw
        assert max(buf.ages(step)) <= 2
        assert min(buf.ages(step)) == 0
    assert sorted({r.birth_step for r in buf.items}) == [2, 3, 4]


def test_horizon_zero_keeps_only_this_steps_rollouts():
    buf = ReplayBuffer(capacity=100, horizon=0)
    buf.add([rollout(i, 0) for i in range(3)])
    buf.add([rollout(10 + i, 1) for i in range(3)])
    buf.evict(1)
    assert [r.birth_step for r in buf.items] == [1, 1, 1]


def test_effective_horizon_is_min_of_horizon_and_capacity_over_fresh_rate():
    # R = 4 fresh per step, capacity 12 -> at most N/R = 3 steps of rollouts (ages 0..2) even with horizon 10.
    buf = ReplayBuffer(capacity=12, horizon=10)
    for step in range(10):
        buf.add([rollout(10 * step + i, step) for i in range(4)])
        buf.evict(step)
    assert max(buf.ages(9)) == 2 and len(buf) == 12


@settings(max_examples=200, deadline=None)
@given(
    batch=st.integers(1, 512),
    group=st.integers(2, 16),
    ratio=st.floats(1.0, 16.0, allow_nan=False),
    steps=st.integers(1, 400),
)
def test_fresh_credit_rate_is_exact_over_many_steps(batch, group, ratio, steps):
    credit = FreshCredit(batch / ratio, group)
    total = 0
    for _ in range(steps):
        groups = credit.accrue()
        assert groups >= 0
        total += groups * group
    owed = steps * batch / ratio
    # never ahead of the rate, never behind by a whole group
    assert owed - group < total <= owed + 1e-6


@settings(max_examples=100, deadline=None)
@given(
    batch=st.integers(1, 64),
    group=st.integers(2, 8),
    ratio=st.floats(1.0, 8.0),
    borrow=st.integers(0, 10),
    steps=st.integers(50, 300),
)
def test_borrowed_groups_are_repaid_so_the_long_run_rate_holds(batch, group, ratio, borrow, steps):
    credit = FreshCredit(batch / ratio, group)
    credit.borrow(borrow)
    total = borrow * group + sum(credit.accrue() * group for _ in range(steps))
    owed = steps * batch / ratio
    assert total <= max(owed + 1e-6, borrow * group)
    if owed >= borrow * group:
        assert owed - group < total


def test_group_advantages_are_standardised_and_zero_for_uniform_groups():
    adv = group_advantages([1, 0, 0, 1])
    assert np.allclose(adv, [1, -1, -1, 1], atol=1e-3)
    assert group_advantages([1, 1, 1, 1]) == [0.0, 0.0, 0.0, 0.0]


def test_batch_stats_report_age_and_uses():
    batch = [rollout(0, 3), rollout(1, 5)]
    batch[0].uses, batch[1].uses = 3, 1
    stats = batch_stats(batch, step=5)
    assert (stats.age_mean, stats.age_max, stats.uses_mean) == (1.0, 2, 2.0)
