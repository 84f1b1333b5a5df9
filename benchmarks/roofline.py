"""How close a trial step comes to the machine: its useful FLOPs, this machine's GEMM ceiling, the fraction achieved.

Useful work of one GRPO step of a trial (the default trial's embedded tiny model, or a pretrained one with `--model`;
B rollouts, generation then one optimizer step), counted from what the step really generated (`step_flops`): the
decoder layers' matmuls (q, k, v, o, the MLP's gate, up and down; GQA's narrower k and v in their weights' size)
over the tokens that must run through the model, 2 FLOP per weight per token forward; the LM head (tied or not, a
hidden x vocab matmul) only where logits are needed: one row per distinct prompt at prefill and one per decoded
token in generation, one per completion token in training; attention, 4 x query heads x head_dim x context per
query token and layer forward; training is 3 x its forward (the backward's input and weight gradients). A
completion's last token runs through nothing useful (its successor is never sampled or scored), so it is not
counted. Each distinct prompt counts once (its G completions share its keys and values; the count with every row
paying its prompt is printed too).

The ceiling is `torch.mm` throughput measured here at the model's own GEMM shapes (decode rows x hidden, training
tokens x hidden, against each weight) in the precision each half of the step runs in: the weights' dtype, or
bfloat16 where the trial runs under bf16 autocast (`train.autocast: bfloat16` trains in bf16, and samples in bf16
too where the policy does: on a GPU, and on a CPU with an eager decoder, `Policy.generation_autocast`); the floor is each half's FLOPs at the best
shape of its precision. Then each measured step (`--steps` after warm-up, with the configured decoder) against the
floor at the ceiling measured right after it (the best shape of each precision, `--gemm-seconds`): a shared
machine's speed drifts by 20-40% over minutes, and a step is judged against the machine's speed of its own moment.
The fraction printed is the median over steps, with its quartiles. Last, the step's own GEMMs alone at its shapes
and precisions (`gemm_only_seconds`): how much of the measured step is GEMM work at the speeds these shapes really
get, and the fraction a step of nothing else could reach; and the fraction with only one half of the step
(training or generation) cut to its GEMMs, the other as measured: what the best conceivable work on one half alone
could reach.

    .venv/bin/python benchmarks/roofline.py [--threads 2] [--steps 8] [--decode auto]

The pretrained SmolLM2-135M-Instruct on `word_problems` (B 32, G 4, 96 new tokens), in float32, then with bf16
autocast in training (`--precision bf16-autocast`; `--set key=value` takes any other trial key):

    .venv/bin/python benchmarks/roofline.py --model models/smollm2-135m-instruct --task word_problems \\
        --difficulty 2 --chat-template --batch 32 --group 4 --max-new-tokens 96 --precision fp32 --steps 4
    .venv/bin/python benchmarks/roofline.py --model models/smollm2-135m-instruct --task word_problems \\
        --difficulty 2 --chat-template --batch 32 --group 4 --max-new-tokens 96 --precision bf16-autocast --steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from workbench.backends.decode import StaticDecoder, decode_widths  # noqa: E402
from workbench.config import TrialConfig, apply_overrides, build_config, set_dotted  # noqa: E402
from workbench.trial.policy import Policy, autocast_on  # noqa: E402
from workbench.trial.rollouts import PromptStream, generate_groups  # noqa: E402
from workbench.trial.step import make_optimizer, train_step  # noqa: E402
from workbench.trial.tasks import load_task  # noqa: E402

PRECISIONS: dict[str, dict[str, str]] = {
    "auto": {},
    "fp32": {"model.dtype": "float32", "train.autocast": "off"},
    "bf16-autocast": {"train.autocast": "bfloat16"},
}
"""`--precision`: the trial keys it sets. `auto` is the trial's own default (float32 on a CPU, bf16 autocast on a
GPU that has it); bfloat16 weights are `--set model.dtype=bfloat16`."""

SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def gemm_gflops(
    m: int, k: int, n: int, seconds: float = 0.5, dtype: torch.dtype = torch.float32, device: Any = "cpu"
) -> float:
    """`torch.mm` GFLOP/s of `[m, k] @ [k, n]` in `dtype`, over `seconds` (at least one product, after up to three
    warm-up products that take at most half of that: a big product in fp32 takes seconds on two cores)."""
    a, b = torch.randn(m, k, device=device).to(dtype), torch.randn(k, n, device=device).to(dtype)
    t0 = time.perf_counter()
    for _ in range(3):
        a @ b
        _sync(device)
        if time.perf_counter() - t0 > seconds / 2:
            break
    reps, t0 = 0, time.perf_counter()
    while reps == 0 or time.perf_counter() - t0 < seconds:
        a @ b
        _sync(device)
        reps += 1
    return 2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9


def matmul_weights(model) -> list[torch.Tensor]:
    """Every `nn.Linear` weight, the LM head included (once, tied to the embedding or not)."""
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def head_weight(model) -> torch.Tensor | None:
    """The LM head's `[vocab, hidden]` weight (the embedding's, where they are tied)."""
    head = model.get_output_embeddings()
    return None if head is None else head.weight


def body_weights(model) -> list[torch.Tensor]:
    """The decoder layers' matmul weights: every `nn.Linear` but the LM head."""
    head = head_weight(model)
    return [w for w in matmul_weights(model) if w is not head]


