"""One trial: GRPO with a replay buffer, from a config to MLflow (design §2).

    loop until the budget is spent:
        fresh = generate strategy.groups(step) whole groups       # generate_groups
        batch = strategy.batch(fresh, step)                       # a registered strategy (owns the buffer)
        loss  = objective(policy, batch)                          # a registered objective
        optimizer step unless strategy.gate(...)                  # train_step (dgg may drop the update)
        account compute; log metrics                              # ComputeMeter, TrialLogger
        every eval.every steps: evaluate on the held-out set      # Evaluator
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from workbench.compute import ComputeMeter
from workbench.config import TrialConfig, flatten
from workbench.evaluation import Evaluator
from workbench.generation import encode_prompts, sample, score
from workbench.objectives import OBJECTIVES, ObjectiveInput, ObjectiveOutput, ratio_stats
from workbench.policy import count_parameters, ensure_embedded_checkpoint, load_policy, resolve_device, resolve_dtype
from workbench.replay import Rollout, batch_stats, group_advantages
from workbench.strategies import StrategyContext, make_strategy
from workbench.tasks import Task, load_task
from workbench.tracking import TrialLogger, resolve_tracking_uri


class TrialDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite."""


class TrialStopped(Exception):
    """Raised by an `on_eval` hook to end a trial early (a pruner): the run ends FINISHED, tagged `stopped`."""


@dataclass
class StepRecord:
    """What one optimizer step did; handed to an observer (tests check invariants on what was really trained)."""

    step: int
    fresh: list[Rollout]
    batch: list[Rollout]
    loss: float
    metrics: dict[str, float]


@dataclass
class TrialResult:
    run_id: str | None
    metrics: dict[str, float]
    """The `final/*` metrics."""
    evals: list[dict[str, float]] = field(default_factory=list)
    """One row per evaluation: step, compute units, accuracy, pass@k, cumulative generated and trained rollouts,
    cumulative generation + training seconds (so compute can be re-accounted at another mu)."""


class PromptStream:
    """Train prompts in a seeded order, reshuffled every epoch: deterministic for the trial seed.

    `subset` restricts the stream to those train indices (a strategy's own prompt set, e.g. rlep's pool)."""

    def __init__(self, n: int, seed: int, subset: list[int] | None = None):
        self.subset = np.asarray(subset if subset is not None else range(n))
        self.n, self.rng, self.order, self.pos = len(self.subset), np.random.default_rng([seed, 0]), np.arange(0), 0

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos >= len(self.order):
                self.order, self.pos = self.rng.permutation(self.n), 0
            take = min(k - len(out), len(self.order) - self.pos)
            out.extend(int(self.subset[i]) for i in self.order[self.pos : self.pos + take])
            self.pos += take
        return out


class Policy:
    """The model, its tokenizer and the sampling settings of a trial."""

    def __init__(self, cfg: TrialConfig, task: Task, log: Callable[[str], None]):
        device = resolve_device(cfg.model.device)
        path = cfg.model.path or ensure_embedded_checkpoint(cfg.model, cfg.task, task, log=log)
        self.model, self.tokenizer = load_policy(path, device, resolve_dtype(cfg.model.dtype, device))
        self.device, self.path = device, str(path)
        self.max_new_tokens = cfg.generation.max_new_tokens or task.max_new_tokens
        self.temperature = cfg.generation.temperature
        self.pad_id = self.tokenizer.pad_token_id
        self.engine = None
        """The vLLM engine when `generation.backend` is `vllm` (the hf backend samples with `self.model`)."""
        if cfg.generation.backend == "vllm":
            from workbench.vllm_engine import VllmSampler

            prompts = [e.prompt for e in task.train[:2000] + task.eval]
            longest = max(len(p) for p in encode_prompts(self.tokenizer, prompts))
            dtype = next(self.model.parameters()).dtype
            self.engine = VllmSampler(self.path, cfg, longest + self.max_new_tokens + 16, dtype, device)


