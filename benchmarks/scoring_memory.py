"""No-grad scoring at a large vocabulary: peak live tensor memory and wall time, bounded (`train.scoring_mib`) against
the whole batch at once, side by side in one run.

    .venv/bin/python benchmarks/scoring_memory.py [--vocab 151936] [--rows 32] [--tokens 100] [--mib 64 256 1024]

A built Llama (hidden 64, 2 layers: the head dominates, as it does for a 0.5B model at this vocabulary), groups
of 4 rows sharing a prompt, the packed path; the peak is counted from the tensors themselves (tests/support/memory.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.memory import LiveTensorBytes  # noqa: E402

from workbench.backends.scoring import score  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--mib", type=float, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        )
    ).eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, args.vocab, (12,), generator=g).tolist() for _ in range(args.rows // 4)]
    rows = [p for p in prompts for _ in range(4)]
    completions = [torch.randint(1, args.vocab, (args.tokens,), generator=g).tolist() for _ in rows]
    tokens = sum(len(c) for c in completions)
    out = {
        "vocab": args.vocab,
        "tokens": tokens,
        "batch_fp32_logits_mib": round(tokens * args.vocab * 4 / 2**20, 1),
        "threads": torch.get_num_threads(),
        "settings": [],
    }
    for mib in [None, *args.mib]:
        with torch.no_grad():
            score(model, rows, completions, with_entropy=True, scoring_mib=mib)  # warm-up
            with LiveTensorBytes() as live:
                score(model, rows, completions, with_entropy=True, scoring_mib=mib)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                score(model, rows, completions, with_entropy=True, scoring_mib=mib)
                times.append(time.perf_counter() - t0)
        out["settings"].append(
            {
                "scoring_mib": mib,
                "peak_mib": round(live.peak / 2**20, 1),
                "seconds_median": round(sorted(times)[len(times) // 2], 3),
            }
        )
    whole = out["settings"][0]["seconds_median"]
    for s in out["settings"]:
        s["time_vs_whole"] = round(s["seconds_median"] / whole, 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