def step_flops(
    model, prompt_ids: list[list[int]], completion_lens: list[int], share_prompts: bool = True
) -> dict[str, float]:
    """Useful FLOPs of generating and training on these rollouts. With `share_prompts`, a prompt repeated across
    rows (a GRPO group) counts once, prefill and training alike: its keys and values serve every completion, and
    the step computes it once (the static decoder's prefill, the packed scorer); without, every row pays its prompt.

    Generation: the prefill runs the prompt's tokens through the layers and the head on its last one (the first
    completion token's logits, `logits_to_keep=1`); each later completion token is one decode step of the token
    before it, layers and head (the last token is never fed back). Training (3 x forward): the prompt's and the
    completion's tokens but the last through the layers, the head at every completion token (the packed scorer
    takes logits at completion positions only). Attention: each query token, against the keys up to itself."""
    cfg = model.config
    head = head_weight(model)
    per_token = 2 * sum(w.numel() for w in body_weights(model))  # the layers, forward
    logits = 0 if head is None else 2 * head.numel()  # one row of logits, forward
    heads = cfg.num_attention_heads
    width = heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)  # all query heads, GQA or not
    attn = 4 * cfg.num_hidden_layers * width  # scores and values, forward, per query token and key
    gen = train = 0.0
    seen: set[tuple[int, ...]] = set()
    for ids, c in zip(prompt_ids, completion_lens):
        p, first = len(ids), tuple(ids) not in seen or not share_prompts
        seen.add(tuple(ids))
        fed = max(c - 1, 0)  # completion tokens run through the model: all but the last
        prompt = p * per_token + attn * p * (p + 1) / 2 if first else 0.0  # query j of the prompt sees j + 1 keys
        completion = fed * per_token + attn * (fed * p + fed * (fed + 1) / 2)  # query j sees p + j + 1 keys
        gen += prompt + completion + logits * ((1 if first else 0) + fed)
        train += 3 * (prompt + completion + logits * c)
    return {"generation": gen, "training": train}


