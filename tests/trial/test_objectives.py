import math

import pytest
import torch

from workbench.config import ObjectiveConfig
from workbench.trial.objectives import OBJECTIVES, ObjectiveInput, register_objective


def two_rollouts(requires_grad=True) -> ObjectiveInput:
    """Row 0: two tokens, advantage +1, reward 1. Row 1: one token (+1 pad), advantage -1, reward 0."""
    logprobs = torch.tensor([[math.log(0.5), math.log(0.25)], [math.log(0.1), 0.0]], requires_grad=requires_grad)
    return ObjectiveInput(
        logprobs=logprobs,
        mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        behaviour_logprobs=torch.tensor([[math.log(0.25), math.log(0.25)], [math.log(0.2), 0.0]]),
        advantages=torch.tensor([1.0, -1.0]),
        rewards=torch.tensor([1.0, 0.0]),
        group_mean_rewards=torch.tensor([0.5, 0.5]),
    )


def test_ppo_clip_matches_hand_computed_values():
    inp = two_rollouts()
    out = OBJECTIVES["ppo_clip"](inp, ObjectiveConfig(eps_low=0.2, eps_high=0.2))
    # ratios 2, 1, 0.5 -> surrogate terms min(2, 1.2)=1.2, 1, min(-0.5, -0.8)=-0.8; token mean 1.4/3
    assert out.loss.item() == pytest.approx(-1.4 / 3, rel=1e-6)
    assert out.ratio_mean == pytest.approx((2 + 1 + 0.5) / 3, rel=1e-6)
    assert out.clip_frac == pytest.approx(2 / 3)
    out.loss.backward()
    # clipped tokens get no gradient; the unclipped one gets -ratio * A / n_tokens
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[0.0, -1 / 3], [0.0, 0.0]]), atol=1e-7)


def test_ppo_clip_higher_changes_only_the_upper_clip():
    out = OBJECTIVES["ppo_clip"](two_rollouts(), ObjectiveConfig(eps_low=0.2, eps_high=1.5))
    # the first token is no longer clipped: 2 + 1 - 0.8
    assert out.loss.item() == pytest.approx(-2.2 / 3, rel=1e-6)
    assert out.clip_frac == pytest.approx(1 / 3)


def test_ppo_clip_on_fresh_data_is_the_policy_gradient():
    inp = two_rollouts()
    inp.behaviour_logprobs = inp.logprobs.detach().clone()
    out = OBJECTIVES["ppo_clip"](inp, ObjectiveConfig())
    assert out.ratio_mean == pytest.approx(1.0) and out.clip_frac == 0.0
    out.loss.backward()
    expected = -torch.tensor([[1.0, 1.0], [-1.0, 0.0]]) / 3
    assert torch.allclose(inp.logprobs.grad, expected, atol=1e-7)


def test_asymre_matches_hand_computed_values():
    inp = two_rollouts()
    out = OBJECTIVES["asymre"](inp, ObjectiveConfig(asymre_delta_v=-0.1))
    # weights r - (V + dV): 1 - 0.4 = 0.6 and 0 - 0.4 = -0.4, token mean over 3 tokens, no ratio
    expected = -(0.6 * (math.log(0.5) + math.log(0.25)) - 0.4 * math.log(0.1)) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    out.loss.backward()
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[-0.2, -0.2], [0.4 / 3, 0.0]]), atol=1e-7)
    assert out.clip_frac == 0.0


def test_objectives_are_a_registry_users_can_extend():
    @register_objective("test_only_reinforce")
    def reinforce(inp, cfg):
        from workbench.trial.objectives import ObjectiveOutput

        return ObjectiveOutput(-(inp.advantages[:, None] * inp.logprobs * inp.mask).sum() / inp.mask.sum(), 1.0, 0.0)

    try:
        from workbench.config import build_config

        assert build_config({"objective": {"name": "test_only_reinforce"}}).objective.name == "test_only_reinforce"
        out = OBJECTIVES["test_only_reinforce"](two_rollouts(), None)
        assert torch.isfinite(out.loss)
    finally:
        OBJECTIVES.pop("test_only_reinforce")


