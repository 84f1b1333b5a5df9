"""Policy-gradient objectives, registered by name (`objective.name`).

Each objective takes the current per-token log-probs of a batch (with grad) and the batch's frozen data, and
returns a scalar loss to minimise plus diagnostics. Token-mean aggregation (every completion token of the batch
weighs the same), except `oapl`'s regression, a mean over rollouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.config import ObjectiveConfig
from workbench.registry import OBJECTIVES


@dataclass
class ObjectiveInput:
    logprobs: torch.Tensor
    """[n, T] current log-probs of the completion tokens (with grad), zero where `mask` is 0."""
    mask: torch.Tensor
    """[n, T] 1 for completion tokens."""
    behaviour_logprobs: torch.Tensor
    """[n, T] log-probs stored at generation (the behaviour policy)."""
    advantages: torch.Tensor
    """[n] GRPO group advantages, frozen at generation."""
    rewards: torch.Tensor
    """[n] rewards."""
    group_mean_rewards: torch.Tensor
    """[n] mean reward of each rollout's group (V-hat of AsymRE)."""
    token_weights: torch.Tensor | None = None
    """[n, T] detached per-token loss weights (the truncated train/inference mismatch correction), or None."""
    prox_logprobs: torch.Tensor | None = None
    """[n, T] log-probs under the parameters before this batch's first optimizer step (the proximal policy of
    decoupled PPO), when the batch is trained in several minibatch steps; None: the current parameters."""
    group_rewards: list[tuple[float, ...]] | None = None
    """The rewards of each rollout's whole group at generation (OAPL's V*); None: each rollout's own reward."""


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    ratio_mean: float
    """Mean importance ratio pi_theta / pi_behaviour over tokens."""
    clip_frac: float
    """Share of tokens whose clipped or truncated term was active."""
    stats: dict[str, float] | None = None
    """The objective's own diagnostics, to which the trainer adds the batch's importance-ratio statistics
    (`ratio_stats`); logged as `offpolicy/<name>`."""


def ratio_stats(inp: ObjectiveInput) -> dict[str, float]:
    """Off-policy diagnostics of a batch: token importance ratios w = pi_theta / pi_behaviour.

    - `ratio_max`, `ratio_min`: extremes over completion tokens;
    - `log_ratio_m2`: mean (log w)² over tokens, M2PO's second moment;
    - `ess`: normalised effective sample size of the token weights, (Σw)² / (n Σw²), in (0, 1]; 1 when on-policy.
    """
    with torch.no_grad():
        mask = inp.mask.bool()
        log_w = (inp.logprobs.detach() - inp.behaviour_logprobs)[mask].double()
        if log_w.numel() == 0:
            return {"ratio_max": 1.0, "ratio_min": 1.0, "log_ratio_m2": 0.0, "ess": 1.0}
        w = torch.exp(log_w)
        return {
            "ratio_max": float(w.max()),
            "ratio_min": float(w.min()),
            "log_ratio_m2": float((log_w**2).mean()),
            "ess": float(w.sum() ** 2 / (w.numel() * (w**2).sum())),
        }


def rollout_ess(inp: ObjectiveInput) -> torch.Tensor:
    """Per rollout of a batch: the normalised effective sample size of its completion tokens' importance weights,
    (Σw)² / (n Σw²) over its own tokens, in (0, 1]; 1 for a rollout trained on-policy (or with no tokens). The
    per-rollout form of `ratio_stats`'s `ess`, VCPO's predictor of collapse under staleness."""
    with torch.no_grad():
        mask = inp.mask.to(torch.float64)
        w = torch.exp((inp.logprobs.detach() - inp.behaviour_logprobs).to(torch.float64)) * mask
        n = mask.sum(dim=1)
        ess = w.sum(dim=1) ** 2 / (n * (w**2).sum(dim=1)).clamp(min=1e-300)
        return torch.where(n > 0, ess, torch.ones_like(ess))


