"""The project's trial step against TRL's GRPOTrainer on identical work, alternating processes, paired ratios.

Both sides: the embedded default checkpoint (loaded with `from_pretrained`), the default task's prompts and reward,
B = 128 completions per step as 16 prompts x 8, the task's completion limit, temperature 1, the default learning
rate, on-policy (one optimizer step per batch, no KL term, no reference model), fp32 on CPU, gradient
checkpointing off. Each process runs `--warmup` steps, then `--steps` timed ones, and reports its median seconds
per step, its launch-to-first-step time and its peak RSS. Process pairs alternate which side goes first, so a busy
machine slows both alike; the result is the median over pairs of TRL's median step over the project's.

Runs in the benchmark environment (TRL is never installed in the main one):

    make bench-env && .venv-bench/bin/python benchmarks/peer_trl.py [--pairs 4] [--steps 12] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _setup(threads: int):
    import torch

    from workbench.config import build_config
    from workbench.trial.checkpoint import ensure_embedded_checkpoint
    from workbench.trial.tasks import load_task

    torch.set_num_threads(threads)
    cfg = build_config({})
    task = load_task(cfg.task)
    return cfg, task, str(ensure_embedded_checkpoint(cfg.model, cfg.task, task))


def run_project(args) -> dict:
    import torch

    from workbench.trial.policy import Policy
    from workbench.trial.rollouts import PromptStream, generate_groups
    from workbench.trial.step import make_optimizer, train_step

    cfg, task, _ = _setup(args.threads)
    cfg.generation.decode = args.decode
    policy = Policy(cfg, task)
    opt = make_optimizer(policy.model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    times, first = [], None
    for step in range(args.warmup + args.steps):
        t = time.perf_counter()
        fresh, _ = generate_groups(
            policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0
        )
        train_step(policy, opt, fresh, cfg, step)
        if first is None:
            first = time.perf_counter() - T0
        if step >= args.warmup:
            times.append(time.perf_counter() - t)
    return {"side": "project", "step_s": statistics.median(times), "launch_to_first_step_s": first, "times": times}


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.trial.tasks import arithmetic_final_answer

    cfg, task, path = _setup(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    n_prompts = (args.warmup + args.steps) * cfg.batch_size // cfg.group_size
    examples = task.train[:n_prompts]
    data = Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})

    def reward(completions, answer, **_):
        return [float(arithmetic_final_answer(c) == a) for c, a in zip(completions, answer)]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.first, self.t = [], None, 0.0

        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            if self.first is None:
                self.first = time.perf_counter() - T0
            self.times.append(time.perf_counter() - self.t)

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=cfg.batch_size,
            num_generations=cfg.group_size,
            max_completion_length=task.max_new_tokens,
            temperature=cfg.generation.temperature,
            learning_rate=cfg.lr,
            beta=0.0,
            num_iterations=1,
            max_steps=args.warmup + args.steps,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_grad_norm=cfg.grad_clip,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=config,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[clock],
        )
        trainer.train()
    times = clock.times[args.warmup :]
    return {"side": "trl", "step_s": statistics.median(times), "launch_to_first_step_s": clock.first, "times": times}


def child(args) -> None:
    result = run_project(args) if args.side == "project" else run_trl(args)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", default="auto", help="the project's generation.decode")
    ap.add_argument("--side", choices=["project", "trl"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return child(args)
    results = {"project": [], "trl": []}
    for pair in range(args.pairs):
        for side in ["project", "trl"] if pair % 2 == 0 else ["trl", "project"]:
            cmd = [
                sys.executable,
                __file__,
                "--side",
                side,
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--threads",
                str(args.threads),
                "--decode",
                args.decode,
            ]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"peer_trl: the {side} process failed:\n{proc.stderr[-3000:]}")
            results[side].append(json.loads(line[len("RESULT ") :]))
            r = results[side][-1]
            print(
                f"pair {pair} {side:7s}: {r['step_s']:.3f} s/step, first step at {r['launch_to_first_step_s']:.1f} s,"
                f" peak RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    ratios = [t["step_s"] / p["step_s"] for p, t in zip(results["project"], results["trl"])]
    med = statistics.median
    print(
        f"\n# {args.pairs} process pairs x {args.steps} timed steps ({args.warmup} warm-up), {args.threads} threads,"
        f" project decode {args.decode}"
    )
    print("| | median s/step | launch to first step (s) | peak RSS (MB) |")
    print("|---|---|---|---|")
    for side in ("project", "trl"):
        rs = results[side]
        print(
            f"| {side} | {med(r['step_s'] for r in rs):.3f} | {med(r['launch_to_first_step_s'] for r in rs):.1f} |"
            f" {med(r['peak_rss_mb'] for r in rs):.0f} |"
        )
    print(
        f"TRL / project step time, median of paired ratios: {med(ratios):.2f} [min {min(ratios):.2f}, max {max(ratios):.2f}]"
    )
    print(
        json.dumps(
            {
                "ratios": ratios,
                **{k: [{kk: vv for kk, vv in r.items() if kk != "times"} for r in v] for k, v in results.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
