"""Every replay strategy through the real trainer path (toy size), with an invariant checked on what was trained."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from workbench.config import ConfigError, build_config
from workbench.trial.replay import ReplayBuffer, Rollout
from workbench.trial.strategies import STRATEGIES, Prioritized, is_correct, uniform_draw
from workbench.trial.tasks import load_task
from workbench.trial.loop import run_trial
from workbench.trial.step import train_step

from support.toy import rollout, toy_dict, toy_step_setup, tracked


def groups_of(batch: list[Rollout]) -> dict[int, list[Rollout]]:
    out: dict[int, list[Rollout]] = {}
    for r in batch:
        out.setdefault(r.group, []).append(r)
    return out


def test_every_strategy_of_the_design_is_registered():
    assert {"uniform", "positive_bias", "prioritized", "rlep", "dgg"} <= set(STRATEGIES)


def test_prioritized_trains_fresh_survivors_plus_young_prioritized_replay(tracking_uri):
    cfg = build_config(
        toy_dict(
            replay={
                "strategy": "prioritized",
                "prioritized": {"tau_max": 2, "warmup_steps": 2, "replay_fraction": 1.0},
            },
            budget={"compute_units": None, "steps": 10},
        )
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    replayed_total = 0
    for rec in records:
        assert len(rec.fresh) == cfg.batch_size  # fresh-anchored: a whole fresh batch every step
        by_group = groups_of(rec.fresh)
        survivors = {r.uid for g in by_group.values() if len({r.reward for r in g}) > 1 for r in g}
        uids = [r.uid for r in rec.batch]
        assert len(uids) == len(set(uids))  # without replacement
        fresh_in_batch = {r.uid for r in rec.batch if r.birth_step == rec.step}
        assert fresh_in_batch == survivors  # always every surviving fresh rollout, never a zero-variance group
        replay = [r for r in rec.batch if r.birth_step < rec.step]
        assert all(r.age(rec.step) <= 2 for r in rec.batch)  # never older than tau_max
        if rec.step < 2:
            assert not replay  # warm-up
        else:  # round(replay_fraction · survivors) from the buffer as it stood before the survivors joined it
            assert len(replay) == min(len(survivors), int(rec.metrics["replay/buffer_size"]) - len(survivors))
        assert rec.metrics["replay/replayed"] == len(replay)
        replayed_total += len(replay)
    assert replayed_total > 0


def test_prioritized_draw_prefers_large_advantages():
    cfg = build_config(
        toy_dict(
            replay={
                "strategy": "prioritized",
                "prioritized": {"warmup_steps": 0, "alpha": 1.0, "replay_fraction": 0.25},
            }
        )
    )
    strategy = Prioritized(cfg)
    rng = np.random.default_rng(0)
    old = [
        Rollout(i, 0, i // 4, [1], [2], torch.zeros(1), float(i % 2), 2.0 if i < 8 else 0.1, 0.5, 0) for i in range(32)
    ]
    strategy.buffer.add(old)
    fresh = [Rollout(100 + i, 1, 100 + i // 4, [1], [2], torch.zeros(1), float(i % 2), 1.0, 0.5, 1) for i in range(16)]
    counts = np.zeros(32)
    for _ in range(300):
        strategy.buffer = ReplayBuffer(1000, 10)
        strategy.buffer.add(old)
        batch = strategy.batch(list(fresh), step=1, rng=rng)
        for r in batch[16:]:
            counts[r.uid] += 1
    # P(i) ∝ |A_i| + eps: the 8 rollouts with |A| = 2 hold 16/(16 + 2.4) of the mass
    assert counts[:8].sum() / counts.sum() > 0.75


def test_positive_bias_batches_hold_the_configured_share_of_successes(tracking_uri):
    # temperature 0.3: the toy policy then samples enough successes to fill the share within a few steps
    cfg = build_config(
        toy_dict(
            generation={"temperature": 0.3},
            budget={"compute_units": None, "steps": 14},
            replay={"strategy": "positive_bias", "ratio": 2, "capacity": 64, "positive_bias": {"delta": 0.25}},
        )
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    need = round(0.25 * cfg.batch_size)
    saw_positives = False
    for rec in records:
        correct = sum(is_correct(r) for r in rec.batch)
        assert correct >= min(need, rec.metrics["replay/pool_correct"])
        assert len({r.uid for r in rec.batch}) == cfg.batch_size
        assert rec.metrics["replay/positives"] <= 0.25 * 64
        saw_positives |= rec.metrics["replay/positives"] > 0
    assert saw_positives  # successes pushed out of the fresh part were kept
    assert any(rec.metrics["replay/pool_correct"] >= need for rec in records)


def test_the_rlep_pool_is_keyed_by_the_model_the_trials_source_gives(monkeypatch, tmp_path):
    """No `model.path`: the pool is built from (and cached under) the checkpoint of the trial's model source."""
    from pathlib import Path

    from workbench.registry import MODEL_SOURCES
    from workbench.trial.model_sources import ModelSource
    from workbench.trial.strategies import rlep_pool

    class Packaged(ModelSource):
        @classmethod
        def checkpoint(cls, cfg, task):
            return tmp_path / "unpacked-model"

    monkeypatch.setitem(MODEL_SOURCES, "packaged_for_rlep", Packaged)
    monkeypatch.setattr(rlep_pool, "build_once", lambda final, build: final)  # where it would build, not a build
    cfg = build_config(
        toy_dict(replay={"strategy": "rlep"}, model={"source": "packaged_for_rlep", "cache_dir": str(tmp_path)})
    )
    path = rlep_pool.ensure_pool(cfg, load_task(cfg.task))
    assert path == Path(tmp_path) / "rlep" / f"pool-{rlep_pool.pool_key(cfg, str(tmp_path / 'unpacked-model'))}.jsonl"


