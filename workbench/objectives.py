"""Policy-gradient objectives, registered by name (`objective.name`).

Each objective takes the current per-token log-probs of a batch (with grad) and the batch's frozen data, and
returns a scalar loss to minimise plus diagnostics. Token-mean aggregation throughout: every completion token
of the batch weighs the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


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


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    ratio_mean: float
    """Mean importance ratio pi_theta / pi_behaviour over tokens."""
    clip_frac: float
    """Share of tokens whose clipped term was active."""


OBJECTIVES: dict[str, Callable[[ObjectiveInput, object], ObjectiveOutput]] = {}


def register_objective(name: str):
    """Register `fn(inp: ObjectiveInput, cfg: ObjectiveConfig) -> ObjectiveOutput` under `name`."""

    def wrap(fn):
        OBJECTIVES[name] = fn
        return fn

    return wrap


def _token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


@register_objective("ppo_clip")
def ppo_clip(inp: ObjectiveInput, cfg) -> ObjectiveOutput:
    """PPO-clip against the stored behaviour log-probs (Arnal App. D.2; DAPO's eps_low/eps_high).

    per token: -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A), r = exp(logp - behaviour_logp).
    """
    mask = inp.mask.float()
    log_ratio = (inp.logprobs - inp.behaviour_logprobs) * mask
    ratio = torch.exp(log_ratio)
    adv = inp.advantages[:, None].to(ratio.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high) * adv
    loss = -_token_mean(torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        active = ((ratio < 1 - cfg.eps_low) & (adv < 0)) | ((ratio > 1 + cfg.eps_high) & (adv > 0))
        clip_frac = float(_token_mean(active.float(), mask))
        ratio_mean = float(_token_mean(ratio, mask))
    return ObjectiveOutput(loss, ratio_mean, clip_frac)


@register_objective("asymre")
def asymre(inp: ObjectiveInput, cfg) -> ObjectiveOutput:
    """AsymRE (Arnal et al. 2025; replay-papers §1.6 item 6): no importance ratio.

    per token of rollout i: -(r_i - (V_i + dV)) * logp, V_i = group mean reward, dV = `asymre_delta_v` (-0.1).
    """
    mask = inp.mask.float()
    weight = (inp.rewards - (inp.group_mean_rewards + cfg.asymre_delta_v))[:, None].to(inp.logprobs.dtype)
    loss = -_token_mean(weight * inp.logprobs, mask)
    with torch.no_grad():
        ratio_mean = float(_token_mean(torch.exp((inp.logprobs - inp.behaviour_logprobs) * mask), mask))
    return ObjectiveOutput(loss, ratio_mean, 0.0)