def register_objective(name: str, mean: str = "tokens"):
    """Register `fn(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput` under `name` (`objective.name`).
    `mean`: what its loss averages over, `tokens` (every completion token weighs the same) or `rollouts`; the trainer
    weights micro-batches by their share of it (`aggregation`), so micro-batches give the one-pass gradient."""

    def wrap(fn):
        fn.mean = mean
        return OBJECTIVES.register(name)(fn)

    return wrap


def aggregation(objective) -> str:
    """What a registered objective's loss averages over: `tokens` or `rollouts`."""
    return getattr(objective, "mean", "tokens")


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _loss_mean(values: torch.Tensor, inp: ObjectiveInput) -> torch.Tensor:
    """Token mean of per-token loss terms, each weighted by the mismatch correction when there is one."""
    if inp.token_weights is not None:
        values = values * inp.token_weights
    return _token_mean(values, inp.mask.float())


@register_objective("ppo_clip")
def ppo_clip(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """PPO-clip against the stored behaviour log-probs (Arnal App. D.2; DAPO's eps_low/eps_high), with the dual
    clip for negative advantages (Ye et al. 2020; verl's clip_ratio_c).

    per token: -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A), r = exp(logp - behaviour_logp); for A < 0 the
    term is bounded below by c * A (c = `dual_clip`): a very stale token whose ratio has grown past c cannot push
    the loss without bound, and gets no gradient.
    """
    mask = inp.mask.float()
    log_ratio = (inp.logprobs - inp.behaviour_logprobs) * mask
    ratio = torch.exp(log_ratio)
    adv = inp.advantages[:, None].to(ratio.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high) * adv
    surrogate = torch.minimum(unclipped, clipped)
    dual = torch.zeros_like(ratio, dtype=torch.bool)
    if cfg.dual_clip is not None:
        floor = cfg.dual_clip * adv
        dual = (adv < 0) & (surrogate < floor)
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, floor), surrogate)
    stats = {}
    if cfg.veto_ratio is not None:
        vetoed = negative_veto(ratio.detach(), mask, adv, cfg.veto_ratio)
        surrogate = surrogate * (1 - vetoed)
        stats["veto_frac"] = float(_token_mean(vetoed, mask))
    loss = -_loss_mean(surrogate, inp)
    with torch.no_grad():
        active = ((ratio < 1 - cfg.eps_low) & (adv < 0)) | ((ratio > 1 + cfg.eps_high) & (adv > 0)) | dual
        clip_frac = float(_token_mean(active.float(), mask))
        ratio_mean = float(_token_mean(ratio, mask))
    return ObjectiveOutput(
        loss, ratio_mean, clip_frac, {"dual_clip_frac": float(_token_mean(dual.float(), mask)), **stats}
    )


def negative_veto(ratio: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, trigger: float) -> torch.Tensor:
    """mu-GRPO's veto as a [n, T] 0/1 tensor: in each row of negative advantage, the first completion token whose
    ratio is below `trigger` and every token after it; 0 elsewhere."""
    fired = ((ratio < trigger) & mask.bool() & (adv < 0)).float()
    return (torch.cumsum(fired, dim=1) > 0).float() * mask