def test_rlep_groups_mix_pooled_successes_with_recomputed_log_probs(tracking_uri, tmp_path):
    cfg = build_config(
        toy_dict(
            replay={
                "strategy": "rlep",
                "rlep": {"m": 2, "n_prompts": 48, "seed_rl_steps": 2, "samples": 12, "min_correct": 1},
            },
            budget={"compute_units": None, "steps": 6},
        )
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    from workbench.trial.strategies.rlep_pool import ensure_pool

    task = load_task(cfg.task)
    pool_path = ensure_pool(cfg, task)  # the cached pool the trial used
    pool = {json.loads(line)["prompt"]: json.loads(line)["completions"] for line in pool_path.read_text().splitlines()}
    assert pool, "the toy seed policy found no success to pool"
    full = 0
    for rec in records:
        assert rec.metrics["offpolicy/ratio_max"] == pytest.approx(1.0, abs=2e-3)  # old log-probs recomputed by the
        assert rec.metrics["offpolicy/ratio_min"] == pytest.approx(1.0, abs=2e-3)  # current policy, pooled ones too
        for members in groups_of(rec.batch).values():
            fresh = [r for r in members if r.source == "fresh"]
            pooled = [r for r in members if r.source == "pool"]
            available = len(pool.get(task.train[members[0].prompt_index].prompt, []))
            assert len(fresh) == cfg.group_size and len(pooled) == min(
                2, available
            )  # G + M (fewer only if the pool has fewer)
            assert all(r.completion_ids and r.reward == 1.0 for r in pooled)  # verified successes, never empty padding
            assert members[0].prompt_index < 48
            rewards = [r.reward for r in members]
            assert all(r.group_mean_reward == pytest.approx(np.mean(rewards)) for r in members)  # advantages over G + M
            assert abs(sum(r.advantage for r in members)) < 1e-6
            full += len(pooled) == 2
    assert full > 0


def test_dgg_never_gates_a_first_pass_and_never_exceeds_k(tracking_uri):
    cfg = build_config(
        toy_dict(
            replay={"strategy": "dgg", "dgg": {"max_reuse": 3, "window": 2, "tau": 0.1}},
            budget={"compute_units": None, "steps": 24},
        )
    )
    records = []
    run_trial(tracked(cfg, tracking_uri), observer=records.append)
    passes, gated_any, updates = 0, False, 0
    for i, rec in enumerate(records):
        gated = rec.metrics["dgg/gated"] == 1.0
        if rec.fresh:
            passes = 1
            assert not gated  # the first pass of a batch is never gated
        else:
            passes += 1
            prev = records[i - 1]
            assert prev.metrics["dgg/gated"] == 0.0 and prev.metrics["dgg/pass"] < 3  # reuse ends at a gate or at K
            assert [r.uid for r in rec.batch] == [r.uid for r in prev.batch]  # the same batch reused
        assert rec.metrics["dgg/pass"] == passes <= 3
        updates += not gated
        assert rec.metrics["train/updates"] == updates  # a gated pass takes no optimizer step
        gated_any |= gated
    assert gated_any and any(rec.metrics["dgg/pass"] == 3 for rec in records)


def test_a_gated_step_leaves_weights_and_optimizer_untouched():
    cfg, policy, optimizer, fresh = toy_step_setup(lr=1e-2)
    assert any(r.advantage != 0 for r in fresh)  # a real gradient to gate
    train_step(policy, optimizer, fresh, cfg, 0)  # a real step first: Adam has moments
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    moments = {id(p): s["exp_avg"].clone() for p, s in optimizer.state.items()}
    _, _, applied = train_step(policy, optimizer, fresh, cfg, 1, gate=lambda model, step: True)
    assert not applied
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert all(torch.equal(moments[id(p)], s["exp_avg"]) for p, s in optimizer.state.items())
    _, _, applied = train_step(policy, optimizer, fresh, cfg, 2)
    assert applied and not all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_strategy_settings_are_validated_with_the_field_named():
    with pytest.raises(ConfigError, match=r"^replay.ratio: must be 1 with replay.strategy prioritized"):
        build_config(toy_dict(replay={"strategy": "prioritized", "ratio": 2}))
    with pytest.raises(ConfigError, match=r"^replay.positive_bias.delta: "):
        build_config(toy_dict(replay={"strategy": "positive_bias", "capacity": 16, "positive_bias": {"delta": 0.5}}))
    with pytest.raises(ConfigError, match=r"^replay.dgg.signal"):
        build_config(toy_dict(replay={"strategy": "dgg", "dgg": {"signal": "norm"}}))
    with pytest.raises(ConfigError, match=r"^replay.strategy: unknown 'per'"):
        build_config(toy_dict(replay={"strategy": "per"}))
    assert build_config(toy_dict(replay={"strategy": "prioritized"})).replay.capacity == 16 * 12  # B (tau_max + 2)


def test_every_registered_strategy_validates_on_the_default_trial_with_no_other_setting():
    for name in STRATEGIES:
        cfg = build_config({"replay": {"strategy": name}})
        assert cfg.replay.capacity >= cfg.batch_size  # the strategy's default capacity suits the default batch
    pb = build_config({"replay": {"strategy": "positive_bias"}})
    assert pb.replay.capacity - round(0.2 * pb.replay.capacity) >= pb.batch_size  # the fresh part holds a whole batch


# ---------------------------------------------------------------- uniform draws (Arnal et al.)


def test_uniform_draws_distinct_rollouts_and_keeps_them():
    buf = ReplayBuffer(capacity=64)
    buf.add([rollout(i, 0) for i in range(64)])
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(50):
        batch = uniform_draw(buf.items, 16, rng)
        uids = [r.uid for r in batch]
        assert len(set(uids)) == 16 and uids == sorted(uids)
        seen.update(uids)
    assert len(buf) == 64  # drawing never removes
    assert len(seen) == 64  # every rollout is reachable


def _uses_by_birth(warmup: str, steps: int = 60, seed: int = 0) -> tuple[dict[int, float], list[int]]:
    """Drive the uniform strategy at B 16, G 4, y 2, x 8 for `steps` steps: mean draws per rollout by birth step,
    and the rollouts generated each step."""
    cfg = build_config(toy_dict(batch_size=16, group_size=4, replay={"ratio": 2, "capacity": 128, "warmup": warmup}))
    strategy = STRATEGIES["uniform"](cfg)
    rng, uid, uses, born, generated = np.random.default_rng(seed), 0, {}, {}, []
    for step in range(steps):
        fresh = [rollout(uid + i, step) for i in range(strategy.groups(step) * 4)]
        uid += len(fresh)
        generated.append(len(fresh))
        born.update({r.uid: step for r in fresh})
        for r in strategy.batch(fresh, step, rng):
            uses[r.uid] = uses.get(r.uid, 0) + 1
    by_birth: dict[int, list[int]] = {}
    for u, step in born.items():
        if step < steps - 20:  # rollouts that lived their whole life in the run
            by_birth.setdefault(step, []).append(uses.get(u, 0))
    return {step: float(np.mean(v)) for step, v in by_birth.items()}, generated


def _mean_uses(warmup: str, seeds: int = 20) -> tuple[dict[int, float], list[int]]:
    runs = [_uses_by_birth(warmup, seed=s) for s in range(seeds)]
    return {step: float(np.mean([r[0][step] for r in runs])) for step in runs[0][0]}, runs[0][1]


def test_warmup_fill_keeps_the_first_rollouts_from_being_overused():
    borrow, gen_borrow = _mean_uses("borrow")
    fill, gen_fill = _mean_uses("fill")
    # borrow: the first batch is trained on twice in a row, then drawn from a small buffer: ~5-6 uses, not y = 2
    assert borrow[0] > 4.5 and gen_borrow[:3] == [16, 0, 8]
    # fill: B fresh per step until the buffer holds its capacity (8 steps), then B / y; the first batch ~H(8) = 2.7
    assert gen_fill[:9] == [16] * 8 + [8] and set(gen_fill[9:]) == {8}
    assert fill[0] < 3.3 and max(fill.values()) < 3.3
    # later rollouts: about y uses in both
    assert (
        abs(np.mean([fill[s] for s in range(20, 40)]) - 2) < 0.2
        and abs(np.mean([borrow[s] for s in range(20, 40)]) - 2) < 0.2
    )


def test_warmup_fill_is_refused_by_strategies_that_do_not_implement_it():
    with pytest.raises(ConfigError, match=r"^replay.warmup: fill is not supported by replay.strategy prioritized"):
        build_config(toy_dict(replay={"strategy": "prioritized", "warmup": "fill"}))
    with pytest.raises(ConfigError, match=r"^replay.warmup: "):
        build_config(toy_dict(replay={"warmup": "prefill"}))


def test_uniform_with_capacity_equal_to_batch_returns_exactly_the_fresh_rollouts():
    buf = ReplayBuffer(capacity=8)
    old = [rollout(i, 0) for i in range(8)]
    fresh = [rollout(100 + i, 1) for i in range(8)]
    buf.add(old)
    buf.add(fresh)
    buf.evict(1)
    batch = uniform_draw(buf.items, 8, np.random.default_rng(3))
    assert batch == fresh


def test_uniform_draw_is_uniform_over_the_buffer():
    buf = ReplayBuffer(capacity=20)
    buf.add([rollout(i, 0) for i in range(20)])
    rng = np.random.default_rng(1)
    counts = np.zeros(20)
    for _ in range(4000):
        for r in uniform_draw(buf.items, 5, rng):
            counts[r.uid] += 1
    expected = 4000 * 5 / 20
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))


def test_with_replacement_can_repeat_within_a_batch():
    buf = ReplayBuffer(capacity=4)
    buf.add([rollout(i, 0) for i in range(4)])
    batch = uniform_draw(buf.items, 16, np.random.default_rng(0), with_replacement=True)
    assert len(batch) == 16 and len({r.uid for r in batch}) <= 4


def test_a_horizon_too_short_for_a_batch_is_rejected_at_the_edge():
    # H + 1 steps of fresh rollouts at R = B / y per step hold fewer than B distinct rollouts when H + 1 < y
    with pytest.raises(ConfigError, match=r"^replay\.horizon: 1 keeps 2 step\(s\)"):
        build_config(toy_dict(replay={"ratio": 4, "capacity": 64, "horizon": 1}))
    assert build_config(toy_dict(replay={"ratio": 2, "capacity": 64, "horizon": 1})).replay.horizon == 1
    assert (
        build_config(
            toy_dict(replay={"ratio": 4, "capacity": 64, "horizon": 1, "with_replacement": True})
        ).replay.horizon
        == 1
    )