def test_tis_truncates_the_detached_weight_and_keeps_every_token_learning():
    inp = two_rollouts()
    out = OBJECTIVES["tis"](inp, ObjectiveConfig(tis_cap=1.5))
    # weights min(w, 1.5) with w = 2, 1, 0.5: loss = -(1.5 log .5 + 1 log .25 - 0.5 log .1) / 3
    expected = -(1.5 * math.log(0.5) + math.log(0.25) - 0.5 * math.log(0.1)) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.clip_frac == pytest.approx(1 / 3) and out.ratio_mean == pytest.approx(3.5 / 3, rel=1e-6)
    out.loss.backward()
    # unlike PPO's clip, the truncated token still gets a gradient, bounded by the cap
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[-0.5, -1 / 3], [0.5 / 3, 0.0]]), atol=1e-7)


def test_decoupled_ppo_with_one_step_per_batch_is_the_weighted_policy_gradient():
    inp = two_rollouts()
    out = OBJECTIVES["decoupled_ppo"](inp, ObjectiveConfig(decoupled_weight_cap=None))
    # pi_prox = the current policy (detached): u = 1, so the surrogate is A, weighted by pi_prox / pi_behav = 2, 1, 0.5
    assert out.loss.item() == pytest.approx(-(2 + 1 - 0.5) / 3, rel=1e-6) and out.clip_frac == 0.0
    out.loss.backward()
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[-2 / 3, -1 / 3], [0.5 / 3, 0.0]]), atol=1e-7)


def test_decoupled_ppo_masks_tokens_past_the_behaviour_cap():
    inp = two_rollouts()
    out = OBJECTIVES["decoupled_ppo"](inp, ObjectiveConfig(decoupled_weight_cap=1.5))
    # the token with weight 2 > 1.5 is masked out (not clamped to 1.5); the mean is still over all 3 tokens
    assert out.loss.item() == pytest.approx(-(1 - 0.5) / 3, rel=1e-6)
    assert out.stats["behaviour_masked_frac"] == pytest.approx(1 / 3)
    out.loss.backward()
    assert inp.logprobs.grad[0, 0] == 0.0


def test_decoupled_ppo_clips_against_the_proximal_policy():
    inp = two_rollouts()
    # pi_prox = the behaviour policy here, so u = 2, 1, 0.5: the first and last tokens leave the trust region
    inp.prox_logprobs = inp.behaviour_logprobs.clone()
    out = OBJECTIVES["decoupled_ppo"](inp, ObjectiveConfig(decoupled_weight_cap=None))
    assert out.loss.item() == pytest.approx(-1.4 / 3, rel=1e-6)  # weights 1: PPO-clip's hand-computed value
    assert out.clip_frac == pytest.approx(2 / 3) and out.stats["prox_ratio_mean"] == pytest.approx(3.5 / 3, rel=1e-6)
    out.loss.backward()
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[0.0, -1 / 3], [0.0, 0.0]]), atol=1e-7)


def test_ppo_dual_clip_bounds_negative_advantages():
    inp = two_rollouts()
    inp.logprobs = torch.tensor([[math.log(0.5), math.log(0.25)], [math.log(0.9), 0.0]], requires_grad=True)
    # row 1: ratio 0.9 / 0.2 = 4.5 with A = -1: PPO's term is -4.5; the dual clip bounds it at c * A = -3
    out = OBJECTIVES["ppo_clip"](inp, ObjectiveConfig(dual_clip=3.0))
    assert out.loss.item() == pytest.approx(-(1.2 + 1 - 3) / 3, rel=1e-6)
    assert out.stats["dual_clip_frac"] == pytest.approx(1 / 3)
    out.loss.backward()
    assert inp.logprobs.grad[1, 0] == 0.0
    off = OBJECTIVES["ppo_clip"](two_rollouts(), ObjectiveConfig(dual_clip=None))
    assert off.stats["dual_clip_frac"] == 0.0


def test_dual_clip_must_exceed_one():
    from workbench.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="objective.dual_clip"):
        build_config({"objective": {"dual_clip": 0.5}})


def test_ratio_stats_report_extremes_second_moment_and_effective_sample_size():
    from workbench.trial.objectives import ratio_stats

    s = ratio_stats(two_rollouts())
    assert s["ratio_max"] == pytest.approx(2) and s["ratio_min"] == pytest.approx(0.5)
    assert s["log_ratio_m2"] == pytest.approx(2 * math.log(2) ** 2 / 3, rel=1e-6)
    assert s["ess"] == pytest.approx(3.5**2 / (3 * 5.25), rel=1e-6)
    on_policy = two_rollouts()
    on_policy.behaviour_logprobs = on_policy.logprobs.detach() * on_policy.mask
    assert ratio_stats(on_policy)["ess"] == pytest.approx(1.0) and ratio_stats(on_policy)["log_ratio_m2"] == 0
