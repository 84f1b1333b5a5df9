"""`uniform`: Arnal et al.'s FIFO buffer with uniform draws (docs/strategies/uniform.md)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from pydantic import Field

from workbench.config import Section, TrialConfig
from workbench.trial.replay import FreshCredit, ReplayBuffer, Rollout
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy, uniform_draw


class UniformParams(Section):
    """`uniform`'s buffer policies (docs/strategies/uniform.md, "Buffer policies"). The defaults draw as Arnal et al.:
    B rollouts uniformly from the buffer, no use limit."""

    max_uses: int | None = Field(None, ge=1)
    """Retire a rollout once it has been trained in this many steps (Marin's `max_samples`; its production configs
    set 1). Retired rollouts leave the buffer trained, not discarded; while the buffer holds fewer than a batch of
    usable rollouts, more groups are generated (counted). `null`: no limit."""
    min_ess: float | None = Field(None, gt=0, le=1)
    """Retire a rollout once the normalised effective sample size of its tokens' importance weights, measured in the
    last step that trained it, fell below this (`Rollout.ess`; VCPO's collapse predictor, per rollout): reuse that
    lasts while the policy has not moved away from the rollout, instead of a fixed count. Retired and refilled as
    `max_uses`'s (`replay/retired_ess` counts them). `null`: no such limit."""
    recency_alpha: float = Field(0.0, ge=0)
    """Draw weights ∝ rank^alpha, rank 1 the oldest rollout in the buffer and n the newest (Marin's recency bias,
    `alpha` 3 in its configs). 0: uniform."""
    use_decay: float | None = Field(None, ge=0)
    """Trinity-RFT's `linear_decay` priority: the batch is the B rollouts of highest priority birth_step - use_decay x
    uses (+ N(0, `priority_noise`²)), ties broken at random; a rollout drawn often gives way to newer ones.
    `null`: the random draw above."""
    priority_noise: float = Field(0.0, ge=0)
    """`use_decay`: the standard deviation of the noise added to each priority at each draw (Trinity-RFT's
    `decay_limit_randomization`)."""


@register_strategy("uniform")
class Uniform(Strategy):
    """Arnal et al.: a FIFO buffer of capacity N; each step B rollouts drawn uniformly, kept for later batches.

    Fresh rollouts arrive at R = B / y per step through the fresh credit; the first batches borrow credit so the
    buffer holds B distinct rollouts (`replay.warmup: borrow`), or the buffer fills at B fresh rollouts per step
    before the rate drops to R (`fill`). With ratio 1 and capacity B the batch is exactly the fresh rollouts:
    on-policy GRPO.
    """

    Params = UniformParams
    fills = True
    streams = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        self.policy: UniformParams = cfg.replay.section("uniform")  # also for its subclass positive_bias
        self.buffer = ReplayBuffer(cfg.replay.capacity, cfg.replay.horizon)
        self.credit = FreshCredit(cfg.fresh_per_step, self.G)
        self.retired = self.retired_ess = 0

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
        p = cfg.replay.section("uniform")
        if p.max_uses is not None and p.max_uses < y:
            raise ValueError(
                f"replay.uniform.max_uses: {p.max_uses} uses at most, fewer than ratio {y:g} (the mean uses a rollout"
                " gets); needs max_uses >= ratio"
            )
        if p.use_decay is not None and p.recency_alpha:
            raise ValueError("replay.uniform.recency_alpha: a weighted draw, not with use_decay's priority order")
        if p.use_decay is not None and cfg.replay.with_replacement:
            raise ValueError("replay.uniform.use_decay: a priority order draws distinct rollouts, not with_replacement")

    def groups(self, step: int) -> int:
        self._retire()
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
        self._retire()
        return self._draw(rng)

    def stream_batch(self, arrived, step, rng):
        """Async: the arrivals join the buffer (FIFO, horizon by weight version); B drawn once the buffer holds a
        batch (with `replay.warmup: fill`, once it is full the first time)."""
        self.buffer.add(arrived)
        self.buffer.evict(step)
        self._retire()
        need = 1 if self.cfg.replay.with_replacement else self.B
        if step == 0 and self.cfg.replay.warmup == "fill":
            need = max(need, self.buffer.capacity)
        if len(self.buffer) < need:
            return None
        return self._draw(rng)

    def _retire(self) -> None:
        """`max_uses`: rollouts trained that many times leave the buffer; `min_ess`: so do those whose importance
        weights spread past it the last time they were trained."""
        cap, floor = self.policy.max_uses, self.policy.min_ess
        if cap is None and floor is None:
            return
        kept = []
        for r in self.buffer.items:
            if floor is not None and r.uses and r.ess < floor:
                self.retired_ess += 1
            elif cap is not None and r.uses >= cap:
                self.retired += 1
            else:
                kept.append(r)
        self.buffer.items = deque(kept)
        self._metrics = {"replay/retired": self.retired + self.retired_ess, "replay/retired_ess": self.retired_ess}

    def _draw(self, rng: np.random.Generator) -> list[Rollout]:
        items, B, p = self.buffer.items, self.B, self.policy
        if p.use_decay is not None:
            return priority_draw(items, B, rng, p.use_decay, p.priority_noise)
        if p.recency_alpha:
            return recency_draw(items, B, rng, p.recency_alpha, self.cfg.replay.with_replacement)
        return uniform_draw(items, B, rng, self.cfg.replay.with_replacement)

    def size(self) -> int:
        return len(self.buffer)

    def held(self) -> list[Rollout]:
        return list(self.buffer.items)


def recency_draw(items, batch_size: int, rng: np.random.Generator, alpha: float, with_replacement: bool = False):
    """B rollouts drawn with weights ∝ rank^alpha (rank 1: the oldest of `items`, in buffer order), distinct unless
    `with_replacement`; returned in buffer order."""
    n = len(items)
    if n < batch_size and not with_replacement:
        raise RuntimeError(f"buffer holds {n} rollouts, fewer than batch_size {batch_size}")
    weights = np.arange(1, n + 1, dtype=np.float64) ** alpha
    idx = rng.choice(n, size=batch_size, replace=with_replacement, p=weights / weights.sum())
    return [items[i] for i in np.sort(idx)]


def priority_draw(items, batch_size: int, rng: np.random.Generator, decay: float, noise: float = 0.0):
    """The B rollouts of highest priority birth_step - decay x uses (+ N(0, noise²)), ties broken at random;
    returned in buffer order."""
    n = len(items)
    if n < batch_size:
        raise RuntimeError(f"buffer holds {n} rollouts, fewer than batch_size {batch_size}")
    priority = np.array([r.birth_step - decay * r.uses for r in items], dtype=np.float64)
    if noise:
        priority += rng.normal(0.0, noise, size=n)
    order = np.lexsort((rng.random(n), -priority))  # by priority, descending; a random key breaks ties
    return [items[i] for i in np.sort(order[:batch_size])]
