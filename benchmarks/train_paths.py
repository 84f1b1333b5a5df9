"""The training step with packed scoring against the padded, length-bucketed batch, side by side in one run.

One policy (the embedded default model, default task, B = 128 rollouts as 16 prompts x 8) and a fixed set of
generated batches; every round trains each batch once with each scoring path in turn (`scoring.score`: packed, the
default for Llama-family models, and `packing=False`, the shared-prompt padded path it replaced), each path with its
own optimizer started from the same weights, so a busy machine slows both alike; a third path, `packed_model_rope`,
is the packed one with the model's own five-kernel rotation instead of the complex one on interleaved q/k rows
(`packed.Rope`). Reports the median seconds per training step of each path and the medians over steps of the
paired ratios padded / packed and packed_model_rope / packed, with the padding share of the batches' completion
tokens (what packing removes from every matmul).

    .venv/bin/python benchmarks/train_paths.py [--rounds 4] [--batches 8] [--threads 2]
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
import workbench.trial.step as step_module  # noqa: E402
from workbench.backends.scoring import score  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import make_optimizer, train_step  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config({})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    groups = cfg.batch_size // cfg.group_size
    batches = [
        generate_groups(policy, task, prompts.take(groups), cfg.group_size, i, gen, 0)[0] for i in range(args.batches)
    ]
    lengths = [len(r.completion_ids) for b in batches for r in b]
    padded_tokens = sum(len(b) * max(len(r.completion_ids) for r in b) for b in batches)
    paths = {"packed": True, "padded": False, "packed_model_rope": True}
    complex_rope = packed._halves_agree
    models = {name: copy.deepcopy(policy.model) for name in paths}
    optimizers = {name: make_optimizer(m, cfg.lr) for name, m in models.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}

    def scorer(flag: bool):
        return lambda *a, **k: score(*a, **{**k, "packing": flag})

    for rnd in range(args.rounds + 1):
        for batch in batches:
            for name, flag in paths.items():
                policy.model = models[name]
                step_module.score = scorer(flag)
                packed._halves_agree = (lambda cos, sin: False) if name == "packed_model_rope" else complex_rope
                t0 = time.perf_counter()
                train_step(policy, optimizers[name], batch, cfg, 0)
                if rnd:  # the first round warms the allocator and both paths' code
                    times[name].append(time.perf_counter() - t0)
    ratios = [p / q for p, q in zip(times["padded"], times["packed"])]
    rope = [p / q for p, q in zip(times["packed_model_rope"], times["packed"])]
    result = {
        "threads": args.threads,
        "steps_per_path": len(ratios),
        "padding_share": round(1 - sum(lengths) / padded_tokens, 3),
        "packed_s": round(statistics.median(times["packed"]), 4),
        "padded_s": round(statistics.median(times["padded"]), 4),
        "padded_over_packed": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]],
        "packed_model_rope_s": round(statistics.median(times["packed_model_rope"]), 4),
        "model_rope_over_complex": round(statistics.median(rope), 3),
        "rope_ratio_quartiles": [round(q, 3) for q in statistics.quantiles(rope, n=4)[::2]],
    }
    print(
        f"# torch {torch.__version__}, {args.threads} threads, {args.batches} batches x {args.rounds} rounds per path;"
        f" completion padding {result['padding_share']:.0%}"
    )
    print(
        f"training step: packed {result['packed_s']:.4f} s, padded {result['padded_s']:.4f} s;"
        f" padded / packed {result['padded_over_packed']:.2f} (quartiles {result['ratio_quartiles']})"
    )
    print(
        f"RoPE: the model's rotation {result['packed_model_rope_s']:.4f} s; model's / complex {result['model_rope_over_complex']:.3f}"
        f" (quartiles {result['rope_ratio_quartiles']})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
