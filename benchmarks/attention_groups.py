"""Packed scoring's forward and backward, two ways alternating in one process: the completions attending in groups of
similar length (`packed.attention_parts`, the default) against all of them at the longest one's width (one group),
on a real model at a GRPO batch's shape: `--prompts` distinct prompts of `--prompt-tokens` tokens, `--group`
completions each, their lengths drawn uniformly from `--lengths LO HI` (SmolLM2's word problems at T 0.7: 20-96).

    python benchmarks/attention_groups.py [--model models/smollm2-135m-instruct] [--prompts 16] [--group 8] \
        [--prompt-tokens 110] [--lengths 20 96] [--threads 2] [--repeats 3]

Prints each pass's seconds, the groups the default made, and the ratio (grouped over one group).
"""

import argparse
import random
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from workbench.backends import packed

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="models/smollm2-135m-instruct")
parser.add_argument("--prompts", type=int, default=16)
parser.add_argument("--group", type=int, default=8)
parser.add_argument("--prompt-tokens", type=int, default=110)
parser.add_argument("--lengths", type=int, nargs=2, default=[20, 96])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()
torch.set_num_threads(args.threads)

model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True, dtype=torch.float32)
model.train()
vocab = model.config.vocab_size
rng = random.Random(0)
distinct = [[rng.randrange(vocab) for _ in range(args.prompt_tokens - rng.randrange(10))] for _ in range(args.prompts)]
prompts = [p for p in distinct for _ in range(args.group)]
completions = [[rng.randrange(vocab) for _ in range(rng.randint(*args.lengths))] for _ in prompts]
seen = torch.ones(len(distinct), max(map(len, distinct)), dtype=torch.bool)
groups = packed.attention_parts(completions, [i // args.group for i in range(len(prompts))], seen, "cpu")[1]
print(
    f"{len(prompts)} rows, completions {args.lengths[0]}-{args.lengths[1]} tokens: {len(groups)} attention groups,"
    f" widths {[g.at.width for g in groups]}, rows {[g.at.rows for g in groups]}"
)


def step(overhead: float) -> float:
    packed.ATTENTION_OVERHEAD_PAIRS = overhead
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logp, mask = packed.score_packed(model, prompts, completions, temperature=0.7, with_entropy=False)
    (-(logp * mask).sum() / mask.sum()).backward()
    return time.perf_counter() - start


ways = {"grouped": packed.ATTENTION_OVERHEAD_PAIRS, "one group": 1e18}  # a call dearer than any split saves
times: dict[str, list[float]] = {w: [] for w in ways}
for w, overhead in ways.items():  # warm-up, once each
    step(overhead)
for r in range(args.repeats):
    for w, overhead in ways.items():
        times[w].append(step(overhead))
        print(f"repeat {r} {w}: {times[w][-1]:.2f} s", flush=True)
median = {w: statistics.median(t) for w, t in times.items()}
print(
    f"median forward+backward: grouped {median['grouped']:.2f} s, one group {median['one group']:.2f} s;"
    f" ratio x{median['grouped'] / median['one group']:.2f}"
)
