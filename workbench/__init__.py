"""replay-workbench: experience replay for GRPO-style RL post-training of LLMs.

The public surface: configs, the trial runner and the registries users extend. Importing the package is cheap (no
torch, transformers or MLflow): the trial engine, the built-in strategies, objectives, generation backends and
model sources load on first use, and a registry registers its built-ins the first time a config (or anyone) reads it.
"""

from importlib import import_module

from workbench.config import ConfigError, TrialConfig, build_config, flatten, load_config
from workbench.registry import GENERATION_BACKENDS, MODEL_SOURCES, OBJECTIVES, STRATEGIES

__all__ = [
    "ConfigError",
    "GENERATION_BACKENDS",
    "GenerationBackend",
    "MODEL_SOURCES",
    "ModelSource",
    "OBJECTIVES",
    "ReplayBuffer",
    "Rollout",
    "STRATEGIES",
    "Strategy",
    "TrialConfig",
    "build_config",
    "flatten",
    "load_config",
    "register_backend",
    "register_model_source",
    "register_objective",
    "register_strategy",
    "run_trial",
]

_LAZY = {
    "GenerationBackend": "workbench.backends.base",
    "register_backend": "workbench.backends.base",
    "ModelSource": "workbench.trial.model_sources",
    "register_model_source": "workbench.trial.model_sources",
    "register_objective": "workbench.trial.objectives",
    "ReplayBuffer": "workbench.trial.replay",
    "Rollout": "workbench.trial.replay",
    "Strategy": "workbench.trial.strategies",
    "register_strategy": "workbench.trial.strategies",
    "run_trial": "workbench.trial.loop",
}


def __getattr__(name: str):
    # Deferred: these pull torch (and the trial loop transformers and MLflow) when first used.
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(name)
