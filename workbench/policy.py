"""The policy: any HF causal-LM directory, or the embedded tiny Llama with its supervised warm start.

The embedded checkpoint is built once per (architecture, task, warm-start) setting, deterministically for its
seed, saved with `save_pretrained` (safetensors) under a cache directory, and from then on loaded with
`from_pretrained` exactly like a user's model. Every trial of a study starts from the same checkpoint.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import random
import shutil
import string
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workbench.config import ModelConfig, TaskConfig
from workbench.generation import encode_prompts, sample, score
from workbench.tasks import Task

CHECKPOINT_FORMAT = 3  # bump when the embedded model or warm start changes meaning
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII that frames text as `<bos> text`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(SPECIAL + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def load_policy(path: str | Path, device: torch.device, dtype: torch.dtype):
    """`from_pretrained` a causal LM and its tokenizer from a local directory, ready for sampling."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(device)
    return model, tokenizer


# ---------------------------------------------------------------- the embedded checkpoint


def _cache_root(cfg: ModelConfig) -> Path:
    root = cfg.cache_dir or os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "replay-workbench"
    return Path(root).expanduser()


def embedded_key(model_cfg: ModelConfig, task_cfg: TaskConfig) -> str:
    """A hash of everything that determines the embedded checkpoint."""
    spec = {
        "format": CHECKPOINT_FORMAT,
        "arch": model_cfg.model_dump(include={"hidden_size", "num_layers", "intermediate_size", "num_heads", "init_seed"}),
        "warm_start": model_cfg.warm_start.model_dump(),
        "task": task_cfg.model_dump(),
    }
    if task_cfg.name == "jsonl":  # the file's content, not only its name, shapes the warm start
        spec["task_sha"] = hashlib.sha256(Path(task_cfg.path).expanduser().read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def greedy_accuracy(model, tokenizer, task: Task, max_new_tokens: int, limit: int | None = None) -> float:
    examples = task.eval[:limit] if limit else task.eval
    out = sample(model, tokenizer, encode_prompts(tokenizer, [e.prompt for e in examples]), max_new_tokens=max_new_tokens, greedy=True)
    rewards = [task.reward(t, e, f) for t, e, f in zip(out.texts, examples, out.finished)]
    return sum(rewards) / len(rewards)


def warm_start(model, tokenizer, task: Task, cfg: ModelConfig, log=print) -> tuple[int, float]:
    """Supervised phase on partly correct demonstrations, stopped near a target held-out accuracy.

    A `noise` share of the demonstrations has its final answer replaced by random digits of the same length, so
    the model learns the format and part of the skill, and RL has room to improve. Accuracy rises in a sharp
    transition, so at the first evaluation reaching the target the model keeps whichever of that checkpoint and
    the previous one is closer to the target. Returns (steps, accuracy) of the kept checkpoint.
    """
    ws = cfg.warm_start
    rng = random.Random(cfg.init_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr)
    model.eval()
    previous = (0, greedy_accuracy(model, tokenizer, task, task.max_new_tokens), copy.deepcopy(model.state_dict()))
    model.train()
    for step in range(1, ws.steps + 1):
        batch = rng.sample(task.train, min(ws.batch_size, len(task.train)))
        completions = []
        for ex in batch:
            demo = ex.demonstration
            if rng.random() < ws.noise and demo.endswith(ex.answer):
                wrong = "".join(rng.choice("0123456789") for _ in ex.answer)
                demo = demo[: len(demo) - len(ex.answer)] + wrong
            completions.append(demo)
        prompt_ids = encode_prompts(tokenizer, [e.prompt for e in batch])
        completion_ids = [ids[1:] + [tokenizer.eos_token_id] for ids in encode_prompts(tokenizer, completions)]
        logp, mask = score(model, prompt_ids, completion_ids, pad_id=tokenizer.pad_token_id)
        loss = -(logp.sum() / mask.sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % ws.eval_every == 0 or step == ws.steps:
            model.eval()
            acc = greedy_accuracy(model, tokenizer, task, task.max_new_tokens)
            model.train()
            log(f"warm start: step {step} loss {loss.item():.3f} held-out accuracy {acc:.3f}")
            if acc >= ws.target_accuracy:
                if abs(previous[1] - ws.target_accuracy) < abs(acc - ws.target_accuracy):
                    model.load_state_dict(previous[2])
                    return previous[0], previous[1]
                return step, acc
            previous = (step, acc, copy.deepcopy(model.state_dict()))
    return previous[0], previous[1]


def ensure_embedded_checkpoint(model_cfg: ModelConfig, task_cfg: TaskConfig, task: Task, log=print) -> Path:
    """Build (once, under a file lock, atomically) and return the embedded warm-started checkpoint directory."""
    root = _cache_root(model_cfg) / "models"
    final = root / f"tiny-llama-{embedded_key(model_cfg, task_cfg)}"
    if (final / "warm_start.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent workers wait for the first to finish building it
        if (final / "warm_start.json").is_file():
            return final
        log(f"building the embedded tiny Llama and its warm start in {final} (once)")
        torch.manual_seed(model_cfg.init_seed)
        tokenizer = build_char_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=model_cfg.hidden_size,
            intermediate_size=model_cfg.intermediate_size,
            num_hidden_layers=model_cfg.num_layers,
            num_attention_heads=model_cfg.num_heads,
            num_key_value_heads=model_cfg.num_heads,
            max_position_embeddings=512,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = LlamaForCausalLM(config)
        model.train()
        steps, acc = warm_start(model, tokenizer, task, model_cfg, log=log)
        model.eval()
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps({"steps": steps, "accuracy": acc, "params": count_parameters(model)}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        log(f"warm start done: {steps} steps, greedy held-out accuracy {acc:.3f}")
        return final


def stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
