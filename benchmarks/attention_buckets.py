"""Training steps with the completions attended in length buckets against one padded attention call, side by side.

One policy (by default SmolLM2-135M-Instruct from `workbench fetch-model`, word problems at difficulty 1 with the
chat template, B = 128 as 16 prompts x 8 at T 0.7, fp32) and a fixed set of generated batches; every round trains
each batch once with each path in turn, each path with its own copy of the weights and its own optimizer started
alike, so a busy machine slows both: `buckets` (the default: `packed.completion_buckets` splits the completions
where the padding removed is worth more than `packed.BUCKET_CALL_FLOPS`) and `padded` (the cost of a bucket set
infinite: one attention call per layer padded to the batch's longest completion, as before buckets). Reports each
path's median seconds per training step, the median over steps of the paired ratio padded / buckets with its
quartiles, the buckets made and the completions' padding share.

    .venv/bin/python benchmarks/attention_buckets.py [--model models/smollm2-135m-instruct] [--batches 2]
        [--rounds 2] [--compile] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

import workbench.backends.packed as packed  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import make_optimizer, train_step  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/smollm2-135m-instruct", help="model.path ('' for the embedded model)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="train.compile: the packed layers under torch.compile")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    real = {
        "model": {"path": args.model, "dtype": "float32"},
        "task": {"name": "word_problems", "difficulty": 1, "chat_template": True, "n_eval": 8},
        "group_size": 8,
        "generation": {"temperature": 0.7},
    }
    cfg = build_config({**(real if args.model else {}), "batch_size": args.batch, "train": {"compile": args.compile}})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    groups = cfg.batch_size // cfg.group_size
    batches = [
        generate_groups(policy, task, prompts.take(groups), cfg.group_size, i, gen, 0)[0] for i in range(args.batches)
    ]
    lengths = [[len(r.completion_ids) for r in b] for b in batches]
    made = []
    bucketing = packed.completion_buckets
    packed.completion_buckets = lambda *a: made.append(bucketing(*a)) or made[-1]
    paths = {"buckets": packed.BUCKET_CALL_FLOPS, "padded": float("inf")}
    models = {name: copy.deepcopy(policy.model) for name in paths}
    optimizers = {name: make_optimizer(m, cfg.lr) for name, m in models.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for rnd in range(args.rounds + 1):
        for batch in batches:
            for name, call_flops in paths.items():
                policy.model, packed.BUCKET_CALL_FLOPS = models[name], call_flops
                t0 = time.perf_counter()
                train_step(policy, optimizers[name], batch, cfg, 0)
                if rnd:  # the first round warms the allocator and both paths' code (and compiles)
                    times[name].append(time.perf_counter() - t0)
    ratios = [p / b for p, b in zip(times["padded"], times["buckets"])]
    bucket_counts = sorted({len(m) if m else 1 for m in made})
    result = {
        "model": args.model or "embedded",
        "threads": args.threads,
        "compile": args.compile,
        "steps_per_path": len(ratios),
        "completion_lengths": [min(min(x) for x in lengths), max(max(x) for x in lengths)],
        "padding_share": round(1 - sum(map(sum, lengths)) / sum(len(x) * max(x) for x in lengths), 3),
        "buckets_per_call": bucket_counts,
        "buckets_s": round(statistics.median(times["buckets"]), 3),
        "padded_s": round(statistics.median(times["padded"]), 3),
        "padded_over_buckets": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]] if len(ratios) > 1 else None,
    }
    print(
        f"# torch {torch.__version__}, {args.threads} threads, model {result['model']}, compile {args.compile},"
        f" {args.batches} batches x {args.rounds} rounds per path; completions {result['completion_lengths']} tokens,"
        f" padding {result['padding_share']:.0%} of the padded batch; buckets per scoring call {bucket_counts}"
    )
    print(
        f"training step: buckets {result['buckets_s']:.3f} s, padded {result['padded_s']:.3f} s;"
        f" padded / buckets {result['padded_over_buckets']:.3f} (quartiles {result['ratio_quartiles']})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
