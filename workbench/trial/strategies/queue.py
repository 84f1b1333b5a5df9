"""`queue`: no buffer; each rollout trained once, the freshest first: the baseline of Arnal et al.'s asynchronous
system (docs/strategies/queue.md: workers push to a transfer queue, trainers pull, use each rollout once and
discard it; the paper's pseudo-code queue is LIFO, App. B.1)."""

from __future__ import annotations

from workbench.config import TrialConfig
from workbench.trial.replay import Rollout
from workbench.trial.strategies.base import Strategy, StrategyContext, register_strategy


@register_strategy("queue")
class Queue(Strategy):
    """Synchronous: on-policy GRPO (B fresh rollouts per step, each trained once), the same as `uniform` at ratio 1
    and capacity B. Asynchronous (`pipeline.mode: async`): the rollouts that arrived wait in a stack of at most
    `replay.capacity` (default 2B); each step trains the B newest (by weight version, then arrival) and drops them,
    so none is trained twice; when the stack is full the generators wait. As in any LIFO queue, rollouts left at
    the bottom while fresher ones keep coming wait (and age) until the generators fall behind; none is discarded."""

    streams = True

    def __init__(self, cfg: TrialConfig, ctx: StrategyContext | None = None):
        super().__init__(cfg, ctx)
        self.stack: list[Rollout] = []

    @classmethod
    def default_capacity(cls, cfg: TrialConfig) -> int:
        return 2 * cfg.batch_size

    @classmethod
    def validate(cls, cfg: TrialConfig) -> None:
        super().validate(cfg)
        if cfg.replay.ratio != 1 and cfg.pipeline.mode == "sync":
            raise ValueError(
                f"replay.ratio: must be 1 with replay.strategy queue (each rollout is trained once), got {cfg.replay.ratio:g}"
            )
        if cfg.replay.capacity < cfg.batch_size:
            raise ValueError(
                f"replay.capacity: the queue must hold a batch ({cfg.batch_size}), got {cfg.replay.capacity}"
            )

    def groups(self, step: int) -> int:
        return -(-self.B // self.G)

    def batch(self, fresh, step, rng):
        return fresh[: self.B]

    def stream_batch(self, arrived, step, rng):
        self.stack.extend(arrived)
        if len(self.stack) < self.B:
            return None
        order = sorted(range(len(self.stack)), key=lambda i: (self.stack[i].birth_step, i))
        take = set(order[-self.B :])
        batch = [r for i, r in enumerate(self.stack) if i in take]
        self.stack = [r for i, r in enumerate(self.stack) if i not in take]
        return batch

    def room(self) -> int | None:
        return self.cfg.replay.capacity - len(self.stack)

    def size(self) -> int:
        return len(self.stack)

    def held(self) -> list[Rollout]:
        return list(self.stack)
