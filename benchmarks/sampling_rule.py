"""The decoders' sampling rule (`hf.pick`, inverse transform from one uniform number a row) against the Gumbel-max
rule it replaced (one uniform number per vocabulary entry), side by side in one run.

Each round times, in turn, one token's choice for `--rows` rows over a `--vocab`-wide vocabulary (SmolLM2's 49,152
by default) by each rule, drawing its noise from a generator as the decoders do: the tempered log-softmax, the
choice, the chosen token's log-prob and the entropy. Eager, outside the compiled decode step (where the softmax and
the entropy fuse): what the noise and the choice cost. Reports each rule's median milliseconds a token and the
median over rounds of the paired ratio Gumbel / inverse, with its quartiles.

    .venv/bin/python benchmarks/sampling_rule.py [--rows 128] [--vocab 49152] [--rounds 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from workbench.backends.hf import pick, uniform_noise


def gumbel_max(logits: torch.Tensor, generator: torch.Generator, temperature: float):
    """The rule before 2026-11-29: argmax of the tempered log-softmax plus Gumbel noise made of one uniform draw
    per vocabulary entry."""
    noise = torch.rand(logits.shape, generator=generator)
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    token = (logp - torch.log(-torch.log(noise))).argmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy


def inverse(logits: torch.Tensor, generator: torch.Generator, temperature: float):
    finished = torch.zeros(logits.shape[0], dtype=torch.bool)
    noise = uniform_noise(logits.shape[0], generator, "cpu")
    token, logp, entropy, _ = pick(
        logits, finished, noise, temperature=temperature, greedy=False, pad_id=0, eos_id=logits.shape[1] - 1
    )
    return token, logp, entropy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=49_152)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logits = torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)) * 3
    rules = {"gumbel": gumbel_max, "inverse": inverse}
    generator = torch.Generator().manual_seed(1)
    times: dict[str, list[float]] = {name: [] for name in rules}
    for rnd in range(args.rounds + 1):
        for name, rule in rules.items():
            t0 = time.perf_counter()
            rule(logits, generator, 0.7)
            if rnd:  # the first round warms both
                times[name].append(time.perf_counter() - t0)
    ratios = [g / i for g, i in zip(times["gumbel"], times["inverse"])]
    result = {
        "rows": args.rows,
        "vocab": args.vocab,
        "threads": args.threads,
        "rounds": args.rounds,
        "gumbel_ms": round(1000 * statistics.median(times["gumbel"]), 2),
        "inverse_ms": round(1000 * statistics.median(times["inverse"]), 2),
        "gumbel_over_inverse": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]],
    }
    print(
        f"# torch {torch.__version__}, {args.threads} threads, {args.rows} rows x {args.vocab} vocabulary,"
        f" {args.rounds} rounds"
    )
    print(
        f"one token's choice: Gumbel-max {result['gumbel_ms']} ms, inverse transform {result['inverse_ms']} ms;"
        f" Gumbel / inverse {result['gumbel_over_inverse']} (quartiles {result['ratio_quartiles']})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
