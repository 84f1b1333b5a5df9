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
    rows = [
        {"question": f"Un café coûte {i} €, et deux ?", "answer": f"{i} × 2 = {2 * i}\n#### {2 * i}"}
        for i in range(1, 21)
    ]
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    model = {**TINY_MODEL, "cache_dir": str(tmp_path / "cache"), "warm_start": {"steps": 0}}
    cfg = build_config(
        toy_dict(task={"name": "jsonl", "path": str(data), "n_eval": 4}, eval={"pass_k_prompts": 4}, model=model)
    )
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


def test_a_warm_start_that_never_reaches_its_target_keeps_its_most_accurate_checkpoint(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.trial import checkpoint

    cfg = build_config(
        toy_dict(model={**TINY_MODEL, "warm_start": {"steps": 40, "eval_every": 10, "target_accuracy": 0.9}})
    )
    task = load_task(cfg.task)
    tok = checkpoint.build_char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    )
    accuracies, states = iter([0.0, 0.1, 0.4, 0.2, 0.0]), []  # steps 0, 10, 20, 30, 40: best at 20, below the target

    def scripted(m, *args, **kwargs):
        states.append({k: v.clone() for k, v in m.state_dict().items()})
        return next(accuracies)

    monkeypatch.setattr(checkpoint, "greedy_accuracy", scripted)
    assert checkpoint.warm_start(model, tok, task, cfg.model) == (20, 0.4)
    assert all(torch.equal(v, states[2][k]) for k, v in model.state_dict().items())  # the weights of step 20
    assert not all(torch.equal(v, states[4][k]) for k, v in model.state_dict().items())


def test_the_built_in_tasks_ship_their_default_checkpoints_and_trials_load_them(model_cache):
    """A change to the embedded model, its warm start or CHECKPOINT_FORMAT changes the key: this test then says to
    rebuild the shipped checkpoints (`make embedded-checkpoints`) rather than leave every fresh machine to build its
    own for a minute or two."""
    from workbench.trial.checkpoint import BUILT_IN_TASKS, SHIPPED

    for name in BUILT_IN_TASKS:
        cfg = build_config({"task": {"name": name}})
        shipped = SHIPPED / f"tiny-llama-{embedded_key(cfg.model, cfg.task)}"
        assert (shipped / "warm_start.json").is_file(), (
            f"{name}: no shipped checkpoint for the current key; run `make embedded-checkpoints`"
        )
        assert (shipped / "model.safetensors").is_file() and not list(shipped.glob("*.bin"))
        assert ensure_embedded_checkpoint(cfg.model, cfg.task, load_task(cfg.task)) == shipped  # nothing built
        assert not list((model_cache / "models").glob(shipped.name))
        model, tok = load_policy(shipped, torch.device("cpu"), torch.float32)
        info = json.loads((shipped / "warm_start.json").read_text())
        assert sum(p.numel() for p in model.parameters()) == info["params"] and 0 < info["accuracy"] < 1
    assert len(list(SHIPPED.glob("tiny-llama-*"))) == len(BUILT_IN_TASKS)  # no stale checkpoint shipped


def test_the_warm_start_reports_its_step_and_held_out_accuracy_as_it_goes(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench import progress
    from workbench.trial import checkpoint

    cfg = build_config(
        toy_dict(model={**TINY_MODEL, "warm_start": {"steps": 30, "eval_every": 10, "target_accuracy": 0.3}})
    )
    task = load_task(cfg.task)
    tok = checkpoint.build_char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    )
    accuracies = iter([0.0, 0.1, 0.25, 0.35])  # steps 0, 10, 20, 30: the target reached at the last evaluation
    monkeypatch.setattr(checkpoint, "greedy_accuracy", lambda *args, **kwargs: next(accuracies))
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a line at every step (off a terminal: every 10 s)
    with captured_logs() as records:
        assert checkpoint.warm_start(model, tok, task, cfg.model) == (30, 0.35)
    lines = [r.getMessage() for r in records]
    assert lines[0].startswith("warm start: 1/30 steps, held-out accuracy 0.000 (target 0.3)")
    assert any(
        line.startswith("warm start: 20/30 steps, loss ") and "held-out accuracy 0.250" in line for line in lines
    )
    assert lines[-1].startswith("warm start: 30 steps in ") and lines[-1].endswith(
        "held-out accuracy 0.350 (target 0.3)"
    )
