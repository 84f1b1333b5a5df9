"""The embedded default policy: a tiny Llama with a character tokenizer and a supervised warm start.

The checkpoint is built once per (architecture, task, warm-start) setting, deterministically for its seed, saved
with `save_pretrained` (safetensors) under the cache directory, and from then on loaded with `from_pretrained`
exactly like a user's model (`workbench.trial.policy`). Every trial of a study starts from the same checkpoint.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import random
import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workbench import progress
from workbench.backends.hf import encode_prompts, sample, score
from workbench.config import ModelConfig, TaskConfig
from workbench.cache import build_once, cache_root
from workbench.trial.tasks import Task

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 4  # bump when the embedded model or warm start changes meaning
WARM_START_THREADS = 1
"""The warm start runs on this many threads whatever the building process has: float sums split over another
number of threads differ in the last bits (1e-6 after 20 steps), and 400 steps of training turn that into another
checkpoint (measured: greedy held-out accuracy 0.354 and 0.372 for the split task on two machines), so which
process built the cache would decide the study's starting point. One thread: no sum is split at all, on any
machine (the checkpoint is built once per machine, so its speed matters little)."""
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]


def build_char_tokenizer(extra: str = "") -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII (and the characters of `extra` beyond it, in first-seen
    order) that frames text as `<bos> text`."""
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    chars += [c for c in dict.fromkeys(extra) if c not in chars and c not in "\t\r\x0b\x0c"]
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


# ---------------------------------------------------------------- the embedded checkpoint