def gemm_only_seconds(
    model,
    prompt_tokens: int,
    decode_rows: list[int],
    completion_tokens: int,
    reps: int = 5,
    *,
    prompts: int = 0,
    generation_dtype: torch.dtype = torch.float32,
    training_dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Seconds the step's own GEMMs take alone, at the shapes and in the precision the step runs them, back to
    back in this process: the prefill over the distinct prompts' tokens (with the head at each of `prompts`
    distinct prompts' last token; 0 leaves it out), one decode step of each of `decode_rows` rows (layers and head:
    `decode_widths`, the rows the decoder really runs),
    and the packed training forward (prompts through the layers; completions through the layers and the head)
    with its backward (the input's and the weight's gradient of every matmul). Attention, elementwise work and
    Python are left out: a step with nothing but these could reach at most floor / this of the ceiling. Median
    over `reps`."""
    device = next(model.parameters()).device
    head = head_weight(model)

    def weights(dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        as_x_w = lambda w: w.detach().t().contiguous().to(dtype)  # noqa: E731  ([in, out], as x @ w)
        return [as_x_w(w) for w in body_weights(model)], [] if head is None else [as_x_w(head)]

    def timed(calls: list[tuple[int, bool, list[torch.Tensor]]], dtype: torch.dtype) -> float:
        acts: dict[tuple[int, int], torch.Tensor] = {}  # made in the first, untimed, repetition

        def act(m: int, d: int) -> torch.Tensor:
            if (m, d) not in acts:
                acts[(m, d)] = torch.randn(m, d, device=device).to(dtype)
            return acts[(m, d)]

        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            for m, backward, ws in calls:
                for w in ws:
                    a, g = act(m, w.shape[0]), act(m, w.shape[1])
                    a @ w
                    if backward:
                        g @ w.t()  # the input's gradient
                        a.t() @ g  # the weight's gradient
            _sync(device)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])

    body, lm = weights(generation_dtype)
    generation = [(prompt_tokens, False, body), (prompts, False, lm)] + [(m, False, body + lm) for m in decode_rows]
    out = {"generation": timed([c for c in generation if c[0] > 0], generation_dtype)}
    if training_dtype != generation_dtype:
        body, lm = weights(training_dtype)
    training = [(prompt_tokens, True, body), (completion_tokens, True, body + lm)]
    out["training"] = timed([c for c in training if c[0] > 0], training_dtype)
    return out


def trial_config(args: argparse.Namespace) -> TrialConfig:
    """The default trial, with the command line's overrides (named options, then `--set key=value`)."""
    data: dict[str, Any] = {}
    named = {
        "generation.decode": args.decode,
        "model.path": args.model,
        "task.name": args.task,
        "task.difficulty": args.difficulty,
        "task.chat_template": args.chat_template,
        "batch_size": args.batch,
        "group_size": args.group,
        "generation.max_new_tokens": args.max_new_tokens,
        **PRECISIONS[args.precision],
    }
    for key, value in named.items():
        if value is not None:
            set_dotted(data, key, value)
    return build_config(apply_overrides(data, args.set))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--decode", default="auto")
    ap.add_argument(
        "--gemm-seconds", type=float, default=0.3, help="GEMM timing beside each step (the ceiling's sample)"
    )
    ap.add_argument(
        "--gemm-tokens",
        type=int,
        help="rows of the ceiling's training shapes; default B x 40, or B x max-new-tokens when that is given",
    )
    trial = ap.add_argument_group("the trial (unset: the default trial's)")
    trial.add_argument("--model", help="a HF causal-LM directory (model.path), e.g. models/smollm2-135m-instruct")
    trial.add_argument("--task", help="task.name, e.g. word_problems")
    trial.add_argument("--difficulty", type=int, help="task.difficulty (word_problems: 1-6)")
    trial.add_argument(
        "--chat-template", action=argparse.BooleanOptionalAction, default=None, help="task.chat_template"
    )
    trial.add_argument("--batch", type=int, help="batch_size B")
    trial.add_argument("--group", type=int, help="group_size G")
    trial.add_argument("--max-new-tokens", type=int, help="generation.max_new_tokens")
    trial.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default="auto",
        help="fp32: float32 weights, no autocast; bf16-autocast: train.autocast bfloat16 (float32 weights);"
        " auto: the trial's own setting",
    )
    trial.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any trial key (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = trial_config(args)
    task = load_task(cfg.task)
    policy = Policy(cfg, task)
    model, device = policy.model, policy.device
    # each half's precision, as the step runs it: bf16 under autocast, else the weights' dtype
    weights_dtype = next(model.parameters()).dtype
    dtypes = {
        "generation": torch.bfloat16 if policy.generation_autocast else weights_dtype,
        "training": torch.bfloat16 if autocast_on(device, model, cfg.train.autocast) else weights_dtype,
    }
    weights = matmul_weights(model)
    rows_decode = cfg.batch_size
    tokens_train = args.gemm_tokens or cfg.batch_size * (args.max_new_tokens or 40)
    shapes = sorted({(m, w.shape[1], w.shape[0]) for w in weights for m in (rows_decode, tokens_train)})

    def label(dtype: torch.dtype, shape: tuple[int, int, int]) -> str:
        name = "x".join(map(str, shape))
        return name if dtype == torch.float32 else f"{SHORT.get(dtype, dtype)}:{name}"

    by_shape, best = {}, {}  # {dtype: {label: GFLOP/s}}, {dtype: its best shape}
    for dtype in dict.fromkeys(dtypes.values()):
        rates = {s: gemm_gflops(*s, dtype=dtype, device=device) for s in shapes}
        by_shape[dtype] = {label(dtype, s): round(r, 1) for s, r in rates.items()}
        best[dtype] = max(shapes, key=rates.__getitem__)

    # the rows each decode step runs: the static decoder (eager or compiled) drops finished rows, transformers' not
    sampler = getattr(policy.sample, "__self__", None)
    drops_rows = isinstance(sampler, StaticDecoder)
    compiled = drops_rows and sampler.compiled
    opt = make_optimizer(model, cfg.lr)
    prompts, gen = PromptStream(len(task.train), 0), torch.Generator().manual_seed(0)
    rows = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        fresh, out = generate_groups(
            policy, task, prompts.take(cfg.batch_size // cfg.group_size), cfg.group_size, step, gen, 0
        )
        t1 = time.perf_counter()
        train_step(policy, opt, fresh, cfg, step)
        _sync(device)
        t2 = time.perf_counter()
        print(
            f"step {step}{' (warm-up)' if step < args.warmup else ''}: generation {t1 - t0:.1f} s, training {t2 - t1:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if step >= args.warmup:
            # The machine's ceiling right beside this step (a shared machine's speed drifts over minutes): each step
            # is judged against the GEMM throughput of its own moment, at the best of the model's shapes, in the
            # precision of each half.
            at = {d: gemm_gflops(*best[d], seconds=args.gemm_seconds, dtype=d, device=device) * 1e9 for d in best}
            lens = [len(c) for c in out.completion_ids]
            f = step_flops(model, out.prompt_ids, lens)
            f["per_row_prompts"] = sum(step_flops(model, out.prompt_ids, lens, share_prompts=False).values())
            distinct = {tuple(p) for p in out.prompt_ids}
            rows.append(
                {
                    "gen_s": t1 - t0,
                    "train_s": t2 - t1,
                    "peak_gen": at[dtypes["generation"]],
                    "peak_train": at[dtypes["training"]],
                    **f,
                    "shape": (len(distinct), sum(len(p) for p in distinct), sum(lens)),
                    "widths": decode_widths(lens, drop=drops_rows, min_kept=2 if compiled else 1),
                }
            )
    med = statistics.median
    floor = [r["generation"] / r["peak_gen"] + r["training"] / r["peak_train"] for r in rows]
    frac = [fl / (r["gen_s"] + r["train_s"]) for fl, r in zip(floor, rows)]
    frac_gen = [r["generation"] / r["peak_gen"] / r["gen_s"] for r in rows]
    frac_train = [r["training"] / r["peak_train"] / r["train_s"] for r in rows]
    peak_gen, peak_train = med(r["peak_gen"] for r in rows), med(r["peak_train"] for r in rows)
    gen_s, train_s = med(r["gen_s"] for r in rows), med(r["train_s"] for r in rows)
    gen_f, train_f = med(r["generation"] for r in rows), med(r["training"] for r in rows)
    floor_s = gen_f / peak_gen + train_f / peak_train
    q = statistics.quantiles(frac, n=4) if len(frac) > 1 else [frac[0]] * 3
    # the GEMMs alone, at the median step's shapes: what a step with no other cost would take
    median_step = sorted(rows, key=lambda r: r["shape"])[len(rows) // 2]
    n_prompts, prompt_tokens, completion_tokens = median_step["shape"]
    gemm = gemm_only_seconds(
        model,
        prompt_tokens,
        median_step["widths"],
        completion_tokens,
        prompts=n_prompts,
        generation_dtype=dtypes["generation"],
        training_dtype=dtypes["training"],
    )
    gemm_s = gemm["generation"] + gemm["training"]
    mixed = dtypes["generation"] != dtypes["training"]

    def per_half(gen_value: float, train_value: float) -> Any:
        """One number where both halves share a precision (and so a ceiling), else one per half."""
        return {"generation": gen_value, "training": train_value} if mixed else gen_value

    def gflops_range(key: str) -> list[float]:
        return [round(min(r[key] for r in rows) / 1e9, 1), round(max(r[key] for r in rows) / 1e9, 1)]

    head = head_weight(model)
    result = {
        "threads": args.threads,
        "decode": args.decode,
        "model": policy.path if cfg.model.path else "embedded",
        "precision": {half: str(d).removeprefix("torch.") for half, d in dtypes.items()},
        "matmul_params": {
            "layers": sum(w.numel() for w in body_weights(model)),
            "lm_head": 0 if head is None else head.numel(),
        },
        "gemm_gflops_by_shape": {k: v for table in by_shape.values() for k, v in table.items()},
        "ceiling_gflops": per_half(round(peak_gen / 1e9, 1), round(peak_train / 1e9, 1)),
        "ceiling_gflops_range": per_half(gflops_range("peak_gen"), gflops_range("peak_train")),
        "step_gflop": round((gen_f + train_f) / 1e9, 2),
        "step_gflop_every_row_its_prompt": round(med(r["per_row_prompts"] for r in rows) / 1e9, 2),
        "floor_s": round(floor_s, 4),
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
        "fraction_if_only_gemms": round(floor_s / gemm_s, 3),
        # one half of the step cut to its GEMMs, the other as measured: what each half alone can contribute
        "fraction_if_training_only_gemms": round(floor_s / (gen_s + gemm["training"]), 3),
        "fraction_if_generation_only_gemms": round(floor_s / (gemm["generation"] + train_s), 3),
    }
    where = f", model {result['model']}" if cfg.model.path else ""
    print(f"# torch {torch.__version__}, {args.threads} threads, decode {args.decode}, {args.steps} timed steps{where}")
    for half in ("generation", "training") if mixed else ("generation",):
        d = dtypes[half]
        ceil = result["ceiling_gflops"][half] if mixed else result["ceiling_gflops"]
        span = result["ceiling_gflops_range"][half] if mixed else result["ceiling_gflops_range"]
        print(
            f"{SHORT.get(d, d)} GEMM ceiling at the model's shapes{f' ({half})' if mixed else ''}: best"
            f" {'x'.join(map(str, best[d]))}, {ceil:.0f} GFLOP/s beside the steps (range {span};"
            f" by shape at the start: {by_shape[d]})"
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
