"""Measure mu = (generation seconds per rollout) / (training seconds per rollout) on this machine.

For each task size and fresh batch, runs a few real GRPO steps of the embedded model (generate B rollouts, one
optimizer step on them) and reports per-rollout seconds of each phase, side by side, in one run.

    .venv/bin/python benchmarks/mu_profile.py [--steps 6] [--threads 2] [--digits 2 3] [--batch 32 64 128]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

from workbench.config import build_config  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import make_optimizer, train_step  # noqa: E402


def profile(digits: int, batch: int, steps: int) -> dict:
    cfg = build_config({"batch_size": batch, "task": {"digits": digits}})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    opt = make_optimizer(policy.model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    t_gen = t_train = 0.0
    tokens = 0
    for step in range(steps + 1):  # step 0 warms up allocators and is not counted
        t0 = time.perf_counter()
        fresh, out = generate_groups(policy, task, prompts.take(batch // cfg.group_size), cfg.group_size, step, gen, 0)
        t1 = time.perf_counter()
        train_step(policy, opt, fresh, cfg, step)
        t2 = time.perf_counter()
        if step:
            t_gen, t_train, tokens = t_gen + t1 - t0, t_train + t2 - t1, tokens + out.generated_tokens
    n = steps * batch
    return {
        "digits": digits,
        "batch": batch,
        "completion_tokens": round(tokens / n, 1),
        "gen_ms_per_rollout": round(1000 * t_gen / n, 3),
        "train_ms_per_rollout": round(1000 * t_train / n, 3),
        "mu": round(t_gen / t_train, 3),
        "step_seconds": round((t_gen + t_train) / steps, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--digits", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 64, 128])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} threads, {args.steps} timed steps per row")
    print("| digits | B = R | completion tokens | gen ms/rollout | train ms/rollout | mu | s/step |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for d in args.digits:
        for b in args.batch:
            r = profile(d, b, args.steps)
            rows.append(r)
            print(
                f"| {d} | {b} | {r['completion_tokens']} | {r['gen_ms_per_rollout']} | {r['train_ms_per_rollout']} | {r['mu']} | {r['step_seconds']} |",
                flush=True,
            )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
