"""One evaluation's greedy pass: the default task's 500 held-out prompts decoded greedily, per decoder.

This is the part of an evaluation that runs at every evaluation of a trial (pass@1 on the held-out set), so it sets
a trial's evaluation share. Prints, per decoder (`generation.decode`: `static` eager, `compiled` the AOTInductor
package), the median seconds per pass over `--rounds` (decoders alternate within each round, after one warm-up
pass each) and, compiled, the median seconds per decode step (one token for every row).

    .venv/bin/python benchmarks/eval_decode.py [--rounds 6] [--threads 2]
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

import workbench.backends.aot as aot  # noqa: E402
from workbench.backends.decode import make_sampler  # noqa: E402
from workbench.cache import cache_root  # noqa: E402
from workbench.config import build_config  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config({})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    policy.model.eval()
    prompts = policy.encode([e.prompt for e in task.eval])
    samplers = {mode: make_sampler(policy.model, mode, cache_root()) for mode in ("static", "compiled")}
    step_s: list[float] = []
    call = aot.Package.__call__

    def timed(self, *a):
        t0 = time.perf_counter()
        out = call(self, *a)
        step_s.append(time.perf_counter() - t0)
        return out

    aot.Package.__call__ = timed
    passes: dict[str, list[float]] = {mode: [] for mode in samplers}
    for rnd in range(args.rounds + 1):
        for mode, sample in samplers.items():
            t0 = time.perf_counter()
            sample(policy.tokenizer, prompts, max_new_tokens=policy.max_new_tokens, greedy=True)
            if rnd:  # the first round builds or loads the package and warms the allocator
                passes[mode].append(time.perf_counter() - t0)
            elif mode == "compiled":
                step_s.clear()
    result = {
        "threads": args.threads,
        "rows": len(prompts),
        "rounds": args.rounds,
        **{f"{mode}_pass_s": round(statistics.median(v), 4) for mode, v in passes.items()},
        "compiled_step_ms": round(1e3 * statistics.median(step_s), 3),
    }
    print(f"# torch {torch.__version__}, {args.threads} threads, {len(prompts)} greedy rows, {args.rounds} rounds")
    print(
        f"greedy pass: static {result['static_pass_s']:.3f} s, compiled {result['compiled_pass_s']:.3f} s"
        f" ({result['compiled_step_ms']:.2f} ms a decode step)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
