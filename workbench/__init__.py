"""replay-workbench: experience replay for GRPO-style RL post-training of LLMs.

The public surface: configs, the trial runner and the registries users extend.
"""

from workbench.config import ConfigError, TrialConfig, build_config, flatten, load_config
from workbench.objectives import OBJECTIVES, register_objective
from workbench.replay import ReplayBuffer, Rollout
from workbench.strategies import STRATEGIES, Strategy, register_strategy

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
    # torch/transformers/mlflow load only when a trial actually runs.
    if name == "run_trial":
        from workbench.trainer import run_trial

        return run_trial
    raise AttributeError(name)
