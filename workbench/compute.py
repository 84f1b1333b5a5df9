"""Compute accounting (docs/trial.md, "Compute accounting"): the one home of the compute-unit formula and of compute-to-target.

One compute unit is the cost of one on-policy update at the trial's batch size B: B forward-backward passes plus
B generations, i.e. B·(1 + mu) in units of one rollout's forward-backward. Training on K_train rollouts and
generating K_gen costs (K_train + mu·K_gen) / (B·(1 + mu)) units (`units`). mu is the cost of generating a rollout
over the cost of training on it: fixed by `compute.mu`, or measured from the trial's own phase timings.

Torch-free on purpose: the trial's meter, the study driver and `analysis/` all account with these functions.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence


def units(train_rollouts: float, gen_rollouts: float, batch_size: float, mu: float):
    """Compute units of training on `train_rollouts` and generating `gen_rollouts`: (K_train + mu·K_gen) / (B(1 + mu)).

    Works on numbers and on array-likes (pandas columns) alike."""
    return (train_rollouts + mu * gen_rollouts) / (batch_size * (1.0 + mu))


def split_compute_ratio(workers: float, trainers: float, mu: float):
    """The paper's compute ratio gamma of an asynchronous split (Arnal et al. §3.2): (1 + W/T) / (1 + mu), the compute
    per update of W generators feeding T trainers through a buffer, C(1 + W/T), over on-policy's, C(1 + mu). Below 1
    a split spends less per update than on-policy (it replays). Not the probe's within-group gradient correlation
    (`workbench.trial.probe.ProbeResult.group_correlation`)."""
    return (1.0 + workers / trainers) / (1.0 + mu)


@dataclass(frozen=True)
class ToTarget:
    """How much of a resource (compute units, seconds) a run spent to reach a target accuracy."""

    value: float
    """The estimate (`workbench.estimators`: `first` is the evaluation at or above the target); for a censored run
    the penalised total (`censored_value`)."""
    censored: bool
    """The target was never reached."""
    total: float
    """Spent by the whole run: a censored run's true compute-to-target lies above it."""
    low: float = math.nan
    high: float = math.nan
    """The true crossing lies in [low, high]: between the evaluation before the crossing and the one at or past it
    for the estimators that read evaluations (`first`, `interpolated`); low = high = value for those that read a
    smoothed or fitted curve; low = high = total when censored."""


def censored_value(total: float, best: float, target: float) -> float:
    """The score of a run that never reached the target: U·(1 + (target - best)/target), U its total. It ranks after
    every run that reached the target within the same budget, and closer misses rank better, so a sampler learns
    from it instead of ignoring it. Fits use `total` itself as the censoring bound, never this score."""
    return total * (1.0 + (target - best) / target)


def to_target(spent: Sequence[float], accuracy: Sequence[float], target: float) -> ToTarget:
    """The `first` rule: `spent` and `accuracy` are one run's evaluations in order; the run scores what it had spent
    at its first evaluation at or above the target, and `censored_value` if it never got there."""
    total = float(spent[-1])
    for i, (s, acc) in enumerate(zip(spent, accuracy)):
        if acc >= target:
            return ToTarget(float(s), False, total, float(spent[i - 1]) if i else float(s), float(s))
    return ToTarget(censored_value(total, max(accuracy), target), True, total, total, total)


@dataclass
class ComputeMeter:
    """A trial's running account: rollouts, tokens, phase seconds and compute units."""

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
    seconds: dict[str, float] = field(default_factory=lambda: {"gen": 0.0, "train": 0.0})

    @contextmanager
    def timed(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    @property
    def measured_mu(self) -> float | None:
        """(generation seconds per generated rollout) / (training seconds per trained rollout)."""
        if not self.gen_rollouts or not self.train_rollouts or self.seconds["train"] <= 0:
            return None
        return (self.seconds["gen"] / self.gen_rollouts) / (self.seconds["train"] / self.train_rollouts)

    @property
    def mu(self) -> float:
        """The mu used for accounting: fixed, else measured so far (1.0 before anything was measured)."""
        if self.fixed_mu is not None:
            return self.fixed_mu
        return self.measured_mu or 1.0

    def step(self, fresh: int, trained: int) -> float:
        """Account one optimizer step (after its phases were timed) at the current mu; returns the cumulative units."""
        self.gen_rollouts += fresh
        self.train_rollouts += trained
        self.units += units(trained, fresh, self.batch_size, self.mu)
        return self.units

    @property
    def flops(self) -> dict[str, float]:
        """Estimates: 2·N per sampled or prefilled token, 6·N per trained token (nanoGPT / Kaplan)."""
        gen = 2.0 * self.n_params * (self.gen_tokens + self.prefill_tokens)
        train = 6.0 * self.n_params * self.train_tokens
        return {"gen": gen, "train": train, "total": gen + train}
