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


def test_embedded_checkpoint_is_deterministic_for_its_seed_whatever_the_builders_threads(tmp_path):
    weights, threads = [], torch.get_num_threads()
    for name, builder_threads in (("a", 1), ("b", 3)):
        cfg = build_config(toy_dict(model={**TINY_MODEL, "cache_dir": str(tmp_path / name)}))
        torch.set_num_threads(builder_threads)
        try:
            path = ensure_embedded_checkpoint(cfg.model, cfg.task, load_task(cfg.task))
        finally:
            torch.set_num_threads(threads)
        assert torch.get_num_threads() == threads  # the builder's own setting is given back
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


def test_a_jsonl_task_gets_its_files_characters_and_a_hint_when_the_warm_start_learns_nothing(tmp_path):
    data = tmp_path / "prix.jsonl"
    rows = [{"question": f"Un café coûte {i} €, et deux ?", "answer": f"{i} × 2 = {2 * i}\n#### {2 * i}"} for i in range(1, 21)]
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    model = {**TINY_MODEL, "cache_dir": str(tmp_path / "cache"), "warm_start": {"steps": 0}}
    cfg = build_config(toy_dict(task={"name": "jsonl", "path": str(data), "n_eval": 4}, eval={"pass_k_prompts": 4}, model=model))
    task = load_task(cfg.task)
    with captured_logs() as records:
        path = ensure_embedded_checkpoint(cfg.model, cfg.task, task)
    _, tok = load_policy(path, torch.device("cpu"), torch.float32)
    for text in ("café", "€", "×", "coûte"):
        assert tok.unk_token_id not in tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(tok("Un café coûte 3 €", add_special_tokens=False)["input_ids"]) == "Un café coûte 3 €"
    warnings = [r.getMessage() for r in records if r.levelname == "WARNING"]
    assert json.loads((path / "warm_start.json").read_text())["accuracy"] == 0
    assert len(warnings) == 1 and "model.path" in warnings[0] and "warm_start.steps" in warnings[0]
    assert any("greedy held-out accuracy 0.000" in r.getMessage() for r in records)
