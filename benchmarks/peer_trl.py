"""The project's trial step against TRL's GRPOTrainer on identical work, alternating processes, paired ratios.

Both sides: the same model weights (`--model DIR`, a HF causal-LM directory such as a pretrained model, loaded with
`from_pretrained`; default the embedded tiny checkpoint), the same task (`--task`, `--difficulty`, `--chat-template`)
and so the same prompt tokens (the TRL side passes the task's prompts as one user turn and lets TRL render the chat
template, and checks that its prompt ids are the project's before it starts), the same prompts per step (the task's
train examples in order: step k takes prompts k*B/G .. (k+1)*B/G - 1; TRL's dataset unshuffled), B completions per
step as B/G prompts x G (`--batch`, `--group`; default 128 = 16 x 8), the same completion limit (`--max-new-tokens`;
default the task's) and stop token (the tokenizer's EOS: the TRL side does not add the model's other `eos_token_id`s),
temperature 1, the same reward (the task's `reward(completion, example, finished)` on the completion decoded as the
project decodes it), the same learning rate (`--lr`; default the trial default) held constant, Adam with gradient
clipping at the trial's norm, on-policy GRPO (one optimizer step per batch, group-normalized advantages, PPO-clip
at 0.2, token-mean loss over the batch: TRL's `dapo`; no KL term, no reference model), the same weights' dtype
(`--dtype`, float32 by default, no autocast on either side), gradient checkpointing off. Each process runs
`--warmup` steps, then `--steps` timed ones (a step: sample the batch, reward it, one optimizer step), and reports
its median seconds per step and of them sampling (the project's `generate_groups`, TRL's `_generate_single_turn`),
its launch-to-first-step time, its peak RSS, and its completion tokens per step and mean reward, so the two sides'
work can be compared (their samples differ: each side draws from its own random stream). Process pairs alternate
which side goes first, so a busy machine slows both alike; the result is the median over pairs of TRL's median step
over the project's.

Runs in the benchmark environment (or the main one, which holds TRL too since `trainer.kind: trl`):

    make bench-env && .venv-bench/bin/python benchmarks/peer_trl.py [--pairs 4] [--steps 12] [--threads 2]

On the pretrained SmolLM2-135M-Instruct (`models/smollm2-135m-instruct`) and its chat template, on word problems:

    .venv-bench/bin/python benchmarks/peer_trl.py --model models/smollm2-135m-instruct --task word_problems \\
        --difficulty 2 --chat-template --batch 32 --group 4 --max-new-tokens 96 --lr 1e-6 [--pairs 4] [--steps 12]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def trial_settings(args) -> dict:
    """The nested trial config both sides run (`workbench.config.build_config`)."""
    task = {"name": args.task, "chat_template": args.chat_template}
    if args.difficulty is not None:
        task["difficulty"] = args.difficulty
    if args.task_path is not None:
        task["path"] = args.task_path
    data = {
        "model": {"path": args.model, "dtype": args.dtype, "device": args.device},
        "task": task,
        "generation": {"decode": args.decode, "temperature": 1.0, "max_new_tokens": args.max_new_tokens},
        "train": {"gradient_checkpointing": False, "autocast": "off"},
        "lr_warmup_steps": 0,
        "threads": args.threads,
    }
    for key, value in (("batch_size", args.batch), ("group_size", args.group), ("lr", args.lr)):
        if value is not None:
            data[key] = value
    return data


def _setup(args):
    import torch

    from workbench.config import build_config
    from workbench.trial.checkpoint import ensure_embedded_checkpoint
    from workbench.trial.tasks import load_task

    torch.set_num_threads(args.threads)
    cfg = build_config(trial_settings(args))
    task = load_task(cfg.task)
    path = cfg.model.path or str(ensure_embedded_checkpoint(cfg.model, cfg.task, task))
    return cfg, task, path


def _prompts(cfg, step: int) -> list[int]:
    """The train-prompt indices of a step: the task's examples in order (TRL's unshuffled dataset)."""
    n = cfg.batch_size // cfg.group_size
    return list(range(step * n, (step + 1) * n))


def _summary(side: str, times, gen_times, first, tokens: list[int], rewards: list[float], warmup: int) -> dict:
    return {
        "side": side,
        "step_s": statistics.median(times),
        "sampling_s": statistics.median(gen_times[warmup:]),
        "launch_to_first_step_s": first,
        "completion_tokens_per_step": statistics.mean(tokens[warmup:]),
        "mean_reward": statistics.mean(rewards[warmup:]),
        "times": times,
        "tokens": tokens,
    }


def run_project(args) -> dict:
    import torch

    from workbench.trial.policy import Policy
    from workbench.trial.rollouts import generate_groups
    from workbench.trial.step import make_optimizer, train_step

    cfg, task, _ = _setup(args)
    policy = Policy(cfg, task)
    opt = make_optimizer(policy.model, cfg.lr)
    gen = torch.Generator(device=policy.device).manual_seed(0)
    times, gen_times, tokens, rewards, first = [], [], [], [], None
    for step in range(args.warmup + args.steps):
        t = time.perf_counter()
        fresh, _ = generate_groups(policy, task, _prompts(cfg, step), cfg.group_size, step, gen, 0)
        gen_times.append(time.perf_counter() - t)
        train_step(policy, opt, fresh, cfg, step)
        if policy.device.type == "cuda":
            torch.cuda.synchronize()
        if first is None:
            first = time.perf_counter() - T0
        if step >= args.warmup:
            times.append(time.perf_counter() - t)
        tokens.append(sum(len(r.completion_ids) for r in fresh))
        rewards.append(statistics.mean(r.reward for r in fresh))
    return _summary("project", times, gen_times, first, tokens, rewards, args.warmup)


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.backends.hf import encode_prompts

    cfg, task, path = _setup(args)
    device = "cuda" if cfg.model.device == "auto" and torch.cuda.is_available() else cfg.model.device
    if device.startswith("cuda"):  # as the project's Policy runs its fp32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:  # what the project's loader does (TRL would do the same)
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.float32 if cfg.model.dtype == "auto" else getattr(torch, cfg.model.dtype)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    # The project stops a completion at the tokenizer's EOS only; TRL also stops at every `eos_token_id` of the
    # model's generation config, so that is set to the tokenizer's.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    n_steps = args.warmup + args.steps
    examples = task.train[: n_steps * cfg.batch_size // cfg.group_size]
    chat = cfg.task.chat_template
    prompts = [[{"role": "user", "content": e.prompt}] if chat else e.prompt for e in examples]
    data = Dataset.from_dict({"prompt": prompts, "idx": list(range(len(examples)))})
    eos = tokenizer.eos_token_id
    tokens, rewards, gen_times = [], [], []

    def reward(completions, completion_ids, idx, **_):
        # The project's reward on the project's decoding: EOS cut off, special tokens skipped, finished = ended at EOS
        done = [len(ids) > 0 and ids[-1] == eos for ids in completion_ids]
        texts = tokenizer.batch_decode(
            [ids[:-1] if d else ids for ids, d in zip(completion_ids, done)], skip_special_tokens=True
        )
        out = [task.reward(t, examples[i], d) for t, i, d in zip(texts, idx, done)]
        tokens.append(sum(len(ids) for ids in completion_ids))
        rewards.append(statistics.mean(out))
        return out

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.first, self.t = [], None, 0.0

        def on_step_begin(self, *a, **k):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **k):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if self.first is None:
                self.first = time.perf_counter() - T0
            self.times.append(time.perf_counter() - self.t)

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=cfg.batch_size,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_generations=cfg.group_size,
            shuffle_dataset=False,
            max_completion_length=cfg.generation.max_new_tokens or task.max_new_tokens,
            temperature=cfg.generation.temperature,
            top_p=1.0,
            top_k=0,
            learning_rate=cfg.lr,
            beta=0.0,
            num_iterations=1,
            epsilon=cfg.objective.eps_low,
            epsilon_high=cfg.objective.eps_high,
            loss_type="dapo",
            scale_rewards="group",
            max_steps=n_steps,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=cfg.grad_clip,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            use_cpu=device == "cpu",
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=config,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[clock],
        )
        # The same prompt tokens on both sides: TRL's tokenization of the first step's prompts against the project's
        head = examples[: cfg.batch_size // cfg.group_size]
        theirs = [list(ids) for ids in trainer._tokenize_prompts(prompts[: len(head)])[0]]
        if theirs != encode_prompts(tokenizer, [e.prompt for e in head], chat=chat):
            raise SystemExit("peer_trl: TRL's prompt tokens differ from the project's")
        generate = trainer._generate_single_turn

        def timed_generate(*a, **k):  # TRL's sampling time, as the project's `generate_groups` is timed
            t = time.perf_counter()
            out = generate(*a, **k)
            gen_times.append(time.perf_counter() - t)
            return out

        trainer._generate_single_turn = timed_generate
        trainer.train()
    return _summary("trl", clock.times[args.warmup :], gen_times, clock.first, tokens, rewards, args.warmup)


def child(args) -> None:
    result = run_project(args) if args.side == "project" else run_trl(args)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result), flush=True)


def settings_used(args) -> dict:
    """What both sides ran, resolved (the defaults filled in)."""
    from workbench.config import build_config
    from workbench.trial.tasks import load_task

    cfg = build_config(trial_settings(args))
    task = load_task(cfg.task)
    return {
        "model": args.model or "embedded",
        "task": cfg.task.name,
        "difficulty": cfg.task.difficulty if cfg.task.name == "word_problems" else None,
        "chat_template": cfg.task.chat_template,
        "batch": cfg.batch_size,
        "group": cfg.group_size,
        "prompts_per_step": cfg.batch_size // cfg.group_size,
        "max_new_tokens": cfg.generation.max_new_tokens or task.max_new_tokens,
        "temperature": cfg.generation.temperature,
        "lr": cfg.lr,
        "dtype": args.dtype,
        "device": args.device,
        "threads": args.threads,
        "project_decode": args.decode,
        "beta": 0.0,
        "pairs": args.pairs,
        "steps": args.steps,
        "warmup": args.warmup,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", default="auto", help="the project's generation.decode")
    ap.add_argument("--model", help="a HF causal-LM directory (default: the embedded checkpoint of the task)")
    ap.add_argument("--task", default="arithmetic", help="task.name (default arithmetic)")
    ap.add_argument("--task-path", help="task.path (a JSONL file, for --task jsonl)")
    ap.add_argument("--difficulty", type=int, help="task.difficulty of word_problems (default: the config's)")
    ap.add_argument("--chat-template", action="store_true", help="frame prompts with the tokenizer's chat template")
    ap.add_argument("--batch", type=int, help="B, completions per step (default: the trial default, 128)")
    ap.add_argument("--group", type=int, help="G, completions per prompt (default: the trial default, 8)")
    ap.add_argument("--max-new-tokens", type=int, help="completion limit (default: the task's)")
    ap.add_argument("--lr", type=float, help="learning rate, constant (default: the trial default)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="both sides' weights")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (both sides)")
    ap.add_argument("--side", choices=["project", "trl"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.model is not None:
        args.model = os.path.abspath(args.model)
    if args.side:
        return child(args)
    settings = settings_used(args)
    print("# settings: " + json.dumps(settings), flush=True)
    results = {"project": [], "trl": []}
    for pair in range(args.pairs):
        for side in ["project", "trl"] if pair % 2 == 0 else ["trl", "project"]:
            cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--side", side]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"peer_trl: the {side} process failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
            results[side].append(json.loads(line[len("RESULT ") :]))
            r = results[side][-1]
            print(
                f"pair {pair} {side:7s}: {r['step_s']:.3f} s/step, first step at {r['launch_to_first_step_s']:.1f} s,"
                f" sampling {r['sampling_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB, {r['completion_tokens_per_step']:.0f} completion tokens/step,"
                f" mean reward {r['mean_reward']:.3f}",
                flush=True,
            )
    ratios = [t["step_s"] / p["step_s"] for p, t in zip(results["project"], results["trl"])]
    med = statistics.median
    print(
        f"\n# {args.pairs} process pairs x {args.steps} timed steps ({args.warmup} warm-up), {args.threads} threads,"
        f" project decode {args.decode}; {settings['model']}, {settings['task']}, B {settings['batch']}"
        f" = {settings['prompts_per_step']} x {settings['group']}, max {settings['max_new_tokens']} new tokens,"
        f" {args.dtype} on {args.device}"
    )
    print(
        "| | median s/step | of it sampling (s) | launch to first step (s) | peak RSS (MB) | completion tokens/step"
        " | mean reward |"
    )
    print("|---|---|---|---|---|---|---|")
    for side in ("project", "trl"):
        rs = results[side]
        print(
            f"| {side} | {med(r['step_s'] for r in rs):.3f} | {med(r['sampling_s'] for r in rs):.3f} | {med(r['launch_to_first_step_s'] for r in rs):.1f} |"
            f" {med(r['peak_rss_mb'] for r in rs):.0f} | {med(r['completion_tokens_per_step'] for r in rs):.0f} |"
            f" {med(r['mean_reward'] for r in rs):.3f} |"
        )
    print(
        f"TRL / project step time, median of paired ratios: {med(ratios):.2f} [min {min(ratios):.2f}, max {max(ratios):.2f}]"
    )
    print(
        json.dumps(
            {
                "settings": settings,
                "ratios": ratios,
                **{
                    k: [{kk: vv for kk, vv in r.items() if kk not in ("times", "tokens")} for r in v]
                    for k, v in results.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
