"""One optimizer step: score the batch under the current policy, the configured objective, backward, step.

`objective_input` lines up what was frozen at generation (behaviour log-probs, advantages, rewards) with the
current log-probs; the vLLM mismatch correction (`generation.mismatch_correction: importance_sampling`) weights
tokens there. `rescore` is RLEP's recomputation of old log-probs by the current policy.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from workbench import progress
from workbench.backends.scoring import score
from workbench.config import TrialConfig
from workbench.registry import OBJECTIVES
from workbench.trial.diagnostics import GradientCosine
from workbench.trial.objectives import ObjectiveInput, ObjectiveOutput, aggregation, ratio_stats, rollout_ess
from workbench.trial.policy import Policy, autocast_on
from workbench.trial.replay import Rollout


def make_optimizer(model, lr: float) -> torch.optim.Optimizer:
    """The trainer's Adam: the fused kernel (one pass over each parameter, ~5x faster than the per-tensor loop on
    the embedded model's 20 tensors) where the parameters' device and dtype have one, else the default."""
    params = list(model.parameters())
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def make_lr_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int):
    """`lr_warmup_steps`: the learning rate rises linearly to its value over the first steps, then holds (step k
    uses (k + 1) / (warmup + 1) of it)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / (warmup_steps + 1)))


class TrialDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite."""


def _frozen(like: torch.Tensor, rows: list[torch.Tensor]) -> torch.Tensor:
    """Per-rollout token tensors laid out like `like` ([n, T], zero-padded)."""
    out = torch.zeros_like(like)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row.to(out.device)
    return out


def objective_input(
    policy: Policy, batch: list[Rollout], correction_cap: float | None = None, prox: list[torch.Tensor] | None = None
) -> ObjectiveInput:
    """Score the batch under the current policy (with grad) and line up its frozen generation-time data (and the
    proximal policy's log-probs, `prox`, when the batch is trained in several minibatch steps)."""
    logprobs, mask = score(
        policy.model,
        [r.prompt_ids for r in batch],
        [r.completion_ids for r in batch],
        temperature=policy.temperature,
        pad_id=policy.pad_id,
        compiled=policy.compile_training,
    )
    behaviour = _frozen(logprobs, [r.behaviour_logprobs for r in batch])
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
        prox_logprobs=None if prox is None else _frozen(logprobs, prox),
        logprobs=logprobs,
        mask=mask,
        behaviour_logprobs=behaviour,
        advantages=as_tensor([r.advantage for r in batch]),
        rewards=as_tensor([r.reward for r in batch]),
        group_mean_rewards=as_tensor([r.group_mean_reward for r in batch]),
        group_rewards=[r.group_rewards or (r.reward,) for r in batch],
    )


def _score_frozen(policy: Policy, rollouts: list[Rollout], micro_batch_size: int | None = None) -> list[torch.Tensor]:
    """Per-rollout completion log-probs under the current parameters (no grad), `micro_batch_size` at a time."""
    policy.model.eval()
    out = []
    with torch.no_grad(), policy.precision():
        for piece in chunks(rollouts, micro_batch_size):
            logprobs, _ = score(
                policy.model,
                [r.prompt_ids for r in piece],
                [r.completion_ids for r in piece],
                temperature=policy.temperature,
                pad_id=policy.pad_id,
                scoring_mib=policy.scoring_mib,
            )
            out += [logprobs[i, : len(r.completion_ids)].detach().cpu() for i, r in enumerate(piece)]
    return out


def rescore(policy: Policy, rollouts: list[Rollout], micro_batch_size: int | None = None) -> None:
    """Replace the rollouts' behaviour log-probs by the current policy's (no grad): RLEP's recomputed old log-probs."""
    if not rollouts:
        return
    for r, logprobs in zip(rollouts, _score_frozen(policy, rollouts, micro_batch_size)):
        r.behaviour_logprobs = logprobs
        r.trainer_logprobs = None  # the old policy is now the trainer's own: no engine mismatch to correct


