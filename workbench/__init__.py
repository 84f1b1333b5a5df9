"""replay-workbench: experience replay for GRPO-style RL post-training of LLMs.

The public surface: configs, the trial runner and the registries users extend. Importing the package registers
the built-in strategies and objectives, so a config can name them.
"""

from workbench.config import ConfigError, TrialConfig, build_config, flatten, load_config
from workbench.registry import OBJECTIVES, STRATEGIES
from workbench.trial.objectives import register_objective
from workbench.trial.replay import ReplayBuffer, Rollout
from workbench.trial.strategies import Strategy, register_strategy

__all__ = [
    "ConfigError",
    "OBJECTIVES",
    "ReplayBuffer",
    "Rollout",
    "STRATEGIES",
    "Strategy",
    "TrialConfig",
    "build_config",
    "flatten",
    "load_config",
    "register_objective",
    "register_strategy",
    "run_trial",
]


def __getattr__(name: str):
    # The trial loop (MLflow, the evaluator) loads when a trial actually runs, not for `workbench theory`.
    if name == "run_trial":
        from workbench.trial.loop import run_trial  # deferred: transformers and MLflow load with the trial loop

        return run_trial
    raise AttributeError(name)
