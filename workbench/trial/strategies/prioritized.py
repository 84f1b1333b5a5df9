"""`prioritized`: Yoo et al.'s rollout-level replay, fresh-anchored with advantage priority
(docs/strategies/prioritized.md)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from workbench.config import Section, TrialConfig
from workbench.trial.replay import FreshCredit, ReplayBuffer, Rollout
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy


class PrioritizedParams(Section):
    """`prioritized`: advantage-prioritized replay with age eviction (Yoo et al.; the defaults of a reimplementation of
    the paper: docs/strategies/prioritized.md)."""

    replay_fraction: float = Field(0.5, ge=0)
    """r: replayed rollouts per step = round(r · surviving fresh rollouts); uses per rollout y ≈ 1 + r."""
    alpha: float = Field(0.5, ge=0)
    """Priority exponent: P(i) ∝ (|A_i| + eps)^alpha (0 = uniform)."""
    eps: float = Field(1e-6, gt=0)
    """Added to |A| so that a rollout of zero advantage keeps a small chance of being drawn."""
    tau_max: int = Field(10, ge=0)
    """Rollouts older than tau_max optimizer steps are evicted (min with replay.horizon when that is set)."""
    warmup_steps: int = Field(20, ge=0)
    """No replay draw during the first steps, while the buffer fills."""
    drop_zero_variance: bool = True
    """Drop groups whose rewards are all equal before training and storing."""


def drop_zero_variance(rollouts: list[Rollout]) -> list[Rollout]:
    """Remove whole groups whose rewards are all equal (their advantages are all zero)."""
    by_group: dict[int, list[Rollout]] = {}
    for r in rollouts:
        by_group.setdefault(r.group, []).append(r)
    keep = {g for g, rs in by_group.items() if len({r.reward for r in rs}) > 1}
    return [r for r in rollouts if r.group in keep]


@register_strategy("prioritized")
class Prioritized(Strategy):
    """Yoo et al. (docs/strategies/prioritized.md): rollout-level storage with age eviction, fresh-anchored batches.

    Each step: B fresh rollouts; zero-variance groups dropped; the buffer evicts every rollout older than
    `tau_max` steps; the batch is the surviving fresh rollouts plus round(replay_fraction · survivors) rollouts
    drawn without replacement with probability ∝ (|A| + eps)^alpha (none during the first `warmup_steps`);
    the survivors then join the buffer, advantages and behaviour log-probs frozen at birth.
    """

    Params = PrioritizedParams
    fresh_anchored = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        self.p = self.params(cfg)
        horizon = self.p.tau_max if cfg.replay.horizon is None else min(self.p.tau_max, cfg.replay.horizon)
        self.buffer = ReplayBuffer(cfg.replay.capacity, horizon)
        self.credit = FreshCredit(cfg.batch_size, self.G)

    @classmethod
    def default_capacity(cls, cfg: TrialConfig) -> int:
        # A FIFO backstop that "rarely binds" (Yoo et al.): room for every survivor younger than tau_max.
        return cfg.batch_size * (cls.params(cfg).tau_max + 2)

    def groups(self, step: int) -> int:
        return self.credit.accrue()

    def batch(self, fresh, step, rng):
        survivors = drop_zero_variance(fresh) if self.p.drop_zero_variance else list(fresh)
        self.buffer.evict(step)
        replay: list[Rollout] = []
        n = len(self.buffer)
        if step >= self.p.warmup_steps and n:
            k = min(int(round(self.p.replay_fraction * len(survivors))), n)
            if k:
                pri = (np.abs([r.advantage for r in self.buffer.items]) + self.p.eps) ** self.p.alpha
                idx = rng.choice(n, size=k, replace=False, p=pri / pri.sum())
                replay = [self.buffer.items[i] for i in np.sort(idx)]
        self.buffer.add(survivors)
        self._metrics = {
            "replay/fresh_survivors": len(survivors),
            "replay/replayed": len(replay),
            "replay/dropped_zero_variance": len(fresh) - len(survivors),
        }
        return survivors + replay

    def size(self) -> int:
        return len(self.buffer)
