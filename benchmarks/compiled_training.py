"""`train.compile`: the packed training layers under `torch.compile` (inductor fuses their elementwise work forward
and backward) against the eager packed path, and what that does to the FLOP fraction.

In one process, alternating rounds over the same generated batches: the training step eager (the default; RoPE as
one complex multiply) and compiled (RoPE as the model's real rotation, which inductor fuses; it generates no code
for complex tensors). Prints the median per-step ratio with its quartiles over rounds, the compile's
seconds in this process (run twice with the same `--cache` to see the warm cost), and the FLOP fraction of a
step with compiled training beside the generation measured here, and beside generation cut to its GEMMs.

    .venv/bin/python benchmarks/compiled_training.py [--rounds 6] [--cache /tmp/inductor-whatif]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batches", type=int, default=6, help="generated batches trained on in each round")
    ap.add_argument("--cache", default="/tmp/inductor-whatif", help="inductor's cache directory")
    args = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache

    import torch

    from roofline import gemm_gflops, gemm_only_seconds, matmul_weights, step_flops
    from workbench.config import build_config
    from workbench.trial.policy import Policy
    from workbench.trial.rollouts import PromptStream, generate_groups
    from workbench.trial.step import make_optimizer, train_step
    from workbench.trial.tasks import load_task

    torch.set_num_threads(args.threads)
    cfg = build_config({"train": {"compile": True}})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    opt = make_optimizer(policy.model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    batches, outs, gen_s = [], [], []
    for step in range(args.batches + 2):
        t0 = time.perf_counter()
        fresh, out = generate_groups(
            policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0
        )
        gen_s.append(time.perf_counter() - t0)
        batches.append(fresh)
        outs.append(out)
    batches, outs, gen_s = batches[2:], outs[2:], gen_s[2:]  # the first two warm the decoder

    def round_(compiled: bool) -> list[float]:
        policy.compile_training = compiled
        times = []
        for b in batches:
            t0 = time.perf_counter()
            train_step(policy, opt, b, cfg, 0)
            times.append(time.perf_counter() - t0)
        return times

    t0 = time.perf_counter()
    first = round_(True)
    compile_s = time.perf_counter() - t0 - statistics.median(first) * (len(first) - 1)
    round_(False)
    eager, compiled, ratios = [], [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {c: statistics.median(round_(c)) for c in order}
        eager.append(got[False])
        compiled.append(got[True])
        ratios.append(got[False] / got[True])

    med = statistics.median
    q = statistics.quantiles(ratios, n=4)
    weights = matmul_weights(policy.model)
    peak = (
        max(gemm_gflops(m, w.shape[1], w.shape[0]) for w in weights for m in (cfg.batch_size, cfg.batch_size * 40))
        * 1e9
    )
    flops = [sum(step_flops(policy.model, o.prompt_ids, [len(c) for c in o.completion_ids]).values()) for o in outs]
    shape = sorted(
        (
            sum(len(p) for p in {tuple(p) for p in o.prompt_ids}),
            len(o.completion_ids),
            max(len(c) for c in o.completion_ids),
            sum(len(c) for c in o.completion_ids),
        )
        for o in outs
    )[len(outs) // 2]
    gemm = gemm_only_seconds(policy.model, shape[0], shape[1], shape[2] - 1, shape[3])
    floor = med(flops) / peak
    print(
        f"# torch {torch.__version__}, {args.threads} threads, {args.rounds} alternating rounds of {len(batches)} training steps"
    )
    print(
        f"training step: eager {med(eager):.4f} s, compiled {med(compiled):.4f} s; eager / compiled {med(ratios):.3f}"
        f" (quartiles over rounds {q[0]:.3f}-{q[2]:.3f})"
    )
    print(f"compile in this process (cache {args.cache}): {compile_s:.1f} s")
    print(
        f"FLOP fraction (ceiling {peak / 1e9:.0f} GFLOP/s, floor {floor:.4f} s): generation as measured ({med(gen_s):.4f} s)"
        f" + training eager {floor / (med(gen_s) + med(eager)):.0%}, + training compiled {floor / (med(gen_s) + med(compiled)):.0%};"
        f" generation cut to its GEMMs ({gemm['generation']:.4f} s) + training compiled {floor / (gemm['generation'] + med(compiled)):.0%}"
    )


if __name__ == "__main__":
    main()
