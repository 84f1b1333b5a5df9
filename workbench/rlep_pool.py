"""RLEP's experience pool (replay-papers §3.2, phases 0 and 1): verified successes of a seed policy.

Phase 0 trains a seed policy: on the embedded default, `seed_rl_steps` on-policy GRPO steps from the warm start
(RLEP trained 400 DAPO steps). Phase 1 samples `samples` completions per prompt at `temperature` for the first
`n_prompts` train prompts, keeps the verified-correct ones, and writes the prompts with at least `min_correct` of
them (RLEP: 64 samples, temperature 0.7, >= 2 correct paths). Duplicates are kept unless `distinct`: on the
built-in arithmetic task the worked scratchpad makes every correct completion of a prompt the same string, so a
pool of distinct successes would hold one per prompt at most. Phase 2 is the `rlep` strategy.

The pool is a JSONL file, one prompt per line: `{"prompt": "...", "completions": ["...", ...]}`. Completions are
stored as text and re-tokenised on load with EOS appended, as RLEP stores response strings. A built pool is cached
next to the embedded checkpoint, keyed by everything that shapes it, and built once under a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from workbench.config import ConfigError


def pool_key(cfg, checkpoint: str) -> str:
    r = cfg.replay.rlep
    spec = {
        "format": 1,
        "checkpoint": checkpoint,
        "task": cfg.task.model_dump(),
        "collect": r.model_dump(include={"n_prompts", "seed_rl_steps", "samples", "temperature", "min_correct", "max_per_prompt", "distinct"}),
        "seed_run": {"batch_size": cfg.batch_size, "group_size": cfg.group_size, "lr": cfg.lr, "objective": cfg.objective.model_dump(),
                     "temperature": cfg.generation.temperature, "max_new_tokens": cfg.generation.max_new_tokens},
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def ensure_pool(cfg, task, log=lambda msg: None) -> Path:
    """The cached pool for this config (built once, atomically, under a lock); its path."""
    from workbench.policy import _cache_root, ensure_embedded_checkpoint

    checkpoint = cfg.model.path or str(ensure_embedded_checkpoint(cfg.model, cfg.task, task, log=log))
    root = _cache_root(cfg.model) / "rlep"
    final = root / f"pool-{pool_key(cfg, str(checkpoint))}.jsonl"
    if final.is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_file():
            return final
        build_pool(cfg, task, final, log)
        return final


def build_pool(cfg, task, out: Path, log=lambda msg: None) -> dict[str, float]:
    """Phase 0 (short on-policy RL from the model) and phase 1 (collect verified successes) into `out`."""
    from workbench.generation import encode_prompts, sample
    from workbench.trainer import Policy, PromptStream, generate_groups, train_step

    r = cfg.replay.rlep
    seed_cfg = cfg.model_copy(update={"replay": cfg.replay.model_copy(update={"strategy": "uniform", "ratio": 1.0, "capacity": None})})
    torch.manual_seed(0)
    policy = Policy(seed_cfg, task, log)
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=cfg.lr)
    generator = torch.Generator(device=policy.device).manual_seed(0)
    stream = PromptStream(len(task.train), seed=0)
    groups = max(1, cfg.batch_size // cfg.group_size)
    uid = 0
    for step in range(r.seed_rl_steps):
        fresh, _ = generate_groups(policy, task, stream.take(groups), cfg.group_size, step, generator, uid)
        uid += len(fresh)
        train_step(policy, optimizer, fresh, seed_cfg, step)
        if (step + 1) % 20 == 0 or step + 1 == r.seed_rl_steps:
            log(f"rlep pool: seed run step {step + 1}/{r.seed_rl_steps}, train reward {np.mean([x.reward for x in fresh]):.3f}")

    policy.model.eval()
    n = min(r.n_prompts, len(task.train))
    lines, kept, correct_total = [], 0, 0
    chunk = max(1, 512 // r.samples)
    for start in range(0, n, chunk):
        examples = task.train[start : start + chunk]
        ids = [p for p in encode_prompts(policy.tokenizer, [e.prompt for e in examples]) for _ in range(r.samples)]
        out_s = sample(policy.model, policy.tokenizer, ids, max_new_tokens=policy.max_new_tokens, temperature=r.temperature, generator=generator)
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
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".pool-")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    os.replace(tmp, out)
    summary = {"prompts": n, "pooled_prompts": kept, "successes": correct_total}
    log(f"rlep pool: {kept}/{n} prompts with >= {r.min_correct} successes ({correct_total} in all) written to {out}")
    return summary


def load_pool(path: str | Path, task, tokenizer, max_new_tokens: int) -> dict[int, list[list[int]]]:
    """Pool file -> {train prompt index: [completion token ids (EOS appended)]}; errors name file:line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"replay.rlep.pool: no such file {p}")
    index = {e.prompt: i for i, e in enumerate(task.train)}
    pool: dict[int, list[list[int]]] = {}
    for n, line in enumerate(p.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{p}:{n}: invalid JSON ({err.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("completions"), list) \
                or not all(isinstance(c, str) for c in row["completions"]):
            raise ConfigError(f"{p}:{n}: expected {{\"prompt\": str, \"completions\": [str, ...]}}")
        i = index.get(row["prompt"])
        if i is None:
            continue  # a prompt outside this task's train split: not used
        seqs = []
        for c in row["completions"]:
            ids = list(tokenizer(c, add_special_tokens=False)["input_ids"])[: max_new_tokens - 1] + [tokenizer.eos_token_id]
            seqs.append(ids)
        pool.setdefault(i, []).extend(seqs)
    return pool
