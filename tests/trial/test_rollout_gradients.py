"""The probe's per-rollout gradients: the vectorised path against one backward per rollout."""

import numpy as np
import pytest
import torch

from workbench import noise
from workbench.config import build_config
from workbench.trial import rollout_gradients
from workbench.trial.objectives import OBJECTIVES
from workbench.trial.policy import Policy
from workbench.trial.rollouts import generate_groups
from workbench.trial.tasks import load_task

from support.toy import toy_dict


@pytest.fixture(scope="module")
def toy():
    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    rollouts, _ = generate_groups(policy, task, list(range(6)), cfg.group_size, 0, torch.Generator().manual_seed(0), 0)
    # advantages of both signs whatever the tiny model's rewards (its groups may all tie: no gradient to compare)
    for i, r in enumerate(rollouts):
        r.advantage = (1.0, -0.5, 0.25)[i % 3]
    # stale rollouts: behaviour log-probs moved off the current policy's, so ratios leave the clip range both ways
    shift = torch.Generator().manual_seed(1)
    for r in rollouts[::2]:
        r.behaviour_logprobs = r.behaviour_logprobs + 0.5 * torch.randn(r.behaviour_logprobs.shape, generator=shift)
    for r in rollouts[1::3]:
        r.trainer_logprobs = r.behaviour_logprobs - 0.1  # an engine mismatch, for the importance-sampling correction
    n = sum(p.numel() for p in policy.model.parameters())
    idx, sign = noise.count_sketch(n, 256, seed=0)
    return cfg, policy, rollouts, (torch.from_numpy(idx), torch.from_numpy(sign), 256)


@pytest.mark.parametrize("objective", ["ppo_clip", "asymre", "decoupled_ppo", "tis"])
def test_vectorised_gradients_are_each_rollouts_own_backward(toy, objective):
    cfg, policy, rollouts, sketch = toy
    assert objective in OBJECTIVES
    cfg = cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"name": objective})})
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    attention = policy.model.config._attn_implementation
    policy.model.train()
    threads = torch.get_num_threads()
    done = []
    fast = rollout_gradients.sketched_gradients(policy, rollouts, cfg, sketch, on_done=done.append)
    slow = rollout_gradients.sketched_gradients(policy, rollouts, cfg, sketch, vectorised=False)
    assert fast.shape == (len(rollouts), 256) and sum(done) == len(rollouts)
    assert np.abs(slow).max() > 0  # rollouts with a gradient: the comparison is not between zeros
    np.testing.assert_allclose(fast, slow, rtol=1e-4, atol=1e-5 * np.abs(slow).max())
    assert policy.model.training and torch.get_num_threads() == threads  # left as found
    assert all(torch.equal(v, before[k]) for k, v in policy.model.state_dict().items())
    assert policy.model.config._attn_implementation == attention  # (the vectorised pass uses the eager one)


def test_the_importance_sampling_correction_weights_both_paths_alike(toy):
    cfg, policy, rollouts, sketch = toy
    cfg = cfg.model_copy(
        update={"generation": cfg.generation.model_copy(update={"mismatch_correction": "importance_sampling"})}
    )
    fast = rollout_gradients.sketched_gradients(policy, rollouts, cfg, sketch)
    slow = rollout_gradients.sketched_gradients(policy, rollouts, cfg, sketch, vectorised=False)
    np.testing.assert_allclose(fast, slow, rtol=1e-4, atol=1e-5 * np.abs(slow).max())


def test_a_chunk_holds_as_many_rollouts_as_its_memory_allows():
    assert rollout_gradients.chunk_size(500_000) == rollout_gradients.CHUNK_MAX
    assert 1 < rollout_gradients.chunk_size(20_000_000) < rollout_gradients.CHUNK_MAX
    assert rollout_gradients.chunk_size(500_000_000) == 1  # one rollout at a time: the reference path
