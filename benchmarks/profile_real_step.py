"""One bf16-autocast training step of SmolLM2-135M (B 32 = 4 x 8, word_problems) under torch.profiler, then one
generation: where the time outside the GEMMs goes.

    python benchmarks/profile_real_step.py   (models/smollm2-135m-instruct in place)
"""

import time
import torch
from torch.profiler import profile, ProfilerActivity
from workbench.config import build_config
from workbench.trial.tasks import load_task
from workbench.trial.policy import Policy
from workbench.trial.rollouts import generate_groups
from workbench.trial.step import make_optimizer, train_step

torch.set_num_threads(2)
cfg = build_config(
    {
        "model": {"path": "models/smollm2-135m-instruct"},
        "task": {"name": "word_problems", "difficulty": 1, "chat_template": True, "n_eval": 8},
        "batch_size": 32,
        "group_size": 8,
        "generation": {"decode": "static", "temperature": 0.7},
        "train": {"autocast": "bfloat16"},
    }
)
task = load_task(cfg.task)
policy = Policy(cfg, task)
opt = make_optimizer(policy.model, cfg.lr)
gen = torch.Generator().manual_seed(0)


def prompts(step: int) -> list[int]:
    """The train prompts of a step: 4 a step, in order."""
    return [step * 4 + i for i in range(4)]


for step in range(2):
    fresh, _ = generate_groups(policy, task, prompts(step), cfg.group_size, step, gen, 0)
    train_step(policy, opt, fresh, cfg, step)
fresh, _ = generate_groups(policy, task, prompts(2), cfg.group_size, 2, gen, 0)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = time.perf_counter()
    train_step(policy, opt, fresh, cfg, 2)
    print("train step", time.perf_counter() - t)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = time.perf_counter()
    generate_groups(policy, task, prompts(3), cfg.group_size, 3, gen, 0)
    print("generate", time.perf_counter() - t)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
