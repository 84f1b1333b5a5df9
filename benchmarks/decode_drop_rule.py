"""Sampling a GRPO batch with finished rows dropped at 7/8 (`decode.Rows.DROP_AT`, the default) against at half (the
rule before 2026-11-29), side by side in one run.

One model (by default SmolLM2-135M-Instruct from `workbench fetch-model`, fp32), word problems at difficulty 1 with
the chat template, B = 128 as 16 prompts x 8 at T 0.7, up to 96 new tokens, the compiled decoder. Every round samples
the same prompts once under each rule, from the same seed, the order alternating round by round; the first round
warms both and is not timed. Reports each rule's median seconds a batch, the median over rounds of the paired ratio
7/8 / half with its range, the drops a batch made and the rows its decode steps ran under each rule
(`decode_widths`: with the useful rows, the completions' tokens after the first), and whether the two rules gave the
same completions.

    .venv/bin/python benchmarks/decode_drop_rule.py [--model models/smollm2-135m-instruct] [--rounds 4]
        [--decode compiled|static] [--threads 2]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from workbench.backends import decode  # noqa: E402
from workbench.backends.decode import StaticDecoder, decode_widths  # noqa: E402
from workbench.backends.hf import encode_prompts  # noqa: E402
from workbench.cache import cache_root  # noqa: E402
from shared_prompts import sampling_setup  # noqa: E402  (benchmarks/, the script's own folder)

RULES = {"7/8": 7 / 8, "half": 1 / 2}


def main() -> None:
    args, task, policy = sampling_setup(__doc__.splitlines()[0], rounds=4)
    tok = policy.tokenizer
    compiled = args.decode == "compiled"
    decoder = StaticDecoder(policy.model, compiled=compiled, cache_dir=cache_root())
    min_kept = 2 if compiled else 1
    kw = dict(max_new_tokens=96, temperature=0.7, greedy=False)
    times: dict[str, list[float]] = {name: [] for name in RULES}
    outs: dict[str, list] = {name: [] for name in RULES}
    rows: dict[str, list[dict]] = {name: [] for name in RULES}
    for rnd in range(args.rounds + 1):
        start = rnd * args.prompts
        texts = [e.prompt for e in task.train[start : start + args.prompts]]
        prompts = [p for p in encode_prompts(tok, texts, chat=True) for _ in range(args.group)]
        for name in list(RULES) if rnd % 2 else list(RULES)[::-1]:
            decode.Rows.DROP_AT = RULES[name]
            t0 = time.perf_counter()
            out = decoder.sample(tok, prompts, generator=torch.Generator().manual_seed(rnd), **kw)
            seconds = time.perf_counter() - t0
            print(f"round {rnd}{' (warm-up)' if not rnd else ''}, {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
            if rnd:  # the first round builds or loads the compiled step and warms both
                lens = [len(c) for c in out.completion_ids]
                widths = decode_widths(lens, drop=True, min_kept=min_kept)
                drops = sum(a != b for a, b in zip(widths, widths[1:]))
                times[name].append(seconds)
                outs[name].append(out.completion_ids)
                rows[name].append({"drops": drops, "rows": sum(widths), "useful": sum(max(c - 1, 0) for c in lens)})
    decode.Rows.DROP_AT = RULES["7/8"]
    ratios = [a / b for a, b in zip(times["7/8"], times["half"])]
    same = sum(a == b for a, b in zip(outs["7/8"], outs["half"]))
    result = {
        "model": args.model,
        "decode": args.decode,
        "threads": args.threads,
        "rows": args.prompts * args.group,
        "rounds": args.rounds,
        "seven_eighths_s": round(statistics.median(times["7/8"]), 3),
        "half_s": round(statistics.median(times["half"]), 3),
        "seven_eighths_over_half": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "ratios": [round(r, 3) for r in ratios],
        "rounds_with_identical_completions": same,
        "per_round": rows,
    }
    print(
        f"# torch {torch.__version__}, {args.threads} threads, {args.model}, decode {args.decode},"
        f" {result['rows']} rows ({args.prompts} prompts x {args.group}), T 0.7, {args.rounds} rounds"
    )
    print(
        f"one batch: 7/8 {result['seven_eighths_s']} s, half {result['half_s']} s; 7/8 / half"
        f" {result['seven_eighths_over_half']} (range {result['ratio_range']}); identical completions in {same} of"
        f" {args.rounds} rounds"
    )
    for name in RULES:
        r = rows[name]
        print(
            f"{name}: drops a batch {[x['drops'] for x in r]}, rows decoded {[x['rows'] for x in r]}"
            f" (useful {[x['useful'] for x in r]})"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
