"""The trial step with glibc's allocator as it comes against `allocator.keep_freed_memory`, side by side in one run.

The allocator is a process's setting, so each measurement is its own process: `--pairs` pairs of child processes,
alternating which setting runs first, each generating and training `--steps` default steps (B = 128 as 16 prompts
x 8, the embedded model, 2 threads) after `--warmup` steps, from the same weights and seed. Reports, per setting,
the median seconds of generation and of training per step and the peak RSS, and the median over pairs of the
paired ratios default / tuned (above 1: the tuned allocator is faster).

    .venv/bin/python benchmarks/allocator.py [--pairs 4] [--steps 10] [--warmup 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(args) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import resource

    import torch

    from workbench.backends.allocator import keep_freed_memory
    from workbench.config import build_config
    from workbench.trial.policy import Policy
    from workbench.trial.rollouts import PromptStream, generate_groups
    from workbench.trial.step import make_optimizer, train_step
    from workbench.trial.tasks import load_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = build_config({})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    opt = make_optimizer(policy.model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    gen_s, train_s = [], []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        fresh, _ = generate_groups(
            policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0
        )
        t1 = time.perf_counter()
        train_step(policy, opt, fresh, cfg, step)
        t2 = time.perf_counter()
        if step >= args.warmup:
            gen_s.append(t1 - t0)
            train_s.append(t2 - t1)
    print(
        json.dumps(
            {
                "tuned": keep_freed_memory(),
                "generation_s": statistics.median(gen_s),
                "training_s": statistics.median(train_s),
                "step_s": statistics.median(g + t for g, t in zip(gen_s, train_s)),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def run(setting: str, args) -> dict:
    env = {**os.environ}
    env.pop("WORKBENCH_MALLOC", None)
    if setting == "default":
        env["WORKBENCH_MALLOC"] = "default"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["tuned"] != (setting == "tuned"):
        raise SystemExit(f"the {setting} child reported tuned={result['tuned']}: is this glibc?")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    results: dict[str, list[dict]] = {"default": [], "tuned": []}
    for i in range(args.pairs):
        for setting in ("default", "tuned") if i % 2 == 0 else ("tuned", "default"):
            results[setting].append(run(setting, args))
    med = statistics.median
    summary = {
        s: {k: round(med(r[k] for r in rs), 4) for k in ("generation_s", "training_s", "step_s", "peak_rss_mb")}
        for s, rs in results.items()
    }
    ratios = {
        k: [d[k] / t[k] for d, t in zip(results["default"], results["tuned"])]
        for k in ("generation_s", "training_s", "step_s")
    }
    summary["default_over_tuned"] = {
        k: {"median": round(med(v), 3), "min": round(min(v), 3), "max": round(max(v), 3)} for k, v in ratios.items()
    }
    print(
        f"# {args.pairs} pairs of processes, {args.steps} steps each after {args.warmup} warm-up, {args.threads} threads"
    )
    for s in ("default", "tuned"):
        r = summary[s]
        print(
            f"{s:>8}: generation {r['generation_s']:.4f} s, training {r['training_s']:.4f} s, step {r['step_s']:.4f} s, peak RSS {r['peak_rss_mb']:.0f} MB"
        )
    for k, v in summary["default_over_tuned"].items():
        print(f"default / tuned, {k[:-2]}: {v['median']:.3f} (pairs {v['min']:.3f} to {v['max']:.3f})")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
