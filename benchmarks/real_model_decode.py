"""Greedy held-out decoding of a real model on this CPU, two ways alternating: float32 against bf16 autocast
(`precision`), or under bf16 autocast with finished rows dropped from the batch against kept (`rows`,
`workbench.backends.decode.Rows`).

    python benchmarks/real_model_decode.py MODEL_DIR precision|rows [--n 100] [--threads 2] [--repeats 2]

Prints each pass's seconds, accuracy and completion lengths, then how many completions the two ways share.
"""

import argparse
import time
from pathlib import Path

import torch

from workbench.backends import decode
from workbench.backends.decode import make_sampler
from workbench.backends.hf import encode_prompts
from workbench.config import build_config
from workbench.trial.model_sources import model_source, starting_checkpoint
from workbench.trial.tasks import load_task

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("compare", choices=["precision", "rows"])
parser.add_argument("--n", type=int, default=100)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeats", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
cfg = build_config(
    {
        "model": {"path": args.model},
        "task": {"name": "word_problems", "difficulty": 1, "n_eval": args.n, "chat_template": True},
    }
)
task = load_task(cfg.task)
model, tok = model_source(cfg.model).load(starting_checkpoint(cfg, task), torch.device("cpu"), torch.float32)
model.eval()
prompts = encode_prompts(tok, [e.prompt for e in task.eval], chat=True)
sample = make_sampler(model, "static", Path("."))
ways = {"precision": ["fp32", "bf16"], "rows": ["dropped", "kept"]}[args.compare]
drop_rows = decode.Rows.should_drop
completions = {}
for way in ways * args.repeats:
    decode.Rows.should_drop = (lambda self, unfinished, rows: False) if way == "kept" else drop_rows
    bf16 = way != "fp32"
    t0 = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        done = sample(tok, prompts, max_new_tokens=task.max_new_tokens, temperature=1.0, greedy=True, generator=None)
    seconds = time.perf_counter() - t0
    accuracy = sum(task.reward(x, e, f) for x, e, f in zip(done.texts, task.eval, done.finished)) / args.n
    lengths = sorted(len(c) for c in done.completion_ids)
    print(
        f"{way} {seconds:.1f}s accuracy {accuracy:.3f} completion tokens: median {lengths[args.n // 2]},"
        f" longest {lengths[-1]}, mean {sum(lengths) / args.n:.1f}",
        flush=True,
    )
    completions[way] = done.completion_ids
a, b = (completions[w] for w in ways)
print(f"identical completions: {sum(x == y for x, y in zip(a, b))} of {args.n}")
