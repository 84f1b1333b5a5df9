"""How close a trial step comes to the machine: its useful FLOPs, this machine's GEMM ceiling, the fraction achieved.

Useful work of one GRPO step of the default trial (B rollouts, generation then one optimizer step), counted from
what the step really generated: every matmul of the model over non-padding tokens (2 FLOP per weight per token
forward, 6 forward + backward) plus attention (4 x hidden x context per token and layer forward), each distinct
prompt once (its G completions share its keys and values; the count with every row paying its prompt is printed
too). The ceiling is
fp32 `torch.mm` throughput measured here at the model's own GEMM shapes (decode rows x hidden, training tokens x
hidden, against each weight); the floor is the step's FLOPs at the best of them. Then the measured step (median of
`--steps` after warm-up, with the configured decoder) against that floor.

    .venv/bin/python benchmarks/roofline.py [--threads 2] [--steps 8] [--decode auto]
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

from workbench.config import build_config  # noqa: E402
from workbench.trial.policy import Policy  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import train_step  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402


def gemm_gflops(m: int, k: int, n: int, seconds: float = 0.5) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    return 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9


def matmul_weights(model) -> list[torch.Tensor]:
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def step_flops(model, prompt_ids: list[list[int]], completion_lens: list[int], share_prompts: bool = True) -> dict[str, float]:
    """Useful FLOPs of generating and training on these rollouts. With `share_prompts`, a prompt repeated across
    rows (a GRPO group) counts once, prefill and training alike: its keys and values serve every completion, and
    the step computes it once (`hf.score`, the static decoder's prefill); without, every row pays its prompt."""
    cfg = model.config
    per_token = 2 * sum(w.numel() for w in matmul_weights(model))
    attn = lambda ctx: 4 * cfg.num_hidden_layers * cfg.hidden_size * ctx  # noqa: E731  (scores and values, forward)
    gen = train = 0.0
    seen: set[tuple[int, ...]] = set()
    for ids, c in zip(prompt_ids, completion_lens):
        p, first = len(ids), tuple(ids) not in seen or not share_prompts
        seen.add(tuple(ids))
        prompt = p * per_token + sum(attn(j + 1) for j in range(p)) if first else 0.0  # forward over the prompt
        completion = c * per_token + sum(attn(p + j + 1) for j in range(c))  # each completion token after it
        gen += prompt + completion  # prefill, then each decoded token
        train += 3 * (prompt + completion)  # forward + backward = 3 x forward
    return {"generation": gen, "training": train}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--decode", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config({"generation": {"decode": args.decode}})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    weights = matmul_weights(policy.model)
    rows_decode, tokens_train = cfg.batch_size, cfg.batch_size * 40
    shapes = sorted({(m, w.shape[1], w.shape[0]) for w in weights for m in (rows_decode, tokens_train)})
    ceiling = {f"{m}x{k}x{n}": gemm_gflops(m, k, n) for m, k, n in shapes}
    best = max(ceiling.values())

    opt = torch.optim.Adam(policy.model.parameters(), lr=cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    times, flops = [], []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        fresh, out = generate_groups(policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0)
        t1 = time.perf_counter()
        train_step(policy, opt, fresh, cfg, step)
        t2 = time.perf_counter()
        if step >= args.warmup:
            lens = [len(c) for c in out.completion_ids]
            f = step_flops(policy.model, out.prompt_ids, lens)
            f["per_row_prompts"] = sum(step_flops(policy.model, out.prompt_ids, lens, share_prompts=False).values())
            times.append((t1 - t0, t2 - t1))
            flops.append(f)
    med = statistics.median
    gen_s, train_s = med(t for t, _ in times), med(t for _, t in times)
    gen_f, train_f = med(f["generation"] for f in flops), med(f["training"] for f in flops)
    floor_gen, floor_train = gen_f / (best * 1e9), train_f / (best * 1e9)
    result = {
        "threads": args.threads, "decode": args.decode, "gemm_gflops_by_shape": {k: round(v, 1) for k, v in ceiling.items()},
        "ceiling_gflops": round(best, 1), "step_gflop": round((gen_f + train_f) / 1e9, 2),
        "step_gflop_every_row_its_prompt": round(med(f["per_row_prompts"] for f in flops) / 1e9, 2),
        "floor_s": round(floor_gen + floor_train, 4), "measured_s": round(gen_s + train_s, 4),
        "fraction_of_ceiling": round((floor_gen + floor_train) / (gen_s + train_s), 3),
        "generation": {"gflop": round(gen_f / 1e9, 2), "s": round(gen_s, 4), "fraction": round(floor_gen / gen_s, 3)},
        "training": {"gflop": round(train_f / 1e9, 2), "s": round(train_s, 4), "fraction": round(floor_train / train_s, 3)},
    }
    print(f"# torch {torch.__version__}, {args.threads} threads, decode {args.decode}, {args.steps} timed steps")
    print(f"fp32 GEMM ceiling at the model's shapes: {best:.0f} GFLOP/s (by shape: {result['gemm_gflops_by_shape']})")
    print(f"one step: {result['step_gflop']} GFLOP useful -> floor {result['floor_s']:.3f} s; measured {result['measured_s']:.3f} s"
          f" = {result['fraction_of_ceiling']:.0%} of the ceiling (generation {result['generation']['fraction']:.0%},"
          f" training {result['training']['fraction']:.0%})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