def generate_groups(
    policy: Policy, task: Task, prompt_indices: list[int], group_size: int, step: int, generator: torch.Generator, first_uid: int
):
    """Sample `group_size` completions per prompt; rewards, group advantages and behaviour log-probs are frozen here."""
    examples = [task.train[i] for i in prompt_indices]
    prompt_ids = [p for p in encode_prompts(policy.tokenizer, [e.prompt for e in examples]) for _ in range(group_size)]
    policy.model.eval()
    trainer_logprobs = None
    if policy.engine is not None:
        # Rollouts of a lagging engine are as old as its weights: age them from the engine's weight version.
        step = policy.engine.version
        out = policy.engine.sample(policy.tokenizer, prompt_ids, max_new_tokens=policy.max_new_tokens,
                                   temperature=policy.temperature, generator=generator)
        with torch.no_grad():  # the trainer's view of the same tokens: mismatch metrics, entropy, TIS correction
            lp, _, entropy = score(policy.model, out.prompt_ids, out.completion_ids, temperature=policy.temperature,
                                   pad_id=policy.pad_id, with_entropy=True)
        trainer_logprobs = [lp[i, : len(c)].cpu() for i, c in enumerate(out.completion_ids)]
        out.entropy_sum = entropy
    else:
        out = sample(
            policy.model,
            policy.tokenizer,
            prompt_ids,
            max_new_tokens=policy.max_new_tokens,
            temperature=policy.temperature,
            generator=generator,
        )
    rollouts = []
    for g, (idx, ex) in enumerate(zip(prompt_indices, examples)):
        rows = range(g * group_size, (g + 1) * group_size)
        rewards = [task.reward(out.texts[i], ex, out.finished[i]) for i in rows]
        advantages = group_advantages(rewards)
        mean_reward = float(np.mean(rewards))
        for j, i in enumerate(rows):
            rollouts.append(
                Rollout(
                    uid=first_uid + i,
                    prompt_index=idx,
                    group=first_uid // group_size + g,
                    prompt_ids=out.prompt_ids[i],
                    completion_ids=out.completion_ids[i],
                    behaviour_logprobs=out.logprobs[i],
                    reward=rewards[j],
                    advantage=advantages[j],
                    group_mean_reward=mean_reward,
                    birth_step=step,
                    trainer_logprobs=None if trainer_logprobs is None else trainer_logprobs[i],
                )
            )
    return rollouts, out


def objective_input(policy: Policy, batch: list[Rollout], correction_cap: float | None = None) -> ObjectiveInput:
    """Score the batch under the current policy (with grad) and line up its frozen generation-time data."""
    logprobs, mask = score(
        policy.model,
        [r.prompt_ids for r in batch],
        [r.completion_ids for r in batch],
        temperature=policy.temperature,
        pad_id=policy.pad_id,
    )
    behaviour = torch.zeros_like(logprobs)
    for i, r in enumerate(batch):
        behaviour[i, : len(r.behaviour_logprobs)] = r.behaviour_logprobs.to(behaviour.device)
    weights = None
    if correction_cap is not None and any(r.trainer_logprobs is not None for r in batch):
        # Truncated IS for the train/inference mismatch (TRL, verl): the trainer's log-probs at generation are the
        # PPO ratio's old policy, and each token's loss is weighted by min(pi_trainer / pi_engine, cap).
        trainer = behaviour.clone()
        for i, r in enumerate(batch):
            if r.trainer_logprobs is not None:
                trainer[i, : len(r.trainer_logprobs)] = r.trainer_logprobs.to(trainer.device)
        weights = torch.clamp(torch.exp((trainer - behaviour) * mask), max=correction_cap).detach()
        behaviour = trainer
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.float32, device=logprobs.device)  # noqa: E731
    return ObjectiveInput(
        token_weights=weights,
        logprobs=logprobs,
        mask=mask,
        behaviour_logprobs=behaviour,
        advantages=as_tensor([r.advantage for r in batch]),
        rewards=as_tensor([r.reward for r in batch]),
        group_mean_rewards=as_tensor([r.group_mean_reward for r in batch]),
    )


