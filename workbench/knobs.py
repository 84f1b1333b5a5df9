"""The buffer's knobs and the paper's (x, y): each conversion written once, torch-free.

Symbols as in docs/theory.md: B the batch size, R = B/y the fresh rollouts per optimizer step, N the buffer's
capacity, x = N/R its staleness horizon (in optimizer steps), y = B/R the replay ratio (how often a rollout is
trained on, in the long run), mu a rollout's generation cost over its training cost. A trial config sets them as
`replay.ratio` (y), `replay.capacity` (N, whole rollouts) and `replay.horizon` (an age limit, or none); an
asynchronous pipeline realises y with its split of W generators over T trainers, W/T ≈ mu/y (docs/pipeline.md).

Every layer that converts calls this module: the trial config (R), a study spec's `x` knob, `study verify`, the
probe, the analysis (its tables, the fits' optimum search, the asynchronous mapping) and `workbench theory`.
Functions take floats or numpy arrays where the formula allows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def fresh_per_step(batch_size: float, y: float) -> float:
    """R = B / y: fresh rollouts per optimizer step in the long run."""
    return batch_size / y


def capacity(x: float, y: float, batch_size: int, distinct: bool = True) -> int:
    """N = x·R = x·B / y in whole rollouts (rounded, at least 1). With `distinct` (a batch draws distinct rollouts,
    the `uniform` strategy), at least B: the nearest buffer that can serve a batch (`feasible`)."""
    n = max(1, round(exact_capacity(x, y, batch_size)))
    return max(n, batch_size) if distinct else n


def exact_capacity(x, y, batch_size: float):
    """N = x·B / y before rounding to whole rollouts (the form Theorem 4.4's variance term uses)."""
    return x * batch_size / y


def staleness(capacity: float, y: float, batch_size: float) -> float:
    """x = N / R = N·y / B: the staleness horizon a buffer of `capacity` rollouts gives at ratio y."""
    return capacity * y / batch_size


def feasible(x, y):
    """Whether (x, y) can be run with distinct draws: a batch of B distinct rollouts needs N >= B, that is x >= y
    (elementwise for arrays)."""
    return x >= y


def workers_per_trainer(y: float, mu: float) -> float:
    """W/T ≈ mu / y: the asynchronous split that realises replay ratio y when neither side stalls (docs/pipeline.md)."""
    return mu / y


def replay_ratio_of_split(mu: float, workers: int, trainers: int) -> float:
    """y ≈ mu·T/W: the replay ratio a split of W generators over T trainers gives at `mu` (`workers_per_trainer`
    read backwards)."""
    return mu * trainers / workers


def age_limit(x: float) -> int:
    """The age limit a horizon of x implies, ceil(x) optimizer steps (`replay.horizon` can stay null)."""
    return max(0, math.ceil(x))


def runnable_ratio(y: float) -> float:
    """The `replay.ratio` a predicted y runs at: 3 significant digits (a knob a person can read and type), and at
    least 1 (below on-policy a rollout would be generated and never trained on)."""
    return max(1.0, float(f"{y:.3g}"))


@dataclass(frozen=True)
class BufferSettings:
    """A point (x, y) as the knobs that run it at batch size B."""

    x: float
    y: float
    fresh_per_step: float
    """R = B / y."""
    capacity: int
    """N = x·R (rounded; at least B when draws are distinct)."""
    ratio: float
    """The `replay.ratio` knob (y)."""
    workers_per_trainer: float
    """W/T ≈ mu / y (docs/theory.md, the asynchronous mapping)."""
    horizon: int
    """The age limit implied by the buffer, ceil(x) optimizer steps (`replay.horizon` can stay null)."""

    @property
    def exact_capacity(self) -> float:
        """N = x·R before rounding to whole rollouts."""
        return self.x * self.fresh_per_step


def to_knobs(x: float, y: float, batch_size: int, mu: float, distinct: bool = True) -> BufferSettings:
    """Map (x, y) to (capacity, horizon, ratio) for batch size B: R = B/y, N = x·R, W/T = mu/y."""
    return BufferSettings(
        x,
        y,
        fresh_per_step(batch_size, y),
        capacity(x, y, batch_size, distinct),
        y,
        workers_per_trainer(y, mu),
        age_limit(x),
    )