def embedded_key(model_cfg: ModelConfig, task_cfg: TaskConfig) -> str:
    """A hash of everything that determines the embedded checkpoint."""
    spec = {
        "format": CHECKPOINT_FORMAT,
        "arch": model_cfg.model_dump(
            include={"hidden_size", "num_layers", "intermediate_size", "num_heads", "init_seed"}
        ),
        "warm_start": model_cfg.warm_start.model_dump(),
        # `difficulty` shapes `word_problems` only: left out for the other tasks, whose keys (and shipped
        # checkpoints) predate it
        "task": task_cfg.model_dump(exclude=None if task_cfg.name == "word_problems" else {"difficulty"}),
    }
    if task_cfg.name == "jsonl":  # the file's content, not only its name, shapes the warm start
        spec["task_sha"] = hashlib.sha256(Path(task_cfg.path).expanduser().read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def greedy_accuracy(model, tokenizer, task: Task, max_new_tokens: int, limit: int | None = None) -> float:
    examples = task.eval[:limit] if limit else task.eval
    out = sample(
        model,
        tokenizer,
        encode_prompts(tokenizer, [e.prompt for e in examples]),
        max_new_tokens=max_new_tokens,
        greedy=True,
    )
    rewards = [task.reward(t, e, f) for t, e, f in zip(out.texts, examples, out.finished)]
    return sum(rewards) / len(rewards)


@torch.enable_grad()  # whatever the caller's grad mode (a reading under no_grad may build the checkpoint first)
def warm_start(model, tokenizer, task: Task, cfg: ModelConfig) -> tuple[int, float]:
    """Supervised phase on partly correct demonstrations, stopped near a target held-out accuracy.

    A `noise` share of the demonstrations has its final answer replaced by random digits of the same length, so
    the model learns the format and part of the skill, and RL has room to improve. Accuracy rises in a sharp
    transition, so at the first evaluation reaching the target the model keeps whichever of that checkpoint and
    the previous one is closer to the target. A task whose accuracy never reaches the target (a user's JSONL file
    for a model this small) keeps the most accurate checkpoint evaluated, not the last: supervised training past
    its best overfits a few hundred demonstrations (a 300-line file: 0.15 at step 520, 0.05 at step 600). Returns
    (steps, accuracy) of the kept checkpoint.
    """
    ws = cfg.warm_start
    rng = random.Random(cfg.init_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr)
    model.eval()
    previous = (0, greedy_accuracy(model, tokenizer, task, task.max_new_tokens), copy.deepcopy(model.state_dict()))
    best = previous
    model.train()
    bars = progress.bars_wanted() and log.isEnabledFor(logging.INFO)
    with progress.Ticker(ws.steps, "warm start", "steps", bars, log) as ticker:
        ticker.note = f"held-out accuracy {previous[1]:.3f} (target {ws.target_accuracy:g})"
        for step in range(1, ws.steps + 1):
            batch = rng.sample(task.train, min(ws.batch_size, len(task.train)))
            completions = []
            for ex in batch:
                demo, tail = ex.demonstration, task.answer_tail(ex)
                if rng.random() < ws.noise and demo.endswith(tail):
                    wrong = "".join(rng.choice("0123456789") for _ in tail)
                    demo = demo[: len(demo) - len(tail)] + wrong
                completions.append(demo)
            prompt_ids = encode_prompts(tokenizer, [e.prompt for e in batch])
            completion_ids = [ids[1:] + [tokenizer.eos_token_id] for ids in encode_prompts(tokenizer, completions)]
            # the padded scorer, as when every shipped study's checkpoint was built: the same config, the same weights
            logp, mask = score(model, prompt_ids, completion_ids, pad_id=tokenizer.pad_token_id)
            loss = -(logp.sum() / mask.sum())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if not (step % ws.eval_every == 0 or step == ws.steps):
                ticker.update()
                continue
            model.eval()
            acc = greedy_accuracy(model, tokenizer, task, task.max_new_tokens)
            model.train()
            ticker.update(note=f"loss {loss.item():.3f}, held-out accuracy {acc:.3f} (target {ws.target_accuracy:g})")
            if acc >= ws.target_accuracy:
                if abs(previous[1] - ws.target_accuracy) < abs(acc - ws.target_accuracy):
                    model.load_state_dict(previous[2])
                    return previous[0], previous[1]
                return step, acc
            previous = (step, acc, copy.deepcopy(model.state_dict()))
            best = previous if acc >= best[1] else best  # ties: the later (it has learned the format at least)
    model.load_state_dict(best[2])
    return best[0], best[1]


SHIPPED = Path(__file__).with_name("embedded")
"""The embedded checkpoints of the built-in tasks at their default settings, shipped with the project (built by
`make embedded-checkpoints`, i.e. `python -m workbench.trial.checkpoint`): a fresh machine starts RL at once
instead of warm-starting for a minute or two, and every machine starts from the same weights (a checkpoint built
on another CPU may differ in its last bits, and 600 warm-start steps turn that into another starting point)."""
BUILT_IN_TASKS = ("arithmetic", "split")


def ensure_embedded_checkpoint(model_cfg: ModelConfig, task_cfg: TaskConfig, task: Task) -> Path:
    """The embedded warm-started checkpoint directory: the shipped one where its key matches, else built once in
    the cache (under a lock, atomically) if needed."""
    name = f"tiny-llama-{embedded_key(model_cfg, task_cfg)}"
    if (SHIPPED / name / "warm_start.json").is_file():
        _hint_if_unlearned(SHIPPED / name, task_cfg.name)
        return SHIPPED / name
    final = cache_root(model_cfg) / "models" / name

    def build(tmp: Path) -> None:
        log.info(
            f"building the embedded tiny Llama and its warm start in {final} (once per machine and model, task and"
            f" warm-start setting): up to {model_cfg.warm_start.steps} supervised steps, until the held-out accuracy"
            f" reaches {model_cfg.warm_start.target_accuracy:g}"
        )
        torch.manual_seed(model_cfg.init_seed)
        tokenizer = build_char_tokenizer(_file_characters(task))
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
        threads = torch.get_num_threads()
        torch.set_num_threads(WARM_START_THREADS)
        try:
            steps, acc = warm_start(model, tokenizer, task, model_cfg)
        finally:
            torch.set_num_threads(threads)
        model.eval()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        n_params = sum(p.numel() for p in model.parameters())
        (tmp / "warm_start.json").write_text(json.dumps({"steps": steps, "accuracy": acc, "params": n_params}))
        log.info(f"warm start done: {steps} steps, greedy held-out accuracy {acc:.3f}")

    path = build_once(final, build, ready=lambda p: (p / "warm_start.json").is_file())
    _hint_if_unlearned(path, task_cfg.name)
    return path


def _file_characters(task: Task) -> str:
    """Every character of a task's prompts and demonstrations (a user's file may hold more than ASCII)."""
    if task.name != "jsonl":
        return ""  # the built-in tasks are ASCII: their checkpoints keep the vocabulary they were built with
    return "".join(sorted({c for e in [*task.train, *task.eval] for c in e.prompt + e.demonstration}))


@functools.lru_cache(maxsize=8)
def _hint_if_unlearned(path: Path, task_name: str) -> None:
    """Print the warm start's accuracy once per process, and what to change when it is 0: GRPO on a policy that
    never answers correctly has no reward to learn from."""
    info = json.loads((path / "warm_start.json").read_text())
    log.info(f"embedded model: warm start {info['steps']} steps, greedy held-out accuracy {info['accuracy']:.3f}")
    if info["accuracy"] == 0:
        log.warning(
            f"task {task_name}: the embedded tiny model answers no held-out example after its warm start, so RL gets no"
            " reward: set model.path to a real model, or raise model.warm_start.steps and the model's size"
            " (model.hidden_size, model.num_layers)"
        )


def ship_built_in_checkpoints() -> list[Path]:
    """Build the built-in tasks' checkpoints at their default settings and copy them to `SHIPPED` (what `make
    embedded-checkpoints` runs after a change to the model, the warm start or `CHECKPOINT_FORMAT`)."""
    import shutil

    from workbench.config import build_config
    from workbench.trial.tasks import load_task

    shipped = []
    for name in BUILT_IN_TASKS:
        cfg = build_config({"task": {"name": name}})
        target = SHIPPED / f"tiny-llama-{embedded_key(cfg.model, cfg.task)}"
        built = ensure_embedded_checkpoint(cfg.model, cfg.task, load_task(cfg.task))  # the shipped one, or a build
        if built != target:
            shutil.copytree(built, target, ignore=shutil.ignore_patterns(".*"))
        shipped.append(target)
    for stale in SHIPPED.glob("tiny-llama-*"):
        if stale not in shipped:
            shutil.rmtree(stale)
    return shipped


if __name__ == "__main__":
    from workbench import progress

    progress.setup_logging()
    for path in ship_built_in_checkpoints():
        print(path)
