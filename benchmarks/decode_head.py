"""The decode step's head (one row of logits per decoded row) as one GEMM against in slices of vocabulary columns,
side by side in one run: measured on 2026-11-29 and not kept (docs/performance.md, eighteenth session).

At SmolLM2-135M-Instruct's shapes (hidden 576, 49,152 tokens), float32, at the rows a decode step runs (128 down to
the few left after finished rows are dropped). Two orders: `in a row` times `--reps` calls of one form, then of the
other; `interleaved` alternates them call by call. Prints each form's median call in GFLOP/s, the time ratio slices
/ one call, and whether the slices' logits equal the one call's bit for bit.

    .venv/bin/python benchmarks/decode_head.py [--threads 2] [--reps 12] [--columns 1024]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def sliced(h: torch.Tensor, head: torch.Tensor, columns: int) -> torch.Tensor:
    """`h @ head.T` as GEMMs of `columns` vocabulary columns each."""
    return torch.cat([F.linear(h, part) for part in head.split(columns)], dim=-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--columns", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--vocab", type=int, default=49152)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    head = torch.randn(args.vocab, args.hidden, generator=gen)
    ways = {"one call": F.linear, "slices": lambda h, w: sliced(h, w, args.columns)}
    print(
        f"# torch {torch.__version__}, {args.threads} threads, head {args.vocab} x {args.hidden} float32,"
        f" slices of {args.columns} columns, {args.reps} calls each"
    )
    results = []
    for order in ("in a row", "interleaved"):
        for rows in (128, 100, 64, 32, 16):
            h = torch.randn(rows, args.hidden, generator=gen)
            times: dict[str, list[float]] = {name: [] for name in ways}
            calls = [(name, i) for i in range(args.reps) for name in ways]
            if order == "in a row":
                calls = sorted(calls, key=lambda c: list(ways).index(c[0]))
            for name, _ in calls:
                t0 = time.perf_counter()
                ways[name](h, head)
                times[name].append(time.perf_counter() - t0)
            flop = 2 * rows * args.hidden * args.vocab
            rate = {name: round(flop / statistics.median(ts) / 1e9, 1) for name, ts in times.items()}
            same = bool(torch.equal(F.linear(h, head), sliced(h, head, args.columns)))
            ratio = round(rate["one call"] / rate["slices"], 3)
            results.append(
                {"order": order, "rows": rows, "gflops": rate, "slices_time_ratio": ratio, "bit_equal": same}
            )
            print(
                f"{order}, {rows} rows: one call {rate['one call']} GFLOP/s, slices {rate['slices']}; time x{ratio};"
                f" equal bit for bit: {same}",
                flush=True,
            )
    print(json.dumps({"threads": args.threads, "columns": args.columns, "results": results}))


if __name__ == "__main__":
    main()
