"""The knob algebra (`workbench.knobs`): (x, y, B, mu) <-> the buffer's settings, and feasibility, in one place."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench import knobs
from workbench.config import build_config

from support.source import occurrences


def test_the_default_mapping_by_hand():
    # x 8, y 2 at B 128: R = 64 fresh rollouts a step, N = 8·64 = 512, W/T = 5.28/2, an age limit of 8 steps
    k = knobs.to_knobs(8.0, 2.0, 128, 5.28)
    assert (k.fresh_per_step, k.capacity, k.ratio, k.horizon) == (64.0, 512, 2.0, 8)
    assert k.workers_per_trainer == pytest.approx(2.64) and k.exact_capacity == 512.0
    # x 2.5 at y 1.5, B 16: N = 26.67 rollouts -> 27, a horizon of 3 steps
    k = knobs.to_knobs(2.5, 1.5, 16, 1.0)
    assert k.capacity == 27 and k.horizon == 3 and k.exact_capacity == pytest.approx(80 / 3)


def test_distinct_draws_need_a_buffer_of_a_batch():
    assert knobs.capacity(0.5, 2.0, 128) == 128  # 32 rollouts would not fill one batch of distinct draws
    assert knobs.capacity(0.5, 2.0, 128, distinct=False) == 32
    assert knobs.capacity(0.001, 4.0, 16, distinct=False) == 1  # never an empty buffer
    assert knobs.feasible(4, 4) and knobs.feasible(8, 2) and not knobs.feasible(2, 4)
    x, y = np.array([1.0, 2.0, 4.0]), np.array([2.0, 2.0, 2.0])
    assert knobs.feasible(x, y).tolist() == [False, True, True]  # elementwise, as the fits search a grid


@given(x=st.floats(0.25, 256), y=st.floats(1, 16), batch=st.integers(1, 1024))
def test_capacity_and_staleness_invert_each_other_to_within_one_rollout(x, y, batch):
    n = knobs.capacity(x, y, batch, distinct=False)
    assert abs(n - knobs.exact_capacity(x, y, batch)) <= 0.5 or n == 1
    if n > 1:  # the x a rounded buffer gives is within half a rollout's share of a step of the x asked for
        assert abs(knobs.staleness(n, y, batch) - x) <= 0.5 * y / batch + 1e-9
    # distinct draws: feasible points keep their buffer, the others get the smallest buffer that serves a batch
    distinct = knobs.capacity(x, y, batch)
    assert distinct >= batch and (distinct == n or not knobs.feasible(x, y) or n < batch)


@given(y=st.floats(0.1, 64), mu=st.floats(0.01, 100), trainers=st.integers(1, 8))
def test_the_asynchronous_split_and_the_ratio_it_gives_are_one_rule_read_both_ways(y, mu, trainers):
    workers = knobs.workers_per_trainer(y, mu) * trainers
    assert knobs.replay_ratio_of_split(mu, workers, trainers) == pytest.approx(y)


def test_a_predicted_ratio_runs_at_three_digits_and_never_below_on_policy():
    assert knobs.runnable_ratio(1.3712) == 1.37 and knobs.runnable_ratio(2.0) == 2.0
    assert knobs.runnable_ratio(0.6) == 1.0 and knobs.runnable_ratio(12.345) == 12.3


def test_a_trial_config_reads_its_fresh_rollouts_per_step_from_the_same_rule():
    cfg = build_config({"batch_size": 96, "replay": {"ratio": 3, "capacity": 288}})
    assert cfg.fresh_per_step == knobs.fresh_per_step(96, 3) == 32.0
    assert knobs.staleness(cfg.replay.capacity, cfg.replay.ratio, cfg.batch_size) == 9.0


# The spellings the conversion had before it had a home (8 places), each with a line it was written in.
OLD_SPELLINGS = {
    r"round \( \w+( \[ STR \])* \* [\w. ]*?(batch|fresh|\bB\b|\bR\b)":  # N = x·B/y by hand
    "capacity = max ( batch , round ( result [ STR ] [ STR ] * batch / ratio ) )",
    r"\bx( \[ STR \])? \* (fresh|R|k \. fresh_per_step|batch\w*|B)\b": "N = x * R",
    r"capacity \* (ratio|y) /": "STR : float ( STR capacity * ratio / B ) ,",  # x = N·y/B by hand
    r"capacity / (cfg \. )?fresh": "x = cfg . replay . capacity / cfg . fresh_per_step ,",
    r"\b(batch_size|B) / (y|ratio|self \. replay \. ratio)\b": "return self . batch_size / self . replay . ratio",
    r"(?<!\+ )\bmu / y\b": "return BufferSettings ( x , y , R , capacity , y , mu / y , max ( 0 , math . ceil ( x ) ) )",
    r"\w*mu \* \w+( \[ STR \])? / \w+": "row [ STR ] = sync_mu * row [ STR ] / row [ STR ]",  # y = mu·T/W
    r"\b(X >= Y|x < y|x >= y|X < Y)\b": "C = np . where ( X >= Y , C , np . inf )",  # distinct draws need x >= y
    r"STR \] < (ratio|point)": "if params [ STR ] < ratio :",
}
"""(The compute formula's (1 + mu/y) is the accounting, `workbench.compute`, not a knob: `+ mu / y` is not one.)"""


def test_the_knob_algebra_has_one_home():
    for pattern, old in OLD_SPELLINGS.items():
        assert re.search(pattern, old), pattern  # each pattern finds the copy it stands for
    assert [hit for pattern in OLD_SPELLINGS for hit in occurrences(pattern, home="workbench/knobs.py")] == []