def rescore(policy: Policy, rollouts: list[Rollout]) -> None:
    """Replace the rollouts' behaviour log-probs by the current policy's (no grad): RLEP's recomputed old log-probs."""
    if not rollouts:
        return
    policy.model.eval()
    with torch.no_grad():
        logprobs, _ = score(policy.model, [r.prompt_ids for r in rollouts], [r.completion_ids for r in rollouts],
                            temperature=policy.temperature, pad_id=policy.pad_id)
    for i, r in enumerate(rollouts):
        r.behaviour_logprobs = logprobs[i, : len(r.completion_ids)].detach().cpu()
        r.trainer_logprobs = None  # the old policy is now the trainer's own: no engine mismatch to correct


def train_step(
    policy: Policy, optimizer, batch: list[Rollout], cfg: TrialConfig, step: int, gate: Callable[[object, int], bool] | None = None
) -> tuple[ObjectiveOutput, float, bool]:
    """One optimizer step of the configured objective on `batch`; returns its output, the gradient norm and
    whether the step was applied (`gate`, called after backward, may drop it: its gradients are set to None,
    so the optimizer skips every parameter and its state is untouched)."""
    policy.model.train()
    cap = cfg.generation.mismatch_cap if cfg.generation.mismatch_correction == "tis" else None
    inp = objective_input(policy, batch, cap)
    out = OBJECTIVES[cfg.objective.name](inp, cfg.objective)
    out.stats = ratio_stats(inp)
    if not torch.isfinite(out.loss):
        raise TrialDiverged(f"loss is {out.loss.item()} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    if gate is not None and gate(policy.model, step):
        optimizer.zero_grad(set_to_none=True)
        return out, 0.0, False
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.grad_clip))
    if not math.isfinite(grad_norm):
        raise TrialDiverged(f"gradient norm is {grad_norm} at step {step}")
    optimizer.step()
    return out, grad_norm, True


def _budget_left(cfg: TrialConfig, step: int, meter: ComputeMeter) -> bool:
    if cfg.budget.steps is not None and step >= cfg.budget.steps:
        return False
    return cfg.budget.compute_units is None or meter.units < cfg.budget.compute_units


