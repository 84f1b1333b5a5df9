"""The trial engine: one GRPO run with a replay buffer, from a `TrialConfig` to an MLflow run (docs/trial.md).

Where things are: the loop (`loop`), one optimizer step and its loss input (`step`), fresh rollouts and the
prompt stream (`rollouts`), the buffer and rollout types (`replay`), the strategies that draw batches
(`strategies/`), the losses (`objectives`), the held-out evaluation (`evaluation`), tasks and rewards (`tasks`),
the model (`policy`), where it comes from (`model_sources/`, `model.source`) and the embedded checkpoint
(`checkpoint`, `cache`). Compute is accounted by `workbench.compute` and logged by `workbench.tracking`. The trial
engine knows nothing of Optuna.
"""

import importlib

__all__ = ["StepRecord", "TrialDiverged", "TrialResult", "TrialStopped", "run_trial"]
_HOME = {
    "StepRecord": "loop",
    "TrialResult": "loop",
    "TrialStopped": "loop",
    "run_trial": "loop",
    "TrialDiverged": "step",
}


def __getattr__(name: str):
    # Lazy (PEP 562): `import workbench.trial.objectives` must not load the model stack (transformers, MLflow).
    if name in _HOME:
        return getattr(importlib.import_module(f"workbench.trial.{_HOME[name]}"), name)
    raise AttributeError(name)
