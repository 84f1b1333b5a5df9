import json

import torch
from safetensors.torch import load_file

from workbench.config import build_config
from workbench.trial.checkpoint import embedded_key, ensure_embedded_checkpoint
from workbench.trial.policy import load_policy
from workbench.trial.tasks import load_task

from support.logs import captured_logs
from support.toy import TINY_MODEL, toy_dict


def test_embedded_checkpoint_is_safetensors_loaded_with_from_pretrained(model_cache):
    cfg = build_config(toy_dict())
    task = load_task(cfg.task)
    path = ensure_embedded_checkpoint(cfg.model, cfg.task, task)
    assert path.parent == model_cache / "models"
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.bin"))
    info = json.loads((path / "warm_start.json").read_text())
    assert info["params"] > 0 and 0 <= info["accuracy"] <= 1
    model, tok = load_policy(path, torch.device("cpu"), torch.float32)
    assert model.config.hidden_size == 128 and tok.padding_side == "left"
    # the second call reuses the cache: nothing is built, so nothing is logged
    with captured_logs() as records:
        assert ensure_embedded_checkpoint(cfg.model, cfg.task, task) == path
    assert records == []


def test_embedded_checkpoint_is_deterministic_for_its_seed(tmp_path):
    weights = []
    for name in ("a", "b"):
        cfg = build_config(toy_dict(model={**TINY_MODEL, "cache_dir": str(tmp_path / name)}))
        path = ensure_embedded_checkpoint(cfg.model, cfg.task, load_task(cfg.task))
        weights.append(load_file(path / "model.safetensors"))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_checkpoint_key_changes_with_what_shapes_it():
    base = build_config(toy_dict())
    other_seed = build_config(toy_dict(model={**toy_dict()["model"], "init_seed": 1}))
    other_task = build_config(toy_dict(task={"n_eval": 64, "digits": 3}))
    keys = {embedded_key(c.model, c.task) for c in (base, other_seed, other_task)}
    assert len(keys) == 3
    assert embedded_key(base.model, base.task) == embedded_key(build_config(toy_dict()).model, base.task)
