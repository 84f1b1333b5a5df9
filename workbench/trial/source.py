"""What the training loop (`loop.train`) asks of its batch source, the one thing a synchronous trial and an
asynchronous one do differently: `inline.InlineSource` generates each step's rollouts in the loop's own process;
`pipeline.driver.PipelineSource` receives them from generator processes and trains in lockstep with the other
trainers. Everything else (the policy's optimizer, the strategy, the compute meter, the metrics every trial logs,
the evaluation schedule, the final metrics and artifacts) is the loop's, written once."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from workbench import tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig
from workbench.trial.diagnostics import GradientCosine
from workbench.trial.policy import Policy
from workbench.trial.record import Evaluations, WallClock
from workbench.trial.replay import Rollout
from workbench.trial.step import make_lr_schedule, make_optimizer, rescore
from workbench.trial.strategies import Strategy, StrategyContext, make_strategy
from workbench.trial.tasks import Task


@dataclass
class Replica:
    """What trains one replica of the policy: its optimizer, lr schedule and the strategy holding its rollouts (the
    loop's, and each further trainer's of a pipeline)."""

    optimizer: Any
    lr_schedule: Any
    strategy: Strategy

    @classmethod
    def around(cls, policy: Policy, task: Task, cfg: TrialConfig, strategy_cfg: TrialConfig) -> "Replica":
        """`strategy_cfg`: the configuration the strategy sees (a pipeline trainer's shard of the batch)."""
        optimizer = make_optimizer(policy.model, cfg.lr)
        lr_schedule = make_lr_schedule(optimizer, cfg.lr_warmup_steps)
        context = StrategyContext(
            task,
            policy.tokenizer,
            lambda rs: rescore(policy, rs, strategy_cfg.train.micro_batch_size),
            policy.max_new_tokens,
        )
        return cls(optimizer, lr_schedule, make_strategy(strategy_cfg, context))


@dataclass
class Parts:
    """What the loop built, handed to its source when the steps begin."""

    cfg: TrialConfig
    task: Task
    run: tracking.RunLogger
    policy: Policy
    optimizer: Any
    strategy: Strategy
    meter: ComputeMeter
    evaluations: Evaluations
    clock: WallClock
    cosine: GradientCosine | None = None
    """The consecutive-gradient cosine of the trainer that logs (`train.grad_cosine`), or None."""


@dataclass
class Draw:
    """One step's rollouts: `fresh`, generated for it (a pipeline's: those that reached this trainer); `batch`, the
    strategy's draw to train on; `state`, the source's own (the generation's output, a pipeline's step report)."""

    fresh: list[Rollout]
    batch: list[Rollout]
    state: Any = None
    trained_once: int = 0
    """Of `batch`, the fresh rollouts trained for the first time (set by the loop once it has trained them)."""


class BatchSource(Protocol):
    cfg: TrialConfig
    """The configuration the strategy and the train step see (a pipeline trainer's: its shard of the batch)."""
    tags: dict[str, str]
    """The run's tags this source adds (a pipeline's mode)."""

    def policy(self, task: Task) -> Policy:
        """The trained policy, on this process's devices."""

    def clock(self, policy: Policy) -> tuple[WallClock, Callable[[], float] | None]:
        """The trial's working wall clock, and what a curve row's `seconds` reads (None: compute seconds)."""

    def running(self, parts: Parts) -> AbstractContextManager[None]:
        """Start what the source runs beside the loop (a pipeline's processes) and stop it at the end."""

    def evaluate(self, step: int, last: bool = False) -> None:
        """The held-out evaluation at `step` (a pipeline's generators paused)."""

    def begin(self) -> None:
        """After the first evaluation, before the clock starts (a pipeline waits for its first rollouts)."""

    def more(self, step: int, budget_left: bool) -> bool:
        """Whether the loop goes on (a pipeline's trainers agree on it)."""

    def draw(self, step: int) -> Draw:
        """This step's fresh rollouts and the batch to train on."""

    def train(self, step: int, batch: list[Rollout]) -> tuple[float, float, bool]:
        """One train step on `batch`: (objective, gradient norm, whether the update was applied)."""

    def trained(self, step: int, draw: Draw) -> tuple[int, int]:
        """Account the trained step: (rollouts generated, rollouts trained) for the compute meter."""

    def metrics(self, step: int, draw: Draw) -> dict[str, float]:
        """This source's own step metrics, beside those every trial logs."""

    def final(self) -> dict[str, float]:
        """This source's own final metrics."""

    def histograms(self) -> dict[str, dict[str, int]]:
        """The ages artifact: rollout counts by age (a pipeline's by lag at push too)."""
