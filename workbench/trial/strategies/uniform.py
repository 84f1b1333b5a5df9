"""`uniform`: Arnal et al.'s FIFO buffer with uniform draws (docs/strategies/uniform.md)."""

from __future__ import annotations

import math

from workbench.config import TrialConfig
from workbench.trial.replay import FreshCredit, ReplayBuffer, Rollout
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy, uniform_draw


@register_strategy("uniform")
class Uniform(Strategy):
    """Arnal et al.: a FIFO buffer of capacity N; each step B rollouts drawn uniformly, kept for later batches.

    Fresh rollouts arrive at R = B / y per step through the fresh credit; the first batches borrow credit so the
    buffer holds B distinct rollouts (`replay.warmup: borrow`), or the buffer fills at B fresh rollouts per step
    before the rate drops to R (`fill`). With ratio 1 and capacity B the batch is exactly the fresh rollouts:
    on-policy GRPO.
    """

    fills = True
    streams = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        self.buffer = ReplayBuffer(cfg.replay.capacity, cfg.replay.horizon)
        self.credit = FreshCredit(cfg.fresh_per_step, self.G)

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        super().validate(cfg)
        h, y = cfg.replay.horizon, cfg.replay.ratio
        if h is not None and h + 1 < y and not cfg.replay.with_replacement:
            # H + 1 steps of fresh rollouts, (H + 1)·B/y of them, cannot hold a batch of B distinct rollouts
            raise ValueError(
                f"replay.horizon: {h} keeps {h + 1} step(s) of fresh rollouts, fewer than a batch at ratio {y:g};"
                f" needs horizon >= {math.ceil(y) - 1} (or replay.with_replacement)"
            )

    def groups(self, step: int) -> int:
        groups = self.credit.accrue()
        capacity = self.buffer.capacity
        if self.cfg.replay.warmup == "fill" and step < math.ceil(capacity / self.B):
            # filling: B fresh rollouts this step (at most what the buffer still lacks), on top of the credit, not
            # borrowed from later steps: the fill's extra generation is spent now and counted as compute
            want = math.ceil(min(self.B, max(capacity - self.size(), 0)) / self.G)
            return max(groups, want)
        short = self.B - self.size() - groups * self.G  # the first batches need B distinct rollouts in the buffer
        if short > 0 and not self.cfg.replay.with_replacement:
            extra = math.ceil(short / self.G)
            self.credit.borrow(extra)
            groups += extra
        return groups

    def batch(self, fresh, step, rng):
        self.buffer.add(fresh)
        self.buffer.evict(step)
        return uniform_draw(self.buffer.items, self.B, rng, self.cfg.replay.with_replacement)

    def stream_batch(self, arrived, step, rng):
        """Async: the arrivals join the buffer (FIFO, horizon by weight version); B drawn once the buffer holds a
        batch (with `replay.warmup: fill`, once it is full the first time)."""
        self.buffer.add(arrived)
        self.buffer.evict(step)
        need = 1 if self.cfg.replay.with_replacement else self.B
        if step == 0 and self.cfg.replay.warmup == "fill":
            need = max(need, self.buffer.capacity)
        if len(self.buffer) < need:
            return None
        return uniform_draw(self.buffer.items, self.B, rng, self.cfg.replay.with_replacement)

    def size(self) -> int:
        return len(self.buffer)

    def held(self) -> list[Rollout]:
        return list(self.buffer.items)
