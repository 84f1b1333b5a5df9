"""One training step of SmolLM2-135M (word_problems, groups of 8) under torch.profiler, then one generation: where
the time outside the GEMMs goes. Shares are what it is for: run beside other work, its seconds are not the step's.

    python benchmarks/profile_real_step.py [--batch 32] [--precision bf16-autocast|fp32] [--decode static]
        [--micro-batch N] [--compile]   (models/smollm2-135m-instruct in place)
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from workbench.config import build_config
from workbench.trial.policy import Policy
from workbench.trial.rollouts import generate_groups
from workbench.trial.step import make_optimizer, train_step
from workbench.trial.tasks import load_task

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--precision", choices=["bf16-autocast", "fp32"], default="bf16-autocast")
parser.add_argument("--decode", default="static")
parser.add_argument("--micro-batch", type=int, default=None)
parser.add_argument("--compile", action="store_true", help="train.compile: the packed layers under torch.compile")
parser.add_argument("--rows", type=int, default=25, help="operators listed per table")
args = parser.parse_args()

torch.set_num_threads(2)
GROUP = 8
train = {"autocast": "bfloat16" if args.precision == "bf16-autocast" else "off"}
if args.micro_batch:
    train["micro_batch_size"] = args.micro_batch
if args.compile:
    train["compile"] = True
cfg = build_config(
    {
        "model": {"path": "models/smollm2-135m-instruct", "dtype": "float32"},
        "task": {"name": "word_problems", "difficulty": 1, "chat_template": True, "n_eval": 8},
        "batch_size": args.batch,
        "group_size": GROUP,
        "generation": {"decode": args.decode, "temperature": 0.7},
        "train": train,
    }
)
task = load_task(cfg.task)
policy = Policy(cfg, task)
opt = make_optimizer(policy.model, cfg.lr)
gen = torch.Generator().manual_seed(0)
per_step = args.batch // GROUP


def prompts(step: int) -> list[int]:
    """The train prompts of a step, in order."""
    return [step * per_step + i for i in range(per_step)]


for step in range(2):
    fresh, _ = generate_groups(policy, task, prompts(step), cfg.group_size, step, gen, 0)
    train_step(policy, opt, fresh, cfg, step)
fresh, _ = generate_groups(policy, task, prompts(2), cfg.group_size, 2, gen, 0)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = time.perf_counter()
    train_step(policy, opt, fresh, cfg, 2)
    print("train step", time.perf_counter() - t)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = time.perf_counter()
    generate_groups(policy, task, prompts(3), cfg.group_size, 3, gen, 0)
    print("generate", time.perf_counter() - t)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
