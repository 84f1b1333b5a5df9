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


# ---------------------------------------------------------------- the 2026 off-policy losses


def test_m2po_masks_the_largest_second_moments_until_tau_and_leaves_the_rest_unclipped():
    # four tokens of one rollout, advantage +1; log-ratios d = 0.1, 0.2, 0.3, -0.5 (the last moves against A: never
    # masked). Governed: the first three, d² 0.01, 0.04, 0.09, mean 0.0467 > tau 0.04; the running means in
    # increasing order are 0.01, 0.025, 0.0467: keep the first two, mask d = 0.3.
    d = torch.tensor([[0.1, 0.2, 0.3, -0.5]])
    inp = ObjectiveInput(
        logprobs=(d + math.log(0.5)).requires_grad_(True),
        mask=torch.ones(1, 4),
        behaviour_logprobs=torch.full((1, 4), math.log(0.5)),
        advantages=torch.tensor([1.0]),
        rewards=torch.tensor([1.0]),
        group_mean_rewards=torch.tensor([0.5]),
    )
    out = OBJECTIVES["m2po"](inp, ObjectiveConfig(m2_threshold=0.04))
    kept = torch.tensor([1.0, 1.0, 0.0, 1.0])
    expected = -(kept * torch.exp(d[0])).sum() / 4  # token mean over all 4 tokens, masked ones included
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.clip_frac == pytest.approx(1 / 4)
    assert out.stats["m2_before"] == pytest.approx((0.01 + 0.04 + 0.09) / 3, rel=1e-5)
    assert out.stats["m2_after"] == pytest.approx(0.025, rel=1e-5)
    out.loss.backward()
    # unclipped importance sampling: d/dlogp of -exp(d) A / 4 is -exp(d) / 4, beyond 1 +- eps too; masked: 0
    assert torch.allclose(inp.logprobs.grad, -(kept * torch.exp(d[0]))[None] / 4, atol=1e-6)
    # a generous tau masks nothing; on-policy (d = 0) nothing either
    assert OBJECTIVES["m2po"](inp, ObjectiveConfig(m2_threshold=1.0)).clip_frac == 0.0


def test_m2po_masks_negative_advantage_tokens_that_fell():
    # A < 0: governed are tokens whose ratio fell (d < 0); d = -0.4 (d² 0.16 > tau alone) is masked, d = +0.4 is not
    d = torch.tensor([[-0.4, 0.4]])
    inp = ObjectiveInput(
        logprobs=d.clone().requires_grad_(True),
        mask=torch.ones(1, 2),
        behaviour_logprobs=torch.zeros(1, 2),
        advantages=torch.tensor([-1.0]),
        rewards=torch.tensor([0.0]),
        group_mean_rewards=torch.tensor([0.5]),
    )
    out = OBJECTIVES["m2po"](inp, ObjectiveConfig())
    assert out.loss.item() == pytest.approx(math.exp(0.4) / 2, rel=1e-6)
    assert out.stats["m2_before"] == pytest.approx(0.16) and out.stats["m2_after"] == 0.0


def test_oapl_regresses_the_scaled_sequence_log_ratio_onto_the_optimal_advantage():
    # group of 2 rewards (1, 0), beta_1 = 1: V* = log((e + 1) / 2) = 0.6201; targets 1 - V* and -V*
    inp = two_rollouts()
    inp.group_rewards = [(1.0, 0.0), (1.0, 0.0)]
    cfg = ObjectiveConfig(oapl_beta=0.5, oapl_value_beta=1.0)
    out = OBJECTIVES["oapl"](inp, cfg)
    v = math.log((math.e + 1) / 2)
    seq = [math.log(2) + 0.0, math.log(0.5)]  # sum of token log-ratios: log 2 + log 1, and log 0.5 (pad excluded)
    residuals = [0.5 * seq[0] - (1 - v), 0.5 * seq[1] - (0 - v)]
    assert out.loss.item() == pytest.approx((residuals[0] ** 2 + residuals[1] ** 2) / 2, rel=1e-6)
    out.loss.backward()
    # d/dlogp_t of mean_i (beta Δ_i - target_i)² = 2 beta (beta Δ_i - target_i) / n, the same at every token of i
    g0, g1 = 2 * 0.5 * residuals[0] / 2, 2 * 0.5 * residuals[1] / 2
    assert torch.allclose(inp.logprobs.grad, torch.tensor([[g0, g0], [g1, 0.0]]), atol=1e-6)
    # at a small beta_1 V* approaches the group's best reward; at a large one, its mean
    from workbench.trial.objectives import optimal_values

    assert optimal_values([(1.0, 0.0)], 0.01).item() == pytest.approx(1.0 - 0.01 * math.log(2), rel=1e-6)
    assert optimal_values([(1.0, 0.0)], 100.0).item() == pytest.approx(0.5, abs=2e-3)


def test_oapl_on_fresh_data_pushes_successes_up_and_failures_down():
    inp = two_rollouts()
    inp.behaviour_logprobs = inp.logprobs.detach().clone()
    inp.group_rewards = [(1.0, 0.0), (1.0, 0.0)]
    out = OBJECTIVES["oapl"](inp, ObjectiveConfig())
    out.loss.backward()
    assert (inp.logprobs.grad[0] < 0).all() and inp.logprobs.grad[1, 0] > 0  # descent raises row 0, lowers row 1


def test_negative_veto_drops_the_trigger_and_the_rest_of_a_negative_rollout():
    # mu-GRPO's relaxed clip [0, 5] and veto at ratio 0.3: row 1 (A < 0) has ratios 1, 0.2, 1 -> tokens 2 and 3
    # vetoed; row 0 (A > 0) has a ratio 0.2 too but is never vetoed
    logprobs = torch.log(torch.tensor([[0.2, 1.0, 1.0], [1.0, 0.2, 1.0]])).requires_grad_(True)
    inp = ObjectiveInput(
        logprobs=logprobs,
        mask=torch.ones(2, 3),
        behaviour_logprobs=torch.zeros(2, 3),
        advantages=torch.tensor([1.0, -1.0]),
        rewards=torch.tensor([1.0, 0.0]),
        group_mean_rewards=torch.tensor([0.5, 0.5]),
    )
    cfg = ObjectiveConfig(eps_low=1.0, eps_high=4.0, veto_ratio=0.3, dual_clip=None)
    out = OBJECTIVES["ppo_clip"](inp, cfg)
    # surviving terms: row 0: 0.2 + 1 + 1; row 1: -1 (its first token); token mean over 6
    assert out.loss.item() == pytest.approx(-(2.2 - 1.0) / 6, rel=1e-6)
    assert out.stats["veto_frac"] == pytest.approx(2 / 6)
    out.loss.backward()
    assert logprobs.grad[1, 1] == 0 and logprobs.grad[1, 2] == 0 and logprobs.grad[1, 0] != 0
    without = OBJECTIVES["ppo_clip"](inp, cfg.model_copy(update={"veto_ratio": None}))
    assert without.loss.item() == pytest.approx(-(2.2 - 1.0 - 0.2 - 1.0) / 6, rel=1e-6)
