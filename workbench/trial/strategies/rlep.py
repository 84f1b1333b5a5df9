"""`rlep`: RLEP's replay of verified successes from a seed policy's pool (Zhang et al.; docs/strategies/rlep.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from workbench.compute import units
from workbench.config import ConfigError, Section, TrialConfig
from workbench.trial.replay import FreshCredit, Rollout, group_advantages
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy

log = logging.getLogger(__name__)


class RlepParams(Section):
    """`rlep`: replay of verified successes from a seed policy's pool (Zhang et al.; docs/strategies/rlep.md)."""

    m: int = Field(2, ge=1)
    """M: pooled successes mixed into each prompt's group (G' = G + M)."""
    pool: str | None = None
    """JSONL pool (`{"prompt": ..., "completions": [...]}` per line); `null`: built once from the warm start."""
    n_prompts: int = Field(2048, ge=1)
    """The pool is collected on, and rlep trains on, the first n_prompts train prompts."""
    seed_rl_steps: int = Field(60, ge=0)
    """Phase 0: on-policy RL steps from the warm start that make the seed policy of the built pool."""
    samples: int = Field(8, ge=1)
    """Samples per prompt when collecting (RLEP: 64)."""
    temperature: float = Field(0.7, gt=0)
    """Sampling temperature when collecting (RLEP: 0.7)."""
    min_correct: int = Field(2, ge=1)
    """A prompt enters the pool with at least this many correct samples (RLEP: 2 correct paths)."""
    max_per_prompt: int = Field(8, ge=1)
    """Successes kept per prompt."""
    distinct: bool = False
    """Keep only distinct completion strings (on the arithmetic task every correct completion is the same string)."""


@register_strategy("rlep")
class Rlep(Strategy):
    """RLEP (docs/strategies/rlep.md): each prompt's fresh group of G is mixed with M verified successes from a pool
    collected by a seed policy; advantages over the mixed group, old log-probs recomputed by the current policy.

    The pool is a JSONL file (`replay.rlep.pool`) or, when null, built once from the embedded warm start after a
    short RL run and cached (`workbench rlep-pool` builds one explicitly). A prompt with fewer than M pooled
    successes gets the ones it has (none: a plain group of G), never empty padding (a quirk of RLEP's code).
    Training prompts are the first `replay.rlep.n_prompts` of the train split, the ones the pool was collected on.
    """

    Params = RlepParams
    fresh_anchored = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext):
        super().__init__(cfg, ctx)
        self.r = self.params(cfg)
        if self.r.pool:
            path = self.r.pool
        else:
            # Deferred: building a pool runs a seed policy (transformers); registering strategies must stay light.
            from workbench.trial.strategies.rlep_pool import ensure_pool

            path = ensure_pool(cfg, ctx.task)
        self.pool = load_pool(path, ctx.task, ctx.tokenizer, ctx.max_new_tokens)
        log.info(f"rlep: pool {path}: {sum(len(v) for v in self.pool.values())} successes for {len(self.pool)} prompts")
        self.credit = FreshCredit(cfg.batch_size, self.G)
        self.next_uid = -1
        # What phases 0-1 cost when the pool is built here (RLEP's step counts leave it out): the seed run's
        # on-policy steps plus the sampled rollouts, in compute units at this trial's mu (1 when measured).
        mu = cfg.compute.mu or 1.0
        n = min(self.r.n_prompts, len(ctx.task.train))
        self.pool_units = (
            0.0 if self.r.pool else self.r.seed_rl_steps + units(0, n * self.r.samples, cfg.batch_size, mu)
        )

    def prompts(self, n_train: int) -> list[int]:
        return list(range(min(self.r.n_prompts, n_train)))

    def groups(self, step: int) -> int:
        return self.credit.accrue()

    def batch(self, fresh, step, rng):
        out: list[Rollout] = []
        replayed = 0
        groups: dict[int, list[Rollout]] = {}
        for r in fresh:
            groups.setdefault(r.group, []).append(r)
        for members in groups.values():
            first = members[0]
            cands = self.pool.get(first.prompt_index, [])
            m = min(self.r.m, len(cands))
            example = self.ctx.task.train[first.prompt_index]
            for j in np.sort(rng.choice(len(cands), size=m, replace=False)) if m else []:
                ids = cands[int(j)]
                text = self.ctx.tokenizer.decode(ids, skip_special_tokens=True)
                members.append(
                    Rollout(
                        uid=self.next_uid,
                        prompt_index=first.prompt_index,
                        group=first.group,
                        prompt_ids=first.prompt_ids,
                        completion_ids=list(ids),
                        behaviour_logprobs=torch.zeros(len(ids)),
                        reward=self.ctx.task.reward(text, example, True),
                        advantage=0.0,
                        group_mean_reward=0.0,
                        birth_step=step,
                        source="pool",
                    )
                )
                self.next_uid -= 1
                replayed += 1
            advantages = group_advantages([r.reward for r in members])
            mean = float(np.mean([r.reward for r in members]))
            for r, a in zip(members, advantages):
                r.advantage, r.group_mean_reward = a, mean
                r.group_rewards = tuple(m.reward for m in members)
            out.extend(members)
        self.ctx.rescore(out)  # RLEP recomputes old_log_prob for the whole mixed group with the current actor
        self._metrics = {
            "rlep/replayed": replayed,
            "rlep/group_size_mean": len(out) / max(len(groups), 1),
            "rlep/pool_units": self.pool_units,
        }
        return out


def load_pool(path: str | Path, task, tokenizer, max_new_tokens: int) -> dict[int, list[list[int]]]:
    """Pool file -> {train prompt index: [completion token ids (EOS appended)]}; errors name file:line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"replay.rlep.pool: no such file {p}")
    index = {e.prompt: i for i, e in enumerate(task.train)}
    pool: dict[int, list[list[int]]] = {}
    for n, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{p}:{n}: invalid JSON ({err.msg})") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("prompt"), str)
            or not isinstance(row.get("completions"), list)
            or not all(isinstance(c, str) for c in row["completions"])
        ):
            raise ConfigError(f'{p}:{n}: expected {{"prompt": str, "completions": [str, ...]}}')
        i = index.get(row["prompt"])
        if i is None:
            continue  # a prompt outside this task's train split: not used
        seqs = []
        for c in row["completions"]:
            ids = list(tokenizer(c, add_special_tokens=False)["input_ids"])[: max_new_tokens - 1] + [
                tokenizer.eos_token_id
            ]
            seqs.append(ids)
        pool.setdefault(i, []).extend(seqs)
    return pool
