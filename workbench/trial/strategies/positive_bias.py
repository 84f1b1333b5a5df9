"""`positive_bias`: Arnal et al. §5.5, a buffer that keeps the freshest successes
(docs/strategies/positive_bias.md)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from pydantic import Field

from workbench.config import Section, TrialConfig
from workbench.trial.replay import ReplayBuffer, Rollout
from workbench.trial.strategies.base import StrategyContext, is_correct, register_strategy, uniform_draw
from workbench.trial.strategies.uniform import Uniform


class PositiveBiasParams(Section):
    """`positive_bias`: a buffer that keeps the freshest successes (Arnal et al. §5.5;
    docs/strategies/positive_bias.md)."""

    delta: float = Field(0.2, ge=0, lt=1)
    """Share of the buffer (and of each batch) reserved for the freshest correct rollouts."""
    stratified: bool = True
    """Draw round(delta · B) of each batch from the correct rollouts (false: one plain uniform draw)."""


def positives_share(delta: float, capacity: int) -> int:
    """Rollouts of the buffer reserved for successes: round(delta · N)."""
    return int(round(delta * capacity))


@register_strategy("positive_bias")
class PositiveBias(Uniform):
    """Arnal et al. §5.5: the freshest (1 - delta)·N rollouts plus the freshest
    delta·N correct rollouts not among them; batches drawn uniformly from that set.

    `stratified` (default): round(delta·B) of the batch is drawn from the set's correct rollouts and the rest
    uniformly from the others, so every batch holds at least a delta share of successes when the set has them
    (the paper's plain uniform draw gives that share only on average; `stratified: false` is the plain draw).
    """

    Params = PositiveBiasParams

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        pb = self.params(cfg)
        self.n_pos = positives_share(pb.delta, cfg.replay.capacity)
        self.buffer = ReplayBuffer(cfg.replay.capacity - self.n_pos, cfg.replay.horizon)
        self.positives: deque[Rollout] = deque()
        self.delta, self.stratified = pb.delta, pb.stratified

    @classmethod
    def default_capacity(cls, cfg: TrialConfig) -> int:
        # The smallest buffer whose fresh part (1 - delta)·N holds a whole batch: the default trial runs as is.
        delta = cls.params(cfg).delta
        capacity = max(cfg.batch_size, math.ceil(cfg.batch_size / (1 - delta)))
        while capacity - positives_share(delta, capacity) < cfg.batch_size:
            capacity += 1
        return capacity

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        super().validate(cfg)
        capacity = cfg.replay.capacity
        recent = capacity - positives_share(cls.params(cfg).delta, capacity)
        if recent < cfg.batch_size:
            raise ValueError(
                f"replay.positive_bias.delta: the fresh part (1 - delta)·capacity = {recent} must be >= batch_size ({cfg.batch_size})"
            )

    def batch(self, fresh, step, rng):
        self.buffer.add(fresh)
        for r in self.buffer.evict(step):
            if is_correct(r) and (self.buffer.horizon is None or r.age(step) <= self.buffer.horizon):
                self.positives.append(r)  # pushed out of the fresh part: kept if it was a success
        while len(self.positives) > self.n_pos:
            self.positives.popleft()
        while self.positives and self.buffer.horizon is not None and self.positives[0].age(step) > self.buffer.horizon:
            self.positives.popleft()
        pool = list(self.buffer.items) + list(self.positives)
        correct = [i for i, r in enumerate(pool) if is_correct(r)]
        if self.stratified:
            k = min(int(round(self.delta * self.B)), len(correct))
            take = set(rng.choice(correct, size=k, replace=False).tolist()) if k else set()
            rest = [i for i in range(len(pool)) if i not in take]
            take |= set(rng.choice(rest, size=self.B - k, replace=False).tolist())
            batch = [pool[i] for i in sorted(take)]
        else:
            batch = uniform_draw(pool, self.B, rng)
        self._metrics = {
            "replay/positives": len(self.positives),
            "replay/pool_correct": len(correct),
            "replay/batch_correct_share": float(np.mean([is_correct(r) for r in batch])),
        }
        return batch

    def size(self) -> int:
        return len(self.buffer) + len(self.positives)
