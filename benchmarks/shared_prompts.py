"""Sampling a GRPO batch with the prompts' keys and values held once per prompt against copied to every row, side by
side in one run.

One model (by default SmolLM2-135M-Instruct from `workbench fetch-model`, fp32), word problems at difficulty 1 with
the chat template, B = 128 as 16 prompts x 8 at T 0.7, up to 96 new tokens; every round samples the same prompts
once with each decoder in turn, from the same seed: `shared` (the default, `decode.SharedPrompts`: a decode step
reads each prompt's keys and values once for its 8 rows) and `copied` (`share_prompts=False`: the prompt's keys
and values copied into every row's buffer, as before). Reports each decoder's median seconds a batch, the median
over rounds of the paired ratio copied / shared with its quartiles, and whether the two gave the same completions.

    .venv/bin/python benchmarks/shared_prompts.py [--model models/smollm2-135m-instruct] [--rounds 3]
        [--decode compiled|static] [--threads 2]   (--rounds 0: build the compiled steps only)
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

from workbench.backends.decode import StaticDecoder  # noqa: E402
from workbench.backends.hf import encode_prompts  # noqa: E402
from workbench.cache import cache_root  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def sampling_setup(description: str, rounds: int) -> tuple[argparse.Namespace, object, Policy]:
    """The command line of a side-by-side sampling benchmark on the real model (this one's options), and the policy
    and task it samples: word problems at difficulty 1 with the chat template, float32."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default="models/smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--decode", choices=["compiled", "static"], default="compiled")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config(
        {
            "model": {"path": args.model, "dtype": "float32"},
            "task": {"name": "word_problems", "difficulty": 1, "chat_template": True, "n_eval": 8},
        }
    )
    task = load_task(cfg.task)
    return args, task, Policy(cfg, task)


def main() -> None:
    args, task, policy = sampling_setup(__doc__.splitlines()[0], rounds=3)
    tok = policy.tokenizer
    texts = [e.prompt for e in task.train[: args.prompts]]
    prompts = [p for p in encode_prompts(tok, texts, chat=True) for _ in range(args.group)]
    compiled = args.decode == "compiled"
    decoders = {
        name: StaticDecoder(policy.model, compiled=compiled, cache_dir=cache_root(), share_prompts=name == "shared")
        for name in ("shared", "copied")
    }
    kw = dict(max_new_tokens=96, temperature=0.7, greedy=False)
    times: dict[str, list[float]] = {name: [] for name in decoders}
    outs: dict[str, list] = {name: [] for name in decoders}
    for rnd in range(args.rounds + 1):
        for name, decoder in decoders.items():
            t0 = time.perf_counter()
            out = decoder.sample(tok, prompts, generator=torch.Generator().manual_seed(rnd), **kw)
            if rnd:  # the first round builds or loads the compiled steps and warms both
                times[name].append(time.perf_counter() - t0)
                outs[name].append(out.completion_ids)
    if not args.rounds:
        print("built: the compiled steps of both decoders are in the cache")
        return
    ratios = [c / s for c, s in zip(times["copied"], times["shared"])]
    same = sum(a == b for a, b in zip(outs["shared"], outs["copied"]))
    result = {
        "model": args.model,
        "decode": args.decode,
        "threads": args.threads,
        "rows": len(prompts),
        "group": args.group,
        "rounds": args.rounds,
        "shared_s": round(statistics.median(times["shared"]), 3),
        "copied_s": round(statistics.median(times["copied"]), 3),
        "copied_over_shared": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "rounds_with_identical_completions": same,
        "tokens_per_round": sum(len(c) for c in outs["shared"][0]),
    }
    print(
        f"# torch {torch.__version__}, {args.threads} threads, {args.model}, decode {args.decode},"
        f" {len(prompts)} rows ({args.prompts} prompts x {args.group}), T 0.7, {args.rounds} rounds"
    )
    print(
        f"one batch: shared {result['shared_s']} s, copied {result['copied_s']} s; copied / shared"
        f" {result['copied_over_shared']} (range {result['ratio_range']}); identical completions in {same} of"
        f" {args.rounds} rounds"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
