"""Fresh rollouts: the trial's prompt stream and the generation of whole GRPO groups.

Rewards, group advantages and behaviour log-probs are computed once here, at generation, and frozen (Arnal §1.6,
Yoo §2.3); rollouts are born at the optimizer step of the weights that sampled them.
"""

from __future__ import annotations

import numpy as np
import torch

from workbench import seeds
from workbench.backends.hf import Samples
from workbench.backends.scoring import score
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout, group_advantages
from workbench.trial.tasks import Task


class PromptStream:
    """Train prompts in a seeded order, reshuffled every epoch: deterministic for the trial seed.

    `subset` restricts the stream to those train indices (a strategy's own prompt set, e.g. rlep's pool); `stream`
    numbers independent streams of one seed (an asynchronous trial's generators; stream 0 is the synchronous one)."""

    def __init__(self, n: int, seed: int, subset: list[int] | None = None, stream: int = 0):
        self.subset = np.asarray(subset if subset is not None else range(n))
        rng = np.random.default_rng(seeds.prompt_order(seed, stream))
        self.n, self.rng, self.order, self.pos = len(self.subset), rng, np.arange(0), 0

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos >= len(self.order):
                self.order, self.pos = self.rng.permutation(self.n), 0
            take = min(k - len(out), len(self.order) - self.pos)
            out.extend(int(self.subset[i]) for i in self.order[self.pos : self.pos + take])
            self.pos += take
        return out


def generate_groups(
    policy: Policy,
    task: Task,
    prompt_indices: list[int],
    group_size: int,
    step: int,
    generator: torch.Generator,
    first_uid: int,
) -> tuple[list[Rollout], Samples]:
    """Sample `group_size` completions per prompt; rewards, group advantages and behaviour log-probs are frozen here."""
    examples = [task.train[i] for i in prompt_indices]
    prompt_ids = [p for p in policy.encode([e.prompt for e in examples]) for _ in range(group_size)]
    policy.model.eval()
    with policy.precision():
        out, step, trainer_logprobs = _sample(policy, prompt_ids, step, generator)
    rollouts = []
    for g, (idx, ex) in enumerate(zip(prompt_indices, examples)):
        rows = range(g * group_size, (g + 1) * group_size)
        rewards = [task.reward(out.texts[i], ex, out.finished[i]) for i in rows]
        advantages = group_advantages(rewards)
        mean_reward = float(np.mean(rewards))
        for j, i in enumerate(rows):
            rollouts.append(
                Rollout(
                    uid=first_uid + i,
                    prompt_index=idx,
                    group=first_uid // group_size + g,
                    prompt_ids=out.prompt_ids[i],
                    completion_ids=out.completion_ids[i],
                    behaviour_logprobs=out.logprobs[i],
                    reward=rewards[j],
                    advantage=advantages[j],
                    group_mean_reward=mean_reward,
                    birth_step=step,
                    group_rewards=tuple(rewards),
                    trainer_logprobs=None if trainer_logprobs is None else trainer_logprobs[i],
                )
            )
    return rollouts, out


def _sample(policy: Policy, prompt_ids: list[list[int]], step: int, generator: torch.Generator):
    """The batch's samples, their birth step and, beside an engine, the trainer's log-probs of them."""
    if policy.engine is None:
        out = policy.sample(
            policy.tokenizer,
            prompt_ids,
            max_new_tokens=policy.max_new_tokens,
            temperature=policy.temperature,
            generator=generator,
        )
        return out, step, None
    # Rollouts of a lagging engine are as old as its weights: age them from the engine's weight version.
    out = policy.engine.sample(
        policy.tokenizer,
        prompt_ids,
        max_new_tokens=policy.max_new_tokens,
        temperature=policy.temperature,
        generator=generator,
    )
    with torch.no_grad():  # the trainer's view of the same tokens: mismatch metrics, entropy, TIS correction
        lp, _, entropy = score(
            policy.model,
            out.prompt_ids,
            out.completion_ids,
            temperature=policy.temperature,
            pad_id=policy.pad_id,
            with_entropy=True,
            scoring_mib=policy.scoring_mib,
        )
    out.entropy_sum = entropy
    return out, policy.engine.version, [lp[i, : len(c)].float().cpu() for i, c in enumerate(out.completion_ids)]
