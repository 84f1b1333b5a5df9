"""Greedy held-out decoding of the real model in float32 and under bf16 autocast, alternating, on this CPU.

    python benchmarks/real_model_precision.py MODEL_DIR [N_PROMPTS] [THREADS]

Prints the seconds of each pass, its accuracy and tokens, and how many completions the two precisions share.
"""

import sys
import time
import torch
from pathlib import Path
from workbench.config import build_config
from workbench.trial.tasks import load_task
from workbench.backends.hf import encode_prompts
from workbench.backends.decode import make_sampler
from workbench.trial.model_sources import model_source, starting_checkpoint

torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
cfg = build_config(
    {
        "model": {"path": sys.argv[1]},
        "task": {"name": "word_problems", "difficulty": 1, "n_eval": n, "chat_template": True},
    }
)
task = load_task(cfg.task)
model, tok = model_source(cfg.model).load(starting_checkpoint(cfg, task), torch.device("cpu"), torch.float32)
model.eval()
prompts = encode_prompts(tok, [e.prompt for e in task.eval], chat=True)
sample = make_sampler(model, "static", Path("."))
res = {}
for mode in ["fp32", "bf16", "fp32", "bf16"]:
    t0 = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
        done = sample(tok, prompts, max_new_tokens=task.max_new_tokens, temperature=1.0, greedy=True, generator=None)
    dt = time.perf_counter() - t0
    acc = sum(task.reward(x, e, f) for x, e, f in zip(done.texts, task.eval, done.finished)) / n
    res.setdefault(mode, []).append(dt)
    print(mode, f"{dt:.1f}s", "acc", acc, "tokens", sum(len(t) for t in done.texts), flush=True)
    res[mode + "_texts"] = done.texts
same = sum(a == b for a, b in zip(res["fp32_texts"], res["bf16_texts"]))
print("identical completions", same, "of", n)
