"""Toy-size trial configs and study specs: real components, seconds per trial."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import yaml

from workbench.trial.replay import Rollout

TOY = {
    "batch_size": 16,
    "group_size": 4,
    "lr": 1e-4,  # toy trials are 4-10 steps: a step size that moves the tiny model visibly within them
    "lr_warmup_steps": 0,  # ... from the first step
    "threads": 1,
    "task": {"digits": 2, "n_eval": 64},
    "model": {"warm_start": {"target_accuracy": 0.2}},
    "budget": {"compute_units": None, "steps": 4},
    "eval": {"every": 2, "k": 2, "pass_k_prompts": 8, "target_accuracy": 0.3},
    # The static decoder without compilation: the same tokens as compiled (tests/backends/test_decode.py), without
    # a compile per shape in every test process.
    "generation": {"decode": "static"},
}
# The embedded architecture, warm-started on 2-digit addition to ~20% held-out accuracy (about 10 s, once per
# session): rewards and advantages are non-zero from the first step, so the trainer tests are not degenerate.
TINY_MODEL = {
    "hidden_size": 32,
    "num_layers": 1,
    "intermediate_size": 64,
    "num_heads": 2,
    "warm_start": {"steps": 20, "eval_every": 10},
}
"""A smaller, untrained-to-accuracy model for tests that only need a checkpoint (determinism, loading)."""


def toy_dict(**sections) -> dict:
    """TOY with sections deep-merged from keyword arguments (`replay={"ratio": 2}`)."""
    data = copy.deepcopy(TOY)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


def toy_spec(tmp_path: Path, **fields) -> Path:
    """A toy study spec file (random sampler, real local stores in tmp_path)."""
    base = {k: v for k, v in TOY.items() if k != "threads"}
    spec = {
        "name": "toy",
        "base": {**base, "budget": {"compute_units": None, "steps": 6}, "eval": {**TOY["eval"], "every": 3}},
        "search_space": {"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4]}},
        "seeds": 1,
        "n_trials": 3,
        "sampler": "random",
        "storage": f"sqlite:///{tmp_path / 'optuna.db'}",
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    spec.update(fields)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def tracked(cfg, tracking_uri: str):
    """`cfg` logging to the MLflow store `tracking_uri` (returned, for `run_trial(tracked(cfg, uri))`)."""
    cfg.tracking.uri = tracking_uri
    return cfg


def rollout(uid: int, birth: int) -> Rollout:
    """A one-token rollout born at optimizer step `birth` (groups of 4 by uid), for buffer and draw tests."""
    return Rollout(uid, 0, uid // 4, [1], [2], torch.zeros(1), 0.0, 0.0, 0.0, birth)


def toy_step_setup(lr: float = 1e-2):
    """The toy config, its `Policy` with an Adam at `lr`, and 16 of its rollouts sampled at temperature 0.3 (groups of
    4, seed 0, some with non-zero advantages): what a `train_step` test trains on."""
    from workbench.config import build_config
    from workbench.trial.policy import Policy
    from workbench.trial.rollouts import generate_groups
    from workbench.trial.tasks import load_task

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=lr)
    policy.temperature = 0.3
    fresh, _ = generate_groups(policy, task, list(range(16)), 4, 0, torch.Generator().manual_seed(0), 0)
    return cfg, policy, optimizer, fresh


def toy_policy():
    """The toy config's embedded model and tokenizer, loaded with `from_pretrained` on CPU, and its task."""
    from workbench.config import build_config
    from workbench.trial.checkpoint import ensure_embedded_checkpoint
    from workbench.trial.policy import load_policy
    from workbench.trial.tasks import load_task

    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    path = ensure_embedded_checkpoint(cfg.model, cfg.task, task)
    model, tok = load_policy(path, torch.device("cpu"), torch.float32)
    return model, tok, task
