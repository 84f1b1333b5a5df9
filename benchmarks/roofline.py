"""How close a trial step comes to the machine: its useful FLOPs, this machine's GEMM ceiling, the fraction achieved.

Useful work of one GRPO step of the default trial (B rollouts, generation then one optimizer step), counted from
what the step really generated: every matmul of the model over non-padding tokens (2 FLOP per weight per token
forward, 6 forward + backward) plus attention (4 x hidden x context per token and layer forward), each distinct
prompt once (its G completions share its keys and values; the count with every row paying its prompt is printed
too). The ceiling is
fp32 `torch.mm` throughput measured here at the model's own GEMM shapes (decode rows x hidden, training tokens x
hidden, against each weight); the floor is the step's FLOPs at the best of them. Then each measured step (`--steps`
after warm-up, with the configured decoder) against the floor at the ceiling measured right after it (the best shape,
`--gemm-seconds`): a shared machine's speed drifts by 20-40% over minutes, and a step is judged against the
machine's speed of its own moment. The fraction printed is the median over steps, with its quartiles. Last, the
step's own GEMMs alone at its shapes (`gemm_only_seconds`): how much of the measured step is GEMM work at the
speeds these shapes really get, and the fraction a step of nothing else could reach; and the fraction with only
one half of the step (training or generation) cut to its GEMMs, the other as measured: what the best conceivable
work on one half alone could reach.

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
from workbench.trial.step import make_optimizer, train_step  # noqa: E402
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


def step_flops(
    model, prompt_ids: list[list[int]], completion_lens: list[int], share_prompts: bool = True
) -> dict[str, float]:
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


def gemm_only_seconds(
    model, prompt_tokens: int, rows: int, decode_steps: int, completion_tokens: int, reps: int = 5
) -> dict[str, float]:
    """Seconds the step's own GEMMs take alone, at the shapes the step runs them, run back to back in this
    process: the prefill over the distinct prompts' tokens, `decode_steps` decode steps of `rows` rows, and the
    packed training forward (prompts and completions) with its backward (the input's and the weight's gradient
    of every matmul). Attention, elementwise work and Python are left out: a step with nothing but these could
    reach at most floor / this of the ceiling. Median over `reps`."""
    weights = [w.detach().t().contiguous() for w in matmul_weights(model)]  # [in, out], as x @ w
    sizes = {m for m in (prompt_tokens, rows, completion_tokens)}
    acts = {(m, d): torch.randn(m, d) for m in sizes for w in weights for d in w.shape}  # made before the clock runs

    def run(m: int, backward: bool) -> None:
        for w in weights:
            a, g = acts[(m, w.shape[0])], acts[(m, w.shape[1])]
            a @ w
            if backward:
                g @ w.t()  # the input's gradient
                a.t() @ g  # the weight's gradient

    inputs = {
        "generation": [(prompt_tokens, False)] + [(rows, False)] * decode_steps,
        "training": [(prompt_tokens, True), (completion_tokens, True)],
    }
    out = {}
    for part, calls in inputs.items():
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            for m, backward in calls:
                run(m, backward)
            times.append(time.perf_counter() - t0)
        out[part] = statistics.median(times[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--decode", default="auto")
    ap.add_argument(
        "--gemm-seconds", type=float, default=0.3, help="GEMM timing beside each step (the ceiling's sample)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = build_config({"generation": {"decode": args.decode}})
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    weights = matmul_weights(policy.model)
    rows_decode, tokens_train = cfg.batch_size, cfg.batch_size * 40
    shapes = sorted({(m, w.shape[1], w.shape[0]) for w in weights for m in (rows_decode, tokens_train)})
    ceiling = {f"{m}x{k}x{n}": gemm_gflops(m, k, n) for m, k, n in shapes}
    best_shape = max(shapes, key=lambda s: ceiling[f"{s[0]}x{s[1]}x{s[2]}"])

    opt = make_optimizer(policy.model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    rows = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        fresh, out = generate_groups(
            policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0
        )
        t1 = time.perf_counter()
        train_step(policy, opt, fresh, cfg, step)
        t2 = time.perf_counter()
        if step >= args.warmup:
            # The machine's ceiling right beside this step (a shared machine's speed drifts over minutes): each step
            # is judged against the GEMM throughput of its own moment, at the best of the model's shapes.
            peak = gemm_gflops(*best_shape, seconds=args.gemm_seconds) * 1e9
            lens = [len(c) for c in out.completion_ids]
            f = step_flops(policy.model, out.prompt_ids, lens)
            f["per_row_prompts"] = sum(step_flops(policy.model, out.prompt_ids, lens, share_prompts=False).values())
            rows.append(
                {
                    "gen_s": t1 - t0,
                    "train_s": t2 - t1,
                    "peak": peak,
                    **f,
                    "shape": (
                        len({tuple(p) for p in out.prompt_ids}),
                        sum(len(p) for p in {tuple(p) for p in out.prompt_ids}),
                        len(lens),
                        max(lens),
                        sum(lens),
                    ),
                }
            )
    med = statistics.median
    frac = [(r["generation"] + r["training"]) / r["peak"] / (r["gen_s"] + r["train_s"]) for r in rows]
    frac_gen = [r["generation"] / r["peak"] / r["gen_s"] for r in rows]
    frac_train = [r["training"] / r["peak"] / r["train_s"] for r in rows]
    peak = med(r["peak"] for r in rows)
    gen_s, train_s = med(r["gen_s"] for r in rows), med(r["train_s"] for r in rows)
    gen_f, train_f = med(r["generation"] for r in rows), med(r["training"] for r in rows)
    q = statistics.quantiles(frac, n=4) if len(frac) > 1 else [frac[0]] * 3
    # the GEMMs alone, at the median step's shapes: what a step with no other cost would take
    _, prompt_tokens, n_rows, longest, completion_tokens = sorted(r["shape"] for r in rows)[len(rows) // 2]
    gemm = gemm_only_seconds(policy.model, prompt_tokens, n_rows, longest - 1, completion_tokens)
    gemm_s = gemm["generation"] + gemm["training"]
    result = {
        "threads": args.threads,
        "decode": args.decode,
        "gemm_gflops_by_shape": {k: round(v, 1) for k, v in ceiling.items()},
        "ceiling_gflops": round(peak / 1e9, 1),
        "ceiling_gflops_range": [
            round(min(r["peak"] for r in rows) / 1e9, 1),
            round(max(r["peak"] for r in rows) / 1e9, 1),
        ],
        "step_gflop": round((gen_f + train_f) / 1e9, 2),
        "step_gflop_every_row_its_prompt": round(med(r["per_row_prompts"] for r in rows) / 1e9, 2),
        "floor_s": round((gen_f + train_f) / peak, 4),
        "measured_s": round(gen_s + train_s, 4),
        "fraction_of_ceiling": round(med(frac), 3),
        "fraction_quartiles": [round(q[0], 3), round(q[2], 3)],
        "generation": {"gflop": round(gen_f / 1e9, 2), "s": round(gen_s, 4), "fraction": round(med(frac_gen), 3)},
        "training": {"gflop": round(train_f / 1e9, 2), "s": round(train_s, 4), "fraction": round(med(frac_train), 3)},
        "gemm_only_s": {
            "generation": round(gemm["generation"], 4),
            "training": round(gemm["training"], 4),
            "step": round(gemm_s, 4),
        },
        "fraction_if_only_gemms": round((gen_f + train_f) / peak / gemm_s, 3),
        # one half of the step cut to its GEMMs, the other as measured: what each half alone can contribute
        "fraction_if_training_only_gemms": round((gen_f + train_f) / peak / (gen_s + gemm["training"]), 3),
        "fraction_if_generation_only_gemms": round((gen_f + train_f) / peak / (gemm["generation"] + train_s), 3),
    }
    print(f"# torch {torch.__version__}, {args.threads} threads, decode {args.decode}, {args.steps} timed steps")
    print(
        f"fp32 GEMM ceiling at the model's shapes: best {'x'.join(map(str, best_shape))}, {result['ceiling_gflops']:.0f} GFLOP/s"
        f" beside the steps (range {result['ceiling_gflops_range']}; by shape at the start: {result['gemm_gflops_by_shape']})"
    )
    print(
        f"one step: {result['step_gflop']} GFLOP useful -> floor {result['floor_s']:.3f} s; measured {result['measured_s']:.3f} s;"
        f" {result['fraction_of_ceiling']:.0%} of the ceiling (median over steps, quartiles {q[0]:.0%}-{q[2]:.0%};"
        f" generation {result['generation']['fraction']:.0%}, training {result['training']['fraction']:.0%})"
    )
    print(
        f"the step's GEMMs alone, at its shapes: {gemm_s:.3f} s (generation {gemm['generation']:.3f}, training"
        f" {gemm['training']:.3f}): a step of nothing else would reach {result['fraction_if_only_gemms']:.0%} of the ceiling;"
        f" the rest of the measured step is {result['measured_s'] - gemm_s:.3f} s"
    )
    print(
        f"with training cut to its GEMMs and generation as measured: {result['fraction_if_training_only_gemms']:.0%};"
        f" with generation cut to its GEMMs and training as measured: {result['fraction_if_generation_only_gemms']:.0%}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
