"""RLEP's experience pool (docs/strategies/rlep.md, phases 0 and 1): verified successes of a seed policy.

Phase 0 trains a seed policy: on the embedded default, `seed_rl_steps` on-policy GRPO steps from the warm start
(RLEP trained 400 DAPO steps). Phase 1 samples `samples` completions per prompt at `temperature` for the first
`n_prompts` train prompts, keeps the verified-correct ones, and writes the prompts with at least `min_correct` of
them (RLEP: 64 samples, temperature 0.7, >= 2 correct paths). Duplicates are kept unless `distinct`: on the
built-in arithmetic task the worked scratchpad makes every correct completion of a prompt the same string, so a
pool of distinct successes would hold one per prompt at most. Phase 2 is the `rlep` strategy.

The pool is a JSONL file (read by the `rlep` strategy), one prompt per line: `{"prompt": "...", "completions": ["...", ...]}`. Completions are
stored as text and re-tokenised on load with EOS appended, as RLEP stores response strings. A built pool is cached
next to the embedded checkpoint, keyed by everything that shapes it, and built once (`cache.build_once`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import torch

from workbench import seeds
from workbench.config import TrialConfig, build_config
from workbench.cache import build_once, cache_root
from workbench.trial.model_sources import starting_checkpoint
from workbench.trial.policy import Policy
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import make_optimizer, train_step
from workbench.trial.tasks import Task

log = logging.getLogger(__name__)


def pool_key(cfg: TrialConfig, checkpoint: str) -> str:
    """A hash of everything that shapes the pool built for `cfg` from `checkpoint`."""
    r = cfg.replay.section("rlep")
    spec = {
        "format": 1,
        "checkpoint": checkpoint,
        "task": cfg.task.model_dump(),
        "collect": r.model_dump(
            include={
                "n_prompts",
                "seed_rl_steps",
                "samples",
                "temperature",
                "min_correct",
                "max_per_prompt",
                "distinct",
            }
        ),
        "seed_run": {
            "batch_size": cfg.batch_size,
            "group_size": cfg.group_size,
            "lr": cfg.lr,
            "objective": cfg.objective.model_dump(),
            "temperature": cfg.generation.temperature,
            "max_new_tokens": cfg.generation.max_new_tokens,
        },
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def ensure_pool(cfg: TrialConfig, task: Task) -> Path:
    """The cached pool for this config (built once, atomically, under a lock); its path."""
    checkpoint = str(starting_checkpoint(cfg, task))  # the model the seed run starts from, from its source
    final = cache_root(cfg.model) / "rlep" / f"pool-{pool_key(cfg, checkpoint)}.jsonl"
    return build_once(final, lambda tmp: build_pool(cfg, task, tmp))


def seed_config(cfg: TrialConfig) -> TrialConfig:
    """The seed run's config: the trial's, trained on-policy (uniform, ratio 1, capacity = batch size)."""
    data = cfg.model_dump()
    data["replay"].update({"strategy": "uniform", "ratio": 1.0, "capacity": None})
    return build_config(data)


def build_pool(cfg: TrialConfig, task: Task, out: Path) -> dict[str, float]:
    """Phase 0 (short on-policy RL from the model) and phase 1 (collect verified successes) into the file `out`."""
    r = cfg.replay.section("rlep")
    seed_cfg = seed_config(cfg)
    torch.manual_seed(seeds.RLEP_POOL)
    policy = Policy(seed_cfg, task)
    optimizer = make_optimizer(policy.model, cfg.lr)
    generator = torch.Generator(device=policy.device).manual_seed(seeds.rollout_sampler(seeds.RLEP_POOL))
    stream = PromptStream(len(task.train), seed=seeds.RLEP_POOL)
    groups = max(1, cfg.batch_size // cfg.group_size)
    uid = 0
    for step in range(r.seed_rl_steps):
        fresh, _ = generate_groups(policy, task, stream.take(groups), cfg.group_size, step, generator, uid)
        uid += len(fresh)
        train_step(policy, optimizer, fresh, seed_cfg, step)
        if (step + 1) % 20 == 0 or step + 1 == r.seed_rl_steps:
            log.info(
                f"rlep pool: seed run step {step + 1}/{r.seed_rl_steps}, train reward {np.mean([x.reward for x in fresh]):.3f}"
            )

    policy.model.eval()
    n = min(r.n_prompts, len(task.train))
    lines, kept, correct_total = [], 0, 0
    chunk = max(1, 512 // r.samples)
    for start in range(0, n, chunk):
        examples = task.train[start : start + chunk]
        ids = [p for p in policy.encode([e.prompt for e in examples]) for _ in range(r.samples)]
        out_s = policy.sample(
            policy.tokenizer, ids, max_new_tokens=policy.max_new_tokens, temperature=r.temperature, generator=generator
        )
        for j, ex in enumerate(examples):
            found: list[str] = []
            for i in range(j * r.samples, (j + 1) * r.samples):
                text = out_s.texts[i]
                if task.reward(text, ex, out_s.finished[i]) >= 1.0 and not (r.distinct and text in found):
                    found.append(text)
            correct_total += len(found)
            if len(found) >= r.min_correct:
                lines.append(json.dumps({"prompt": ex.prompt, "completions": found[: r.max_per_prompt]}))
                kept += 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + ("\n" if lines else ""))
    log.info(
        f"rlep pool: {kept}/{n} prompts with >= {r.min_correct} successes ({correct_total} in all) written to {out}"
    )
    return {"prompts": n, "pooled_prompts": kept, "successes": correct_total}
