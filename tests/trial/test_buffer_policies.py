"""The uniform buffer's policies (`replay.uniform.*`): Marin's use cap and recency weights, Trinity-RFT's use-count
priority decay. Worked examples on hand-built buffers, and the strategy driven step by step."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from workbench.config import ConfigError, build_config
from workbench.trial.replay import mark_trained
from workbench.trial.strategies import STRATEGIES, uniform_draw
from workbench.trial.strategies.uniform import priority_draw, recency_draw

from support.toy import rollout, toy_dict, toy_step_setup


def _drive(replay: dict, steps: int = 40, seed: int = 0):
    """The uniform strategy at B 16, G 4 for `steps` steps, each batch marked trained: (uses of every rollout,
    rollouts generated, the batches' uids)."""
    cfg = build_config(toy_dict(batch_size=16, group_size=4, replay=replay))
    strategy = STRATEGIES["uniform"](cfg)
    rng, uid, made, generated, batches = np.random.default_rng(seed), 0, [], [], []
    for step in range(steps):
        fresh = [rollout(uid + i, step) for i in range(strategy.groups(step) * 4)]
        uid += len(fresh)
        made += fresh
        generated.append(len(fresh))
        batch = strategy.batch(fresh, step, rng)
        assert len({r.uid for r in batch}) == len(batch) == 16
        mark_trained(batch)
        batches.append([r.uid for r in batch])
    return made, generated, batches, strategy


def test_the_defaults_draw_exactly_as_the_uniform_draw():
    # at every step, the strategy's batch is uniform_draw's on its buffer with the same generator state
    cfg = build_config(toy_dict(batch_size=16, group_size=4, replay={"ratio": 2, "capacity": 64}))
    strategy = STRATEGIES["uniform"](cfg)
    rng, uid = np.random.default_rng(0), 0
    for step in range(30):
        fresh = [rollout(uid + i, step) for i in range(strategy.groups(step) * 4)]
        uid += len(fresh)
        before = copy.deepcopy(rng)
        batch = strategy.batch(fresh, step, rng)
        assert batch == uniform_draw(strategy.buffer.items, 16, before)
        mark_trained(batch)


def test_max_uses_retires_a_rollout_after_that_many_steps():
    made, generated, _, strategy = _drive({"ratio": 2, "capacity": 64, "uniform": {"max_uses": 2}})
    assert max(r.uses for r in made) == 2
    # retired at the next draw: all that reached 2 uses but those trained in the last step, still in the buffer
    waiting = sum(r.uses == 2 for r in strategy.buffer.items)
    assert strategy.metrics()["replay/retired"] == sum(r.uses == 2 for r in made) - waiting > 0
    # at max_uses = y the cap binds every rollout: each one that lived its life was trained exactly twice, and the
    # buffer borrows fresh credit when it runs short, so the rate stays B / y over the run (bursts of whole batches)
    assert all(r.uses == 2 for r in made if r.birth_step < 30)
    assert sum(generated) == pytest.approx(40 * 8, abs=16) and max(generated) == 16
    uncapped, _, _, _ = _drive({"ratio": 2, "capacity": 64})
    assert max(r.uses for r in uncapped) >= 4  # without the cap some rollouts are drawn 4+ times


def test_max_uses_one_at_ratio_one_is_on_policy_whatever_the_capacity():
    made, generated, batches, _ = _drive({"ratio": 1, "capacity": 64, "uniform": {"max_uses": 1}})
    assert generated == [16] * 40  # each step's batch is exactly its fresh rollouts
    assert batches == [list(range(16 * s, 16 * (s + 1))) for s in range(40)]
    assert all(r.uses == 1 for r in made)


def test_recency_weights_follow_rank_to_the_alpha():
    # 4 rollouts, alpha 1: weights 1:2:3:4; one draw each time -> frequencies 0.1, 0.2, 0.3, 0.4
    items = [rollout(i, i) for i in range(4)]
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(20000):
        counts[recency_draw(items, 1, rng, 1.0)[0].uid] += 1
    assert np.allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.012)
    # alpha 3 (Marin's): the newest of 10 is drawn 1000 / 3025 of the time
    items = [rollout(i, i) for i in range(10)]
    newest = sum(recency_draw(items, 1, rng, 3.0)[0].uid == 9 for _ in range(20000)) / 20000
    assert newest == pytest.approx(1000 / 3025, abs=0.012)


