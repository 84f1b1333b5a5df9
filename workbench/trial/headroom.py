"""Headroom: what the checkpoint a trial starts from reads at every decoding temperature, before any training.

A target that a decoding trick reaches with no training measures sharpening, not learning: the default warm start
reads 0.037 on `demo_prob` at T 1 and 0.257 at T 0.5, so a `demo_prob` target of 0.17 was "reached" by decoding
cooler. A target on accuracy has headroom when it exceeds the start's greedy accuracy (the T = 0 point) and its
sampled pass@1 at every temperature in (0, 1]: `readings` measures them, `has_headroom` is the rule.
"""

from __future__ import annotations

import torch

from workbench.backends.hf import encode_prompts, sample
from workbench.config import TrialConfig
from workbench.seeds import evaluation as evaluation_seed
from workbench.trial.model_sources import model_source, starting_checkpoint
from workbench.trial.policy import resolve_dtype
from workbench.trial.tasks import Task, load_task

TEMPERATURES = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The decoding temperatures read: 0 is greedy."""


def readings(cfg: TrialConfig, temperatures=TEMPERATURES, k: int = 2) -> dict[float, float]:
    """Held-out accuracy of the trial's starting checkpoint (from its model source, `model.source`) at each
    temperature: greedy at 0, else the mean reward of `k` samples per prompt (sampled pass@1)."""
    task = load_task(cfg.task)
    path = starting_checkpoint(cfg, task)  # with gradients on: a source may train it first (the embedded warm start)
    # loaded as a trial loads it (its source's `load`, in the trainer's weights' dtype), on the CPU
    model, tokenizer = model_source(cfg.model).load(path, torch.device("cpu"), resolve_dtype(cfg.model.dtype))
    model.eval()
    prompts = encode_prompts(tokenizer, [e.prompt for e in task.eval], chat=cfg.task.chat_template)
    generator = torch.Generator().manual_seed(evaluation_seed(cfg.seed))
    return {t: _accuracy(model, tokenizer, task, prompts, t, 1 if t == 0 else k, generator) for t in temperatures}


@torch.no_grad()
def _accuracy(model, tokenizer, task: Task, prompts, t: float, reps: int, generator: torch.Generator) -> float:
    """Mean held-out reward over `reps` passes at temperature `t` (greedy at 0)."""
    total = 0.0
    for _ in range(reps):
        done = sample(
            model,
            tokenizer,
            prompts,
            max_new_tokens=task.max_new_tokens,
            greedy=t == 0,
            **({} if t == 0 else {"temperature": t, "generator": generator}),
        )
        total += sum(task.reward(x, e, f) for x, e, f in zip(done.texts, task.eval, done.finished))
    return total / (reps * len(task.eval))


def has_headroom(target: float, start: dict[float, float]) -> bool:
    """True when no decoding temperature reaches `target` from the starting checkpoint."""
    return max(start.values()) < target