def run_trial(
    cfg: TrialConfig,
    *,
    tracking_uri: str | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
    tags: dict[str, str] | None = None,
    observer: Callable[[StepRecord], None] | None = None,
    progress: Callable[[str], None] = lambda msg: None,
    on_run_created: Callable[[str], None] | None = None,
    on_eval: Callable[[dict[str, float]], None] | None = None,
) -> TrialResult:
    """Run one trial to its budget, logging to MLflow; a crash ends the run FAILED (KILLED on Ctrl-C) and re-raises."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    task = load_task(cfg.task)
    progress(
        f"trial: B={cfg.batch_size} G={cfg.group_size} ratio={cfg.replay.ratio:g} capacity={cfg.capacity}"
        f" horizon={cfg.replay.horizon} strategy={cfg.replay.strategy} objective={cfg.objective.name}"
        f" budget={cfg.budget.compute_units or '-'} units / {cfg.budget.steps or '-'} steps"
    )
    logger = TrialLogger(resolve_tracking_uri(tracking_uri), cfg.experiment, run_name, parent_run_id, tags)
    if on_run_created:
        on_run_created(logger.run_id)
    try:
        logger.log_params(flatten(cfg))
        result = _train(cfg, task, logger, observer, progress, on_eval)
        logger.set_tags({"workbench.status": "finished"})
        logger.end("FINISHED")
        return result
    except TrialStopped as err:
        logger.set_tags({"workbench.status": "stopped", "workbench.failure": f"stopped early: {err}"})
        logger.end("FINISHED")
        raise
    except KeyboardInterrupt:
        logger.set_tags({"workbench.status": "interrupted", "workbench.failure": "KeyboardInterrupt"})
        logger.end("KILLED")
        raise
    except BaseException as err:
        logger.set_tags({"workbench.status": "failed", "workbench.failure": f"{type(err).__name__}: {err}"[:5000]})
        logger.end("FAILED")
        raise


def _train(cfg: TrialConfig, task: Task, logger: TrialLogger, observer, progress, on_eval) -> TrialResult:
    t_start = time.perf_counter()
    policy = Policy(cfg, task, log=progress)
    logger.set_tags({"workbench.model_path": policy.path, "workbench.device": str(policy.device)})
    B, G = cfg.batch_size, cfg.group_size
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=cfg.lr)
    strategy = make_strategy(cfg, StrategyContext(task, policy.tokenizer, lambda rs: rescore(policy, rs), progress, policy.max_new_tokens))
    meter = ComputeMeter(B, count_parameters(policy.model), cfg.compute.mu)
    prompts = PromptStream(len(task.train), cfg.seed, strategy.prompts(len(task.train)))
    sampler = torch.Generator(device=policy.device).manual_seed(cfg.seed)
    replay_rng = np.random.default_rng([cfg.seed, 1])
    evaluate = Evaluator(
        task,
        policy.tokenizer,
        k=cfg.eval.k,
        pass_k_prompts=cfg.eval.pass_k_prompts,
        max_new_tokens=policy.max_new_tokens,
        temperature=policy.temperature,
        seed=cfg.seed,
        device=policy.device,
    )
    evals: list[dict[str, float]] = []
    ages_seen: Counter[int] = Counter()
    next_uid = 0
    updates = 0

    def run_eval(step: int) -> None:
        res = evaluate(policy.model)
        row = {
            "step": step,
            "compute_units": meter.units,
            "accuracy": res.accuracy,
            "pass_at_k": res.pass_at_k,
            "gen_rollouts": meter.gen_rollouts,
            "train_rollouts": meter.train_rollouts,
            "seconds": meter.seconds["gen"] + meter.seconds["train"],
        }
        evals.append(row)
        logger.log_metrics({"eval/accuracy": res.accuracy, "eval/pass_at_k": res.pass_at_k, "compute/units": meter.units}, step)
        progress(
            f"step {step:5d}  units {meter.units:8.1f}  acc {res.accuracy:.3f}  pass@{res.k} {res.pass_at_k:.3f}"
            f"  mu {meter.mu:.2f}  {time.perf_counter() - t_start:6.1f}s"
        )
        if on_eval:
            on_eval(row)

    run_eval(0)
    step = 0
    while _budget_left(cfg, step, meter):
        groups = strategy.groups(step)
        fresh: list[Rollout] = []
        out = None
        if groups:
            with meter.timed("gen"):
                if policy.engine is not None and step - policy.engine.version >= cfg.generation.sync_every:
                    policy.engine.sync(policy.model, step)  # weight transfer: generation-side cost
                fresh, out = generate_groups(policy, task, prompts.take(groups), G, step, sampler, next_uid)
            next_uid += len(fresh)
            meter.gen_tokens += out.generated_tokens
            meter.prefill_tokens += out.prefill_tokens

        with meter.timed("train"):  # a strategy may score rollouts (rlep): training-side compute
            batch = strategy.batch(fresh, step, replay_rng)
        metrics: dict[str, float] = {}
        if batch:
            with meter.timed("train"):
                obj, grad_norm, applied = train_step(policy, optimizer, batch, cfg, step, strategy.gate)
            meter.train_tokens += sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
            for r in batch:
                r.uses += 1
            stats = batch_stats(batch, step)
            ages_seen.update(stats.ages)
            updates += int(applied)
            metrics.update({
                "train/loss": float(obj.loss.detach()),
                "train/grad_norm": grad_norm,
                "train/batch_size": len(batch),
                "replay/age_mean": stats.age_mean,
                "replay/age_max": stats.age_max,
                "replay/uses_mean": stats.uses_mean,
                "offpolicy/ratio_mean": obj.ratio_mean,
                "offpolicy/clip_frac": obj.clip_frac,
                **{f"offpolicy/{k}": v for k, v in (obj.stats or {}).items()},
            })
        meter.step(len(fresh), len(batch))
        metrics.update({
            "train/updates": updates,
            "compute/units": meter.units,
            "compute/gen_tokens": meter.gen_tokens,
            "compute/train_tokens": meter.train_tokens,
            "compute/gen_rollouts": meter.gen_rollouts,
            "compute/train_rollouts": meter.train_rollouts,
            "compute/gen_seconds": meter.seconds["gen"],
            "compute/train_seconds": meter.seconds["train"],
            "compute/flops": meter.flops["total"],
            "compute/mu": meter.mu,
            "replay/buffer_size": strategy.size(),
            "replay/fresh": len(fresh),
            **strategy.metrics(),
        })
        if fresh and policy.engine is not None:
            diff = torch.cat([(r.behaviour_logprobs - r.trainer_logprobs).abs() for r in fresh])
            metrics.update({
                "mismatch/logprob_abs_mean": float(diff.mean()),
                "mismatch/logprob_abs_max": float(diff.max()),
                "mismatch/engine_lag": step - policy.engine.version,
                "mismatch/syncs": policy.engine.syncs,
            })
        if fresh:
            metrics["train/reward_mean"] = float(np.mean([r.reward for r in fresh]))
            metrics["policy/entropy"] = out.entropy_mean
            metrics["train/completion_length"] = out.generated_tokens / len(fresh)
        logger.log_metrics(metrics, step)
        if observer:
            observer(StepRecord(step, fresh, batch, metrics.get("train/loss", float("nan")), metrics))
        step += 1
        if step % cfg.eval.every == 0 or not _budget_left(cfg, step, meter):
            run_eval(step)

    final = _final_metrics(cfg, evals, meter, step, updates, time.perf_counter() - t_start)
    logger.log_metrics(final, step)
    logger.log_text(json.dumps({"age_counts": {str(k): v for k, v in sorted(ages_seen.items())}}), "replay/age_histogram.json")
    logger.log_text(json.dumps(evals), "eval/curve.json")
    return TrialResult(logger.run_id, final, evals)


def _final_metrics(cfg: TrialConfig, evals, meter: ComputeMeter, steps: int, updates: int, wall: float) -> dict[str, float]:
    reached = [e for e in evals if e["accuracy"] >= cfg.eval.target_accuracy]
    final = {
        "final/accuracy": evals[-1]["accuracy"],
        "final/best_accuracy": max(e["accuracy"] for e in evals),
        "final/initial_accuracy": evals[0]["accuracy"],
        "final/pass_at_k": evals[-1]["pass_at_k"],
        "final/compute_units": meter.units,
        "final/censored": 0.0 if reached else 1.0,
        "final/steps": steps,
        "final/updates": updates,
        "final/mu": meter.mu,
        "final/gen_seconds": meter.seconds["gen"],
        "final/train_seconds": meter.seconds["train"],
        "final/wall_seconds": wall,
        "final/gen_rollouts": meter.gen_rollouts,
        "final/train_rollouts": meter.train_rollouts,
        "final/replay_ratio": meter.train_rollouts / max(meter.gen_rollouts, 1),
    }
    if meter.measured_mu is not None:
        final["final/mu_measured"] = meter.measured_mu
    if reached:
        final["final/compute_to_target"] = reached[0]["compute_units"]
        final["final/steps_to_target"] = reached[0]["step"]
    return final