def minibatches(batch: list[Rollout], n: int) -> list[list[Rollout]]:
    """The batch split into `n` consecutive minibatches of near-equal size (fewer if the batch is smaller)."""
    n = max(1, min(n, len(batch)))
    size, extra = divmod(len(batch), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(batch[start:end])
        start = end
    return out


def chunks(rollouts: list[Rollout], size: int | None) -> list[list[Rollout]]:
    """Consecutive pieces of at most `size` rollouts (`None`: all at once)."""
    if not size or size >= len(rollouts):
        return [rollouts]
    return [rollouts[i : i + size] for i in range(0, len(rollouts), size)]


def autocast(policy: Policy, setting: str):
    """The trainer's precision context (`train.autocast`)."""
    return torch.autocast(
        device_type=policy.device.type, dtype=torch.bfloat16, enabled=autocast_on(policy.device, policy.model, setting)
    )


def micro_shares(pieces: list[list[Rollout]], mean: str) -> list[float]:
    """Each micro-batch's weight in the step's loss: its share of the step's completion tokens (a token-mean
    objective) or of its rollouts (`mean` `rollouts`), so the accumulated gradient is the one-pass gradient."""
    sizes = [sum(len(r.completion_ids) for r in p) if mean == "tokens" else len(p) for p in pieces]
    return [s / max(sum(sizes), 1) for s in sizes]


def _accumulate(outs: list[ObjectiveOutput], shares: list[float]) -> ObjectiveOutput:
    """One optimizer step's diagnostics from its micro-batches: the loss is the sum of the weighted losses (the
    one-pass token mean), the rest token-weighted means (ratio extremes: their extremes)."""
    if len(outs) == 1:
        return outs[0]
    stats: dict[str, float] = {}
    for key in outs[0].stats or {}:
        values = [o.stats[key] for o in outs]
        stats[key] = (
            max(values)
            if key == "ratio_max"
            else min(values)
            if key == "ratio_min"
            else sum(v * w for v, w in zip(values, shares))
        )
    loss = sum(o.loss.detach() * w for o, w in zip(outs, shares))
    return ObjectiveOutput(
        loss,
        sum(o.ratio_mean * w for o, w in zip(outs, shares)),
        sum(o.clip_frac * w for o, w in zip(outs, shares)),
        stats,
    )


def _merge(outs: list[ObjectiveOutput]) -> ObjectiveOutput:
    """One batch's diagnostics from its minibatch steps: means, and the extremes of the ratio extremes."""
    if len(outs) == 1:
        return outs[0]
    stats: dict[str, float] = {}
    for key in outs[0].stats or {}:
        values = [o.stats[key] for o in outs]
        stats[key] = (
            max(values) if key == "ratio_max" else min(values) if key == "ratio_min" else sum(values) / len(values)
        )
    loss = torch.stack([o.loss.detach() for o in outs]).mean()
    return ObjectiveOutput(
        loss, sum(o.ratio_mean for o in outs) / len(outs), sum(o.clip_frac for o in outs) / len(outs), stats
    )


def train_step(
    policy: Policy,
    optimizer,
    batch: list[Rollout],
    cfg: TrialConfig,
    step: int,
    gate: Callable[[object, int], bool] | None = None,
    cosine: GradientCosine | None = None,
) -> tuple[ObjectiveOutput, float, bool]:
    """The configured objective on `batch`: one optimizer step per minibatch (`objective.minibatches`, default 1).
    Returns the batch's merged diagnostics, the mean gradient norm and whether any step was applied (`gate`,
    called after each backward, may drop a step: its gradients are set to None, so the optimizer skips every
    parameter and its state is untouched). With several minibatches, the log-probs before the first step (the
    proximal policy of `decoupled_ppo`) are computed once, with one extra forward pass over the batch. `cosine`
    (where `train.grad_cosine`) reads each applied step's gradient against the previous one: `grad_cosine` in the
    diagnostics, their mean over the batch's steps."""
    cap = cfg.generation.mismatch_cap if cfg.generation.mismatch_correction == "importance_sampling" else None
    parts = minibatches(batch, cfg.objective.minibatches)
    micro = cfg.train.micro_batch_size
    objective = OBJECTIVES[cfg.objective.name]
    prox = _score_frozen(policy, batch, micro) if len(parts) > 1 else None
    outs, norms, cosines, applied, offset = [], [], [], False, 0
    progress.ACTIVITY.begin(f"step {step}: training", "micro-batches", sum(len(chunks(p, micro)) for p in parts))
    for part in parts:
        policy.model.train()
        optimizer.zero_grad(set_to_none=True)
        pieces = chunks(part, micro)
        shares = micro_shares(pieces, aggregation(objective)) if len(pieces) > 1 else [1.0]
        done = []
        for piece, share in zip(pieces, shares):
            with autocast(policy, cfg.train.autocast):
                inp = objective_input(policy, piece, cap, None if prox is None else prox[offset : offset + len(piece)])
                out = objective(inp, cfg.objective)
            offset += len(piece)
            out.stats = {**ratio_stats(inp), **(out.stats or {})}
            for r, ess in zip(piece, rollout_ess(inp).tolist()):
                r.ess = ess  # read by `replay.uniform.min_ess` at the next draw
            if not torch.isfinite(out.loss):
                raise TrialDiverged(f"loss is {out.loss.item()} at step {step}")
            done.append(out)
            (out.loss * share if len(pieces) > 1 else out.loss).backward()
            progress.ACTIVITY.advance()
        outs.append(_accumulate(done, shares))
        if gate is not None and gate(policy.model, step):
            optimizer.zero_grad(set_to_none=True)
            continue
        if cosine is not None and (value := cosine(policy.model)) is not None:
            cosines.append(value)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.grad_clip, foreach=True))
        if not math.isfinite(grad_norm):
            raise TrialDiverged(f"gradient norm is {grad_norm} at step {step}")
        optimizer.step()
        norms.append(grad_norm)
        applied = True
    merged = _merge(outs)
    if cosines:
        merged.stats = {**(merged.stats or {}), "grad_cosine": sum(cosines) / len(cosines)}
    return merged, (sum(norms) / len(norms) if norms else 0.0), applied
