"""Sampling throughput of the hf and vllm generation backends on the same model and batch, side by side.

Both sample B rollouts (B/G prompts x G) of the embedded default model (3-digit scratchpad task) with per-token
log-probs, as a trial does, alternating backends over `--repeats` rounds (so a busy machine slows both alike);
reports completion tokens per second and rollouts per second (medians), the engine start time and the weight
sync time. Runs in the vLLM environment (which has both backends):

    make bench-sampling          # = OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/sampling_backends.py
    .venv-vllm/bin/python benchmarks/sampling_backends.py --batch 128 512 --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

from workbench.config import build_config  # noqa: E402
from workbench.backends.hf import encode_prompts, sample  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)  # before the engine starts: it fixes the process's thread count

    cfg = build_config({"generation": {"backend": "vllm"}, "threads": args.threads})
    task = load_task(cfg.task)
    t0 = time.perf_counter()
    policy = Policy(cfg, task)
    start_s = time.perf_counter() - t0
    syncs = []
    for _ in range(5):
        t1 = time.perf_counter()
        policy.engine.sync(policy.model, 0)
        syncs.append(time.perf_counter() - t1)
    rows = []
    for batch in args.batch:
        prompts = [
            p
            for p in encode_prompts(policy.tokenizer, [e.prompt for e in task.train[: batch // cfg.group_size]])
            for _ in range(cfg.group_size)
        ]
        rates: dict[str, list[tuple[float, float]]] = {"hf": [], "vllm": []}
        for r in range(args.repeats + 1):  # round 0 warms up both and is not counted
            for backend in ("hf", "vllm"):
                gen = torch.Generator().manual_seed(r)
                t1 = time.perf_counter()
                if backend == "hf":
                    with torch.no_grad():
                        out = sample(
                            policy.model,
                            policy.tokenizer,
                            prompts,
                            max_new_tokens=policy.max_new_tokens,
                            temperature=1.0,
                            generator=gen,
                        )
                else:
                    out = policy.engine.sample(
                        policy.tokenizer, prompts, max_new_tokens=policy.max_new_tokens, temperature=1.0, generator=gen
                    )
                dt = time.perf_counter() - t1
                if r:
                    rates[backend].append((out.generated_tokens / dt, len(prompts) / dt))
        for backend, vals in rates.items():
            rows.append(
                {
                    "backend": backend,
                    "batch": batch,
                    "tokens_per_s": statistics.median(v[0] for v in vals),
                    "rollouts_per_s": statistics.median(v[1] for v in vals),
                }
            )
    print(
        f"model: {sum(p.numel() for p in policy.model.parameters())} params, {policy.path}; threads {args.threads}; "
        f"engine start {start_s:.1f} s (incl. checkpoint); weight sync median {statistics.median(syncs) * 1000:.0f} ms"
    )
    print("| batch | backend | tokens/s | rollouts/s | vllm / hf |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        hf = next(r for r in rows if r["batch"] == batch and r["backend"] == "hf")
        for r in (x for x in rows if x["batch"] == batch):
            print(
                f"| {batch} | {r['backend']} | {r['tokens_per_s']:.0f} | {r['rollouts_per_s']:.1f} | {r['tokens_per_s'] / hf['tokens_per_s']:.2f} |"
            )
    print(json.dumps({"engine_start_s": start_s, "sync_ms": statistics.median(syncs) * 1000, "rows": rows}))


if __name__ == "__main__":
    main()