def test_recency_draw_is_distinct_and_in_buffer_order():
    items = [rollout(i, i // 4) for i in range(32)]
    batch = recency_draw(items, 16, np.random.default_rng(2), 3.0)
    uids = [r.uid for r in batch]
    assert len(set(uids)) == 16 and uids == sorted(uids)


def test_priority_decay_trades_age_against_uses():
    # priority = birth - decay x uses: birth 5 used 4 times at decay 1 -> 1, below birth 2 unused (2)
    items = [rollout(0, 2), rollout(1, 5), rollout(2, 4), rollout(3, 3)]
    items[1].uses = 4
    assert [r.uid for r in priority_draw(items, 2, np.random.default_rng(0), 1.0)] == [2, 3]  # 4 and 3 beat 2 and 1
    assert [r.uid for r in priority_draw(items, 2, np.random.default_rng(0), 0.0)] == [1, 2]  # decay 0: newest
    # ties broken at random: four rollouts of equal priority, each drawn about half the time
    tied = [rollout(i, 0) for i in range(4)]
    rng = np.random.default_rng(1)
    counts = np.zeros(4)
    for _ in range(4000):
        for r in priority_draw(tied, 2, rng, 1.0):
            counts[r.uid] += 1
    assert np.allclose(counts / 4000, 0.5, atol=0.04)


def test_priority_decay_in_the_strategy_spreads_uses_evenly():
    made, _, _, _ = _drive({"ratio": 2, "capacity": 64, "uniform": {"use_decay": 4.0}})
    lived = [r.uses for r in made if r.birth_step < 30]  # rollouts whose whole life was in the run
    # the priority order gives each rollout its turn: every one is used, about y = 2 times, none far more
    assert min(lived) >= 1 and max(lived) <= 3 and np.mean(lived) == pytest.approx(2, abs=0.15)


def test_buffer_policy_settings_are_checked_with_the_field_named():
    with pytest.raises(ConfigError, match=r"^replay\.uniform\.max_uses: 1 uses at most, fewer than ratio 2"):
        build_config(toy_dict(replay={"ratio": 2, "capacity": 64, "uniform": {"max_uses": 1}}))
    with pytest.raises(ConfigError, match=r"^replay\.uniform\.recency_alpha: "):
        build_config(toy_dict(replay={"ratio": 2, "capacity": 64, "uniform": {"recency_alpha": 3, "use_decay": 1}}))
    with pytest.raises(ConfigError, match=r"^replay\.uniform\.recency_alpha"):
        build_config(toy_dict(replay={"uniform": {"recency_alpha": -1}}))


def test_rollout_ess_is_each_rollouts_own_token_weights_effective_sample_size():
    import torch

    from workbench.trial.objectives import ObjectiveInput, rollout_ess

    ln2 = float(np.log(2.0))
    behaviour = torch.zeros(3, 3)
    logprobs = torch.tensor([[0.0, 0.0, 0.0], [ln2, 0.0, 5.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    inp = ObjectiveInput(
        logprobs=logprobs,
        mask=mask,
        behaviour_logprobs=behaviour,
        advantages=torch.zeros(3),
        rewards=torch.zeros(3),
        group_mean_rewards=torch.zeros(3),
    )
    # on-policy: 1; weights 2 and 1 (the padded token's 5.0 left out): (2 + 1)² / (2 (4 + 1)) = 0.9; no tokens: 1
    assert rollout_ess(inp).tolist() == pytest.approx([1.0, 0.9, 1.0])


def test_min_ess_retires_the_rollouts_whose_weights_spread_past_it_and_the_buffer_refills():
    cfg = build_config(
        toy_dict(batch_size=16, group_size=4, replay={"ratio": 2, "capacity": 64, "uniform": {"min_ess": 0.8}})
    )
    strategy = STRATEGIES["uniform"](cfg)
    rng, uid, made, generated = np.random.default_rng(0), 0, [], []
    for step in range(30):
        fresh = [rollout(uid + i, step) for i in range(strategy.groups(step) * 4)]
        uid += len(fresh)
        made += fresh
        generated.append(len(fresh))
        batch = strategy.batch(fresh, step, rng)
        assert len({r.uid for r in batch}) == 16 and not any(r.ess < 0.8 for r in batch)
        for r in batch:  # as the trainer sets it: odd uids drifted past the floor once trained twice
            r.ess = 0.5 if r.uid % 2 and r.uses >= 1 else 0.95
        mark_trained(batch)
    assert max(r.uses for r in made if r.uid % 2) == 2  # an odd rollout is drawn at most twice
    assert max(r.uses for r in made if not r.uid % 2) >= 4  # the even ones age as in the plain buffer
    retired = sum(r.ess < 0.8 for r in made) - sum(r.ess < 0.8 for r in strategy.buffer.items)
    assert strategy.metrics()["replay/retired_ess"] == retired > 0
    assert strategy.metrics()["replay/retired"] == retired  # no use cap here: every retirement is the ESS's
    # generation stays at B / y: a buffer of 64 still holds a batch, so retiring shortens reuse, it adds no groups
    assert sum(generated) == pytest.approx(30 * 8, abs=16)


def test_the_trainer_records_each_trained_rollouts_ess():
    from workbench.trial.step import train_step

    cfg, policy, optimizer, fresh = toy_step_setup(lr=1e-2)
    out, _, _ = train_step(policy, optimizer, fresh, cfg, 0)
    # the first step trains on-policy (the behaviour log-probs are this policy's, up to the scorer's rounding)
    assert all(r.ess == pytest.approx(1.0, abs=1e-4) for r in fresh)
    out, _, _ = train_step(policy, optimizer, fresh, cfg, 1)  # a step at lr 1e-2 later: the weights spread
    assert all(0 < r.ess <= 1 for r in fresh) and min(r.ess for r in fresh) < 0.999
    assert out.stats["ess"] < 1
