"""Replay strategies, registered by name (`replay.strategy`): what is generated and what is trained each step.

Registered: `uniform` (Arnal et al.), `positive_bias` (Arnal et al. §5.5), `prioritized` (Yoo et al.),
`rlep` (Zhang et al.), `dgg` (Miao et al.), `queue` (the asynchronous system's no-buffer baseline), one module each, documented in `docs/strategies/`. A new strategy
is one module: a `Strategy` subclass with its `Params` section, registered with `@register_strategy("name")`.
"""

from workbench.config import TrialConfig
from workbench.registry import STRATEGIES
from workbench.trial.strategies.base import Strategy, StrategyContext, is_correct, register_strategy, uniform_draw
from workbench.trial.strategies.dgg import Dgg
from workbench.trial.strategies.positive_bias import PositiveBias
from workbench.trial.strategies.prioritized import Prioritized
from workbench.trial.strategies.queue import Queue
from workbench.trial.strategies.rlep import Rlep
from workbench.trial.strategies.uniform import Uniform

__all__ = [
    "STRATEGIES",
    "Dgg",
    "PositiveBias",
    "Prioritized",
    "Queue",
    "Rlep",
    "Strategy",
    "StrategyContext",
    "Uniform",
    "is_correct",
    "make_strategy",
    "register_strategy",
    "uniform_draw",
]


def make_strategy(cfg: TrialConfig, ctx: StrategyContext | None = None) -> Strategy:
    """The configured strategy (`replay.strategy`), ready for the trainer loop."""
    return STRATEGIES[cfg.replay.strategy](cfg, ctx)
