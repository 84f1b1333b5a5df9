"""The training head's forward and backward, two ways alternating in one process: the fused autograd function
(`workbench.backends.head.TokenLogProb`) against autograd's chain (temper, log-softmax, gather), at SmolLM2-135M's
head (hidden 576, vocabulary 49,152, float32) and a B 128 step's completion tokens.

    python benchmarks/fused_head.py [--tokens 5000] [--threads 2] [--repeats 3]

Prints each pass's seconds and the peak of live tensor bytes of each way, then the ratios: fused over chain, and
fused over the fused head with its log-sum-exp in one call (`head.row_logsumexp` against one torch.logsumexp).
"""

import argparse
import statistics
import time

import torch

from workbench.backends import head
from workbench.backends.head import TokenLogProb

from support.memory import LiveTensorBytes  # tests/support (PYTHONPATH=tests)

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=5000)
parser.add_argument("--hidden", type=int, default=576)
parser.add_argument("--vocab", type=int, default=49152)
parser.add_argument("--temperature", type=float, default=0.7)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()
torch.set_num_threads(args.threads)

g = torch.Generator().manual_seed(0)
hidden = torch.randn(args.tokens, args.hidden, generator=g).requires_grad_()
weight = (0.05 * torch.randn(args.vocab, args.hidden, generator=g)).requires_grad_()
targets = torch.randint(0, args.vocab, (args.tokens,), generator=g)
upstream = torch.randn(args.tokens, generator=g)


def chain():
    logp = torch.log_softmax(torch.nn.functional.linear(hidden, weight) / args.temperature, dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1)


def fused():
    return TokenLogProb.apply(hidden, weight, targets, args.temperature)


def one_call():
    """The fused head with its log-sum-exp in one torch.logsumexp call (before `row_logsumexp`'s slices)."""
    sliced, head.LSE_SLICE_BYTES = head.LSE_SLICE_BYTES, 2**62
    try:
        return fused()
    finally:
        head.LSE_SLICE_BYTES = sliced


def one(way) -> float:
    hidden.grad = weight.grad = None
    t0 = time.perf_counter()
    (way() * upstream).sum().backward()
    return time.perf_counter() - t0


ways = {"fused": fused, "one_call": one_call, "chain": chain}
seconds: dict[str, list[float]] = {k: [] for k in ways}
peaks: dict[str, int] = {}
for name, way in ways.items():  # warm-up, and each way's peak of live tensors
    with LiveTensorBytes() as live:
        one(way)
    peaks[name] = live.peak
for r in range(args.repeats):
    for name, way in ways.items():
        seconds[name].append(one(way))
        print(f"repeat {r} {name}: {seconds[name][-1]:.3f} s")
med = {k: statistics.median(v) for k, v in seconds.items()}
print(
    f"tokens {args.tokens}, vocabulary {args.vocab}, hidden {args.hidden}, {args.threads} threads: fused {med['fused']:.3f} s,"
    f" chain {med['chain']:.3f} s (median of {args.repeats}): x{med['fused'] / med['chain']:.2f} the time;"
    f" peak live tensors {peaks['fused'] / 2**30:.2f} GiB against {peaks['chain'] / 2**30:.2f} GiB:"
    f" x{peaks['fused'] / peaks['chain']:.2f}"
)
ratios = sorted(f / o for f, o in zip(seconds["fused"], seconds["one_call"]))
print(
    f"fused against its log-sum-exp in one call: {med['fused']:.3f} s against {med['one_call']:.3f} s; paired ratio"
    f" x{statistics.median(ratios):.3f} the time (range {ratios[0]:.3f}-{ratios[-1]:.3f}, {len(ratios)} pairs);"
    f" peak x{peaks['fused'] / peaks['one_call']:.2f}"
)