@register_objective("asymre")
def asymre(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """AsymRE (Arnal et al. 2025): no importance ratio.

    per token of rollout i: -(r_i - (V_i + dV)) * logp, V_i = group mean reward, dV = `asymre_delta_v` (-0.1).
    """
    mask = inp.mask.float()
    weight = (inp.rewards - (inp.group_mean_rewards + cfg.asymre_delta_v))[:, None].to(inp.logprobs.dtype)
    loss = -_loss_mean(weight * inp.logprobs, inp)
    with torch.no_grad():
        ratio_mean = float(_token_mean(torch.exp((inp.logprobs - inp.behaviour_logprobs) * mask), mask))
    return ObjectiveOutput(loss, ratio_mean, 0.0)


@register_objective("decoupled_ppo")
def decoupled_ppo(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """AReaL's decoupled PPO (arXiv 2505.24298): the trust region is anchored on the proximal
    policy pi_prox, the behaviour gap corrected by a detached weight.

    per token: -(pi_prox / pi_behav) * min(u * A, clip(u, 1 - eps_low, 1 + eps_high) * A), u = pi_theta / pi_prox.
    pi_prox is the policy before this batch's first optimizer step: with `objective.minibatches` > 1 the batch is
    trained in several steps and the clip bounds how far they move together from pi_prox (the trainer computes
    its log-probs once per batch). With one step per batch pi_prox is the current policy, u = 1 and the clip
    never binds: the objective is then the weighted policy gradient. Tokens whose behaviour weight exceeds
    `decoupled_weight_cap` are masked out (they contribute nothing), as AReaL does, not clamped.
    """
    mask = inp.mask.float()
    prox = inp.prox_logprobs if inp.prox_logprobs is not None else inp.logprobs.detach()
    weight = torch.exp((prox - inp.behaviour_logprobs) * mask)
    kept = mask if cfg.decoupled_weight_cap is None else mask * (weight <= cfg.decoupled_weight_cap).float()
    u = torch.exp((inp.logprobs - prox) * mask)
    adv = inp.advantages[:, None].to(u.dtype)
    surrogate = torch.minimum(u * adv, torch.clamp(u, 1 - cfg.eps_low, 1 + cfg.eps_high) * adv)
    loss = -_loss_mean(weight * kept * surrogate, inp)
    with torch.no_grad():
        clipped = ((u < 1 - cfg.eps_low) & (adv < 0)) | ((u > 1 + cfg.eps_high) & (adv > 0))
        ratio_mean = float(_token_mean(weight, mask))
        stats = {
            "behaviour_masked_frac": float(_token_mean(mask - kept, mask)),
            "prox_ratio_mean": float(_token_mean(u, mask)),
        }
    return ObjectiveOutput(loss, ratio_mean, float(_token_mean(clipped.float() * kept, mask)), stats)


@register_objective("tis")
def truncated_is(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """Truncated importance sampling policy gradient (as TRL's and verl's rollout corrections truncate the ratio).

    per token: -min(w, C) * A * logp, w = pi_theta / pi_behaviour detached, C = `tis_cap`. Unlike PPO's clip,
    the truncation bounds the weight without zeroing the gradient of tokens beyond it, so stale tokens still learn
    with a bounded weight; the bias of the truncation is the price of its bounded variance.
    """
    mask = inp.mask.float()
    w = torch.exp((inp.logprobs.detach() - inp.behaviour_logprobs) * mask)
    weight = torch.clamp(w, max=cfg.tis_cap)
    adv = inp.advantages[:, None].to(inp.logprobs.dtype)
    loss = -_loss_mean(weight * adv * inp.logprobs, inp)
    with torch.no_grad():
        truncated = float(_token_mean((w > cfg.tis_cap).float(), mask))
        ratio_mean = float(_token_mean(w, mask))
    return ObjectiveOutput(loss, ratio_mean, truncated)


@register_objective("m2po")
def m2po(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """M2PO (Zheng, Zhao, Chen, arXiv 2510.01161), as Trinity-RFT ships it: token-level importance sampling without a
    clip, its trust region kept by masking tokens until the second moment of their log-ratios is small.

    With d = log pi_theta / pi_behaviour per token, the tokens the trust region governs are those that move the way
    their advantage pushes (A > 0 and d > 0, or A < 0 and d < 0). If the mean of d² over them exceeds tau
    (`m2_threshold`), the ones of largest d² are masked until the mean of the rest is at most tau (the longest
    prefix in increasing d² whose running mean is <= tau is kept); the other tokens are never masked. Per token:
    -M * exp(d) * A, token mean over all completion tokens (masked ones count in the denominator). The mask is
    chosen once per forward pass, over the whole step's batch unless `train.micro_batch_size` splits it (Trinity
    chooses it over the whole minibatch). d is clamped to +-20 in the forward pass only, as Trinity's."""
    mask = inp.mask.float()
    d = (inp.logprobs - inp.behaviour_logprobs) * mask
    d = d + (torch.clamp(d, -20.0, 20.0) - d).detach()
    adv = inp.advantages[:, None].to(d.dtype)
    with torch.no_grad():
        square = d.detach() ** 2
        governed = mask.bool() & (((adv > 0) & (d > 0)) | ((adv < 0) & (d < 0)))
        kept = mask.clone()
        values = square[governed]
        m2_before = float(values.mean()) if values.numel() else 0.0
        if values.numel() and m2_before > cfg.m2_threshold:
            ordered, order = torch.sort(values.double())
            running = torch.cumsum(ordered, 0) / torch.arange(1, len(ordered) + 1, dtype=torch.float64)
            keep = int((running <= cfg.m2_threshold).sum())  # running means rise with each larger d²: a prefix
            drop = torch.zeros(len(values), dtype=torch.bool)
            drop[order[keep:]] = True
            flat = kept[governed]
            flat[drop] = 0.0
            kept[governed] = flat
        left = square[governed & kept.bool()]
        m2_after = float(left.mean()) if left.numel() else 0.0
    loss = -_loss_mean(kept * torch.exp(d) * adv, inp)
    with torch.no_grad():
        masked = float(_token_mean(mask - kept, mask))
        ratio_mean = float(_token_mean(torch.exp(d.detach()), mask))
    return ObjectiveOutput(loss, ratio_mean, masked, {"m2_before": m2_before, "m2_after": m2_after})


def optimal_values(group_rewards: list[tuple[float, ...]], beta: float) -> torch.Tensor:
    """OAPL's V*(x) = beta log mean_j exp(r_j / beta) over each rollout's group (its rollouts from the lagged
    policy), [n] in float64."""
    out = []
    for rewards in group_rewards:
        r = torch.tensor(rewards, dtype=torch.float64) / beta
        out.append(beta * (torch.logsumexp(r, 0) - math.log(len(rewards))))
    return torch.stack(out)


@register_objective("oapl", mean="rollouts")
def oapl(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput:
    """OAPL (Ritter et al., arXiv 2602.19362; the authors' code): least-squares regression of the scaled sequence
    log-ratio onto the optimal advantage, no importance weight and no clip; the lagged inference policy is each
    rollout's behaviour policy (for a replayed rollout, the policy that generated it).

    per rollout i of group x: (beta_2 * sum_t (logp_t - behaviour_logp_t) - (r_i - V*(x)))², V*(x) = beta_1 log mean_j
    exp(r_j / beta_1) over x's group; mean over rollouts (a sequence mean, not a token mean: the log-ratio is summed
    over the sequence's tokens, not normalised by its length). beta_2 = `oapl_beta`, beta_1 = `oapl_value_beta`.
    Micro-batches (`train.micro_batch_size`) are weighted by their share of the rollouts. The mismatch correction's
    token weights are not applied (OAPL has none)."""
    mask = inp.mask.float()
    log_ratio = ((inp.logprobs - inp.behaviour_logprobs) * mask).sum(dim=1)
    groups = inp.group_rewards if inp.group_rewards is not None else [(float(r),) for r in inp.rewards]
    values = optimal_values(groups, cfg.oapl_value_beta).to(log_ratio.device, log_ratio.dtype)
    target = inp.rewards.to(log_ratio.dtype) - values
    residual = cfg.oapl_beta * log_ratio - target
    loss = (residual**2).mean()
    with torch.no_grad():
        ratio_mean = float(_token_mean(torch.exp((inp.logprobs - inp.behaviour_logprobs) * mask), mask))
        stats = {"oapl_target_abs": float(target.abs().mean()), "oapl_residual_abs": float(residual.abs().mean())}
    return ObjectiveOutput(loss, ratio_mean, 0.0, stats)
