"""`dgg`: dynamic gradient gating of repeated passes over a fresh batch (Miao et al.; docs/strategies/dgg.md)."""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import numpy as np
from pydantic import Field

from workbench.config import Section, TrialConfig
from workbench.trial.replay import FreshCredit, Rollout
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy


class DggParams(Section):
    """`dgg`: dynamic gradient gating (Miao et al.; docs/strategies/dgg.md)."""

    max_reuse: int = Field(4, ge=1)
    """K: optimizer passes per fresh batch at most."""
    tau: float = Field(0.5, gt=0)
    """Gate when the z-score exceeds tau (the paper's range 0.1-1.0, recommended 0.1-0.5)."""
    window: int = Field(20, ge=2)
    """Running window of ungated passes for the mean and standard deviation."""
    signal: Literal["energy", "increment", "either"] = "either"
    """Z-score of the lm_head gradient energy, of its step-wise increment, or the larger of the two."""


@register_strategy("dgg")
class Dgg(Strategy):
    """Dynamic gradient gating (docs/strategies/dgg.md): each fresh batch reused for up to K optimizer passes; a pass
    is gated (its gradients zeroed before the optimizer step, and reuse of the batch stopped) when a running
    z-score of the lm_head gradient energy g = ||grad W_lm_head||² (or of its increment) exceeds tau.

    The first pass of a batch is never gated, nor any pass before the window of `window` ungated passes is full.
    Gated values do not enter the window. "Zeroed before the optimizer step" is done by setting the gradients to
    None, which makes torch's Adam skip the step entirely, so its moments are not touched.
    """

    Params = DggParams
    fresh_anchored = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        self.d = self.params(cfg)
        self.credit = FreshCredit(cfg.batch_size, self.G)
        self.current: list[Rollout] = []
        self.passes, self.done = 0, True
        self.energies: deque[float] = deque(maxlen=self.d.window)
        self.increments: deque[float] = deque(maxlen=self.d.window)
        self.prev: float | None = None
        self.gated_total = 0

    def groups(self, step: int) -> int:
        if not self.done:
            return 0
        groups = 0
        while groups * self.G < self.B:  # one whole fresh batch (whole groups) per reuse cycle
            groups += self.credit.accrue()
        return groups

    def batch(self, fresh, step, rng):
        if fresh:
            self.current, self.passes, self.done = list(fresh), 0, False
        self.passes += 1
        return self.current

    @staticmethod
    def _z(value: float | None, window) -> float:
        if value is None or len(window) < 2:
            return 0.0
        mean, std = float(np.mean(window)), float(np.std(window))
        return (value - mean) / std if std > 0 else (0.0 if value == mean else math.copysign(math.inf, value - mean))

    def gate(self, model, step: int) -> bool:
        weight = model.get_output_embeddings().weight
        energy = float((weight.grad.detach().double() ** 2).sum()) if weight.grad is not None else 0.0
        increment = None if self.prev is None else energy - self.prev
        z_energy, z_increment = self._z(energy, self.energies), self._z(increment, self.increments)
        armed = self.passes > 1 and len(self.energies) >= self.d.window
        signal = {"energy": z_energy, "increment": z_increment, "either": max(z_energy, z_increment)}[self.d.signal]
        gated = armed and signal > self.d.tau
        if not gated:
            self.energies.append(energy)
            if increment is not None:
                self.increments.append(increment)
            self.prev = energy
        if gated or self.passes >= self.d.max_reuse:
            self.done = True
        self.gated_total += int(gated)
        self._metrics = {
            "dgg/energy": energy,
            "dgg/z_energy": z_energy,
            "dgg/z_increment": z_increment,
            "dgg/pass": self.passes,
            "dgg/gated": float(gated),
            "dgg/gated_total": self.gated_total,
        }
        return gated
