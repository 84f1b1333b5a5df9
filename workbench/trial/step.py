"""One optimizer step: score the batch under the current policy, the configured objective, backward, step.

`objective_input` lines up what was frozen at generation (behaviour log-probs, advantages, rewards) with the
current log-probs; the vLLM mismatch correction (`generation.mismatch_correction: importance_sampling`) weights
tokens there. `rescore` is RLEP's recomputation of old log-probs by the current policy.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from workbench.backends.hf import score
from workbench.config import TrialConfig
from workbench.registry import OBJECTIVES
from workbench.trial.objectives import ObjectiveInput, ObjectiveOutput, ratio_stats
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout


class TrialDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite."""


def objective_input(policy: Policy, batch: list[Rollout], correction_cap: float | None = None) -> ObjectiveInput:
    """Score the batch under the current policy (with grad) and line up its frozen generation-time data."""
    logprobs, mask = score(
        policy.model,
        [r.prompt_ids for r in batch],
        [r.completion_ids for r in batch],
        temperature=policy.temperature,
        pad_id=policy.pad_id,
    )
    behaviour = torch.zeros_like(logprobs)
    for i, r in enumerate(batch):
        behaviour[i, : len(r.behaviour_logprobs)] = r.behaviour_logprobs.to(behaviour.device)
    weights = None
    if correction_cap is not None and any(r.trainer_logprobs is not None for r in batch):
        # Truncated IS for the train/inference mismatch (TRL, verl): the trainer's log-probs at generation are the
        # PPO ratio's old policy, and each token's loss is weighted by min(pi_trainer / pi_engine, cap).
        trainer = behaviour.clone()
        for i, r in enumerate(batch):
            if r.trainer_logprobs is not None:
                trainer[i, : len(r.trainer_logprobs)] = r.trainer_logprobs.to(trainer.device)
        weights = torch.clamp(torch.exp((trainer - behaviour) * mask), max=correction_cap).detach()
        behaviour = trainer
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.float32, device=logprobs.device)  # noqa: E731
    return ObjectiveInput(
        token_weights=weights,
        logprobs=logprobs,
        mask=mask,
        behaviour_logprobs=behaviour,
        advantages=as_tensor([r.advantage for r in batch]),
        rewards=as_tensor([r.reward for r in batch]),
        group_mean_rewards=as_tensor([r.group_mean_reward for r in batch]),
    )


def rescore(policy: Policy, rollouts: list[Rollout]) -> None:
    """Replace the rollouts' behaviour log-probs by the current policy's (no grad): RLEP's recomputed old log-probs."""
    if not rollouts:
        return
    policy.model.eval()
    with torch.no_grad():
        logprobs, _ = score(policy.model, [r.prompt_ids for r in rollouts], [r.completion_ids for r in rollouts],
                            temperature=policy.temperature, pad_id=policy.pad_id)
    for i, r in enumerate(rollouts):
        r.behaviour_logprobs = logprobs[i, : len(r.completion_ids)].detach().cpu()
        r.trainer_logprobs = None  # the old policy is now the trainer's own: no engine mismatch to correct


def train_step(
    policy: Policy, optimizer, batch: list[Rollout], cfg: TrialConfig, step: int, gate: Callable[[object, int], bool] | None = None
) -> tuple[ObjectiveOutput, float, bool]:
    """One optimizer step of the configured objective on `batch`; returns its output, the gradient norm and
    whether the step was applied (`gate`, called after backward, may drop it: its gradients are set to None,
    so the optimizer skips every parameter and its state is untouched)."""
    policy.model.train()
    cap = cfg.generation.mismatch_cap if cfg.generation.mismatch_correction == "importance_sampling" else None
    inp = objective_input(policy, batch, cap)
    out = OBJECTIVES[cfg.objective.name](inp, cfg.objective)
    out.stats = ratio_stats(inp)
    if not torch.isfinite(out.loss):
        raise TrialDiverged(f"loss is {out.loss.item()} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    if gate is not None and gate(policy.model, step):
        optimizer.zero_grad(set_to_none=True)
        return out, 0.0, False
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.grad_clip))
    if not math.isfinite(grad_norm):
        raise TrialDiverged(f"gradient norm is {grad_norm} at step {step}")
    optimizer.step()
    return out, grad_norm, True
