"""The project's trial step and evaluation with each decoder (`generation.decode`), side by side in one run.

One policy (the embedded default model, default task, B = 128 rollouts as 16 prompts x 8), one optimizer; every
round runs, for each decoder in turn, one GRPO step (generate the batch, train on it) and, every
`--eval-every` rounds, one held-out evaluation (greedy pass@1 on 500 prompts plus pass@k), so a busy machine slows
every decoder alike. Reports median seconds per step (generation / training) and per evaluation, and the paired
ratio of each decoder to `hf` (median over rounds of the per-round ratios). The first rounds (compilation, cache
loading, allocator warm-up) are not counted; the compile time is reported on its own.

    .venv/bin/python benchmarks/trial_step.py [--rounds 12] [--warmup 2] [--threads 2] [--decoders hf static compiled]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from workbench.backends.decode import make_sampler  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.cache import cache_root  # noqa: E402
from workbench.trial.evaluation import Evaluator  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import make_optimizer, train_step  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=3)
    ap.add_argument("--decoders", nargs="+", default=["hf", "static", "compiled"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config({})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    samplers = {}
    for name in args.decoders:
        samplers[name] = make_sampler(policy.model, name, cache_root(cfg.model))
    opt = make_optimizer(policy.model, cfg.lr)
    prompts = PromptStream(len(task.train), 0)
    evaluator = Evaluator(
        task,
        policy.tokenizer,
        k=cfg.eval.k,
        pass_k_prompts=cfg.eval.pass_k_prompts,
        max_new_tokens=policy.max_new_tokens,
        temperature=policy.temperature,
        seed=0,
    )
    gen = {n: [] for n in samplers}
    train = {n: [] for n in samplers}
    evals = {n: [] for n in samplers}
    first_call = {}
    generator = torch.Generator().manual_seed(0)
    for r in range(args.warmup + args.rounds):
        for name, fn in samplers.items():
            policy.sample = fn
            t0 = time.perf_counter()
            fresh, _ = generate_groups(
                policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, r, generator, 0
            )
            t1 = time.perf_counter()
            train_step(policy, opt, fresh, cfg, r)
            t2 = time.perf_counter()
            if r == 0:
                first_call[name] = t1 - t0
            if r >= args.warmup:
                gen[name].append(t1 - t0)
                train[name].append(t2 - t1)
            if r % args.eval_every == 0:
                evaluator.sampler = fn
                t3 = time.perf_counter()
                evaluator(policy.model)
                if r >= args.warmup:
                    evals[name].append(time.perf_counter() - t3)
    med = statistics.median
    print(
        f"# torch {torch.__version__}, {args.threads} threads, B {cfg.batch_size} = {cfg.batch_size // cfg.group_size} x {cfg.group_size},"
        f" {args.rounds} timed rounds after {args.warmup} warm-up"
    )
    print(
        "| decoder | first generation (s, incl. compile) | gen s/step | train s/step | step s | eval s | step speed-up vs hf [min, max] | eval speed-up vs hf |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name in samplers:
        steps = [g + t for g, t in zip(gen[name], train[name])]
        row = {
            "decoder": name,
            "first_generation_s": first_call[name],
            "gen_s": med(gen[name]),
            "train_s": med(train[name]),
            "step_s": med(steps),
            "eval_s": med(evals[name]) if evals[name] else None,
        }
        if "hf" in samplers:
            base = [g + t for g, t in zip(gen["hf"], train["hf"])]
            ratios = [b / s for b, s in zip(base, steps)]
            row["step_speedup"] = (med(ratios), min(ratios), max(ratios))
            row["eval_speedup"] = med([b / s for b, s in zip(evals["hf"], evals[name])]) if evals[name] else None
        rows.append(row)
        sp = row.get("step_speedup", (float("nan"),) * 3)
        print(
            f"| {name} | {row['first_generation_s']:.2f} | {row['gen_s']:.3f} | {row['train_s']:.3f} | {row['step_s']:.3f} |"
            f" {row['eval_s'] or float('nan'):.3f} | {sp[0]:.2f} [{sp[1]:.2f}, {sp[2]:.2f}] | {row.get('eval_speedup') or float('nan'):.2f} |"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
