"""What every replay strategy is: the questions the trainer loop asks it, and its registration.

A strategy owns its buffer and answers four questions of the trainer loop (docs/trial.md):

    groups = strategy.groups(step)                 # how many GRPO groups to sample now
    batch  = strategy.batch(fresh, step, rng)      # what to train on (may edit advantages / log-probs)
    gated  = strategy.gate(model, step)            # after backward, before the optimizer step (dgg)
    strategy.metrics()                             # strategy-specific metrics of the step

in `pipeline.mode: async` (a strategy with `streams`), `stream_batch` and `room` instead of `groups` and `batch`,
and three of the config: its parameter section (`Params`, the config's `replay.<name>`), `validate(cfg)` and
`default_capacity(cfg)`. A new strategy is one module: a `Strategy` subclass registered with
`@register_strategy("name")`, imported by `workbench.trial.strategies`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from workbench.config import Section, TrialConfig
from workbench.registry import STRATEGIES
from workbench.trial.replay import Rollout
from workbench.trial.tasks import Task


@dataclass
class StrategyContext:
    """What a strategy may use besides the config: the task, the tokenizer, and the current policy's scorer."""

    task: Task
    tokenizer: object
    rescore: Callable[[list[Rollout]], None]
    """Replace the rollouts' behaviour log-probs by the current policy's (no grad)."""
    max_new_tokens: int = 64


def register_strategy(name: str):
    """Register a `Strategy` subclass under `name` (the value of `replay.strategy`)."""

    def wrap(cls):
        cls.name = name
        return STRATEGIES.register(name)(cls)

    return wrap


def is_correct(r: Rollout) -> bool:
    """A verified success: the task's verifier gave full reward (rewards are 0/1 on the built-in tasks)."""
    return r.reward >= 1.0 - 1e-9


class Strategy(ABC):
    name = ""
    Params: type[Section] | None = None
    """The strategy's own parameter section, `replay.<name>` in the config (None: it has none)."""
    fresh_anchored = False
    """Generates a whole fresh batch (B rollouts) whenever it needs one; `replay.ratio` must then stay 1."""
    fills = False
    """Implements `replay.warmup: fill`."""
    streams = False
    """Implements `stream_batch`: runs in `pipeline.mode: async`, where rollouts arrive as the generators make them."""

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        self.cfg, self.ctx = cfg, ctx
        self.B, self.G = cfg.batch_size, cfg.group_size
        self._metrics: dict[str, float] = {}

    # -- hooks for the config
    @classmethod
    def default_capacity(cls, cfg: TrialConfig) -> int:
        """`replay.capacity: null` means this (the batch size: on-policy for uniform at ratio 1)."""
        return cfg.batch_size

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        """Raise ValueError("field: reason") if the config does not suit this strategy."""
        if cls.fresh_anchored and cfg.replay.ratio != 1:
            raise ValueError(
                f"replay.ratio: must be 1 with replay.strategy {cls.name} (its reuse is set by replay.{cls.name}.*)"
            )
        if cfg.replay.warmup == "fill" and not cls.fills:
            raise ValueError(
                f"replay.warmup: fill is not supported by replay.strategy {cls.name} (uniform supports it)"
            )

    @classmethod
    def params(cls, cfg: TrialConfig):
        """This strategy's parameters in `cfg` (`replay.<name>`)."""
        return cfg.replay.section(cls.name)

    # -- hooks for the trainer
    def prompts(self, n_train: int) -> list[int] | None:
        """The train prompts this strategy trains on (None: all of them)."""
        return None

    @abstractmethod
    def groups(self, step: int) -> int:
        """Whole GRPO groups to sample at this step."""

    @abstractmethod
    def batch(self, fresh: list[Rollout], step: int, rng: np.random.Generator) -> list[Rollout]:
        """The rollouts to train on at this step (the fresh ones have just been generated)."""

    def stream_batch(self, arrived: list[Rollout], step: int, rng: np.random.Generator) -> list[Rollout] | None:
        """`pipeline.mode: async`: take the rollouts that `arrived` since the last call; the batch to train on at
        this step, or None when none can be drawn yet (the trainer then waits for more rollouts)."""
        raise NotImplementedError(f"replay.strategy {self.name} does not run in pipeline.mode async")

    def room(self) -> int | None:
        """`pipeline.mode: async`: how many more rollouts this strategy takes now (None: any number; a full
        strategy leaves them in the transfer queue, so the generators wait)."""
        return None

    def gate(self, model, step: int) -> bool:
        """Called after backward and before the optimizer step; True drops this update (dgg)."""
        return False

    def size(self) -> int:
        """Rollouts held for replay now."""
        return 0

    def held(self) -> list[Rollout]:
        """The rollouts held for replay now (read-only; the probe measures their gradients)."""
        return []

    def metrics(self) -> dict[str, float]:
        return self._metrics


def uniform_draw(items, batch_size: int, rng: np.random.Generator, with_replacement: bool = False) -> list[Rollout]:
    """B rollouts uniformly from `items`, distinct unless `with_replacement`, returned in buffer order."""
    n = len(items)
    if n < batch_size and not with_replacement:
        raise RuntimeError(f"buffer holds {n} rollouts, fewer than batch_size {batch_size}")
    idx = rng.choice(n, size=batch_size, replace=with_replacement)
    return [items[i] for i in np.sort(idx)]
