"""Compute accounting (design §4).

One compute unit is the cost of one on-policy update at the trial's batch size B: B forward-backward passes plus
B generations, i.e. B·(1 + mu) in units of one rollout's forward-backward. A step that trains on B rollouts and
generates R_step fresh ones therefore costs (B + mu·R_step) / (B + mu·B) units. mu is the cost of generating a
rollout over the cost of training on it: fixed by `compute.mu`, or measured from this trial's own phase timings.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field


def units_per_step(batch_size: int, fresh: int, mu: float) -> float:
    """Compute units of one synchronous step: (B + mu·R) / (B + mu·B)."""
    return (batch_size + mu * fresh) / (batch_size * (1.0 + mu))


@dataclass
class ComputeMeter:
    batch_size: int
    n_params: int
    fixed_mu: float | None = None
    units: float = 0.0
    gen_rollouts: int = 0
    train_rollouts: int = 0
    gen_tokens: int = 0
    """Completion tokens sampled."""
    prefill_tokens: int = 0
    """Prompt tokens processed while sampling."""
    train_tokens: int = 0
    """Tokens (prompt + completion) in forward-backward passes."""
    seconds: dict[str, float] = field(default_factory=lambda: {"gen": 0.0, "score": 0.0, "train": 0.0})

    @contextmanager
    def timed(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    @property
    def measured_mu(self) -> float | None:
        """(generation + scoring seconds per generated rollout) / (training seconds per trained rollout)."""
        if not self.gen_rollouts or not self.train_rollouts or self.seconds["train"] <= 0:
            return None
        gen = (self.seconds["gen"] + self.seconds["score"]) / self.gen_rollouts
        return gen / (self.seconds["train"] / self.train_rollouts)

    @property
    def mu(self) -> float:
        """The mu used for accounting: fixed, else measured so far (1.0 before anything was measured)."""
        if self.fixed_mu is not None:
            return self.fixed_mu
        return self.measured_mu or 1.0

    def step(self, fresh: int, trained: int) -> float:
        """Account one optimizer step (after its phases were timed); returns the cumulative units."""
        self.gen_rollouts += fresh
        self.train_rollouts += trained
        self.units += (trained + self.mu * fresh) / (self.batch_size * (1.0 + self.mu))
        return self.units

    def units_at(self, mu: float) -> float:
        """Cumulative units re-accounted at another mu (from the rollout counts)."""
        return (self.train_rollouts + mu * self.gen_rollouts) / (self.batch_size * (1.0 + mu))

    @property
    def flops(self) -> dict[str, float]:
        """Estimates: 2·N per sampled or prefilled token, 6·N per trained token (nanoGPT / Kaplan)."""
        gen = 2.0 * self.n_params * (self.gen_tokens + self.prefill_tokens)
        train = 6.0 * self.n_params * self.train_tokens
        return {"gen": gen, "train": train, "total": gen + train}
