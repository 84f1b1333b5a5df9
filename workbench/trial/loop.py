"""One trial: GRPO with a replay buffer, from a config to MLflow (design §2).

    loop until the budget is spent:
        fresh = generate strategy.groups(step) whole groups       # rollouts.generate_groups
        batch = strategy.batch(fresh, step)                       # a registered strategy (owns the buffer)
        loss  = objective(policy, batch)                          # step.train_step: a registered objective
        optimizer step unless strategy.gate(...)                  # (dgg may drop the update)
        account compute; log metrics                              # compute.ComputeMeter, tracking.RunLogger
        every eval.every steps: evaluate on the held-out set      # evaluation.Evaluator
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from workbench import progress, tracking
from workbench.compute import ComputeMeter, to_target
from workbench.estimators import curve_summary, readings
from workbench.config import TrialConfig, flatten
from workbench.trial.evaluation import Evaluator
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.replay import Rollout, batch_stats
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import make_optimizer, rescore, train_step
from workbench.trial.strategies import StrategyContext, make_strategy
from workbench.trial.tasks import Task, load_task

log = logging.getLogger(__name__)


class TrialStopped(tracking.RunStopped):
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
    run_id: str
    metrics: dict[str, float]
    """The `final/*` metrics."""
    evals: list[dict[str, float]] = field(default_factory=list)
    """One row per evaluation: step, compute units, accuracy, pass@k, cumulative generated and trained rollouts,
    cumulative generation + training seconds (so compute can be re-accounted at another mu)."""


def run_trial(
    cfg: TrialConfig,
    *,
    parent_run_id: str | None = None,
    run_name: str | None = None,
    tags: dict[str, str] | None = None,
    observer: Callable[[StepRecord], None] | None = None,
    on_run_created: Callable[[str], None] | None = None,
    on_eval: Callable[[dict[str, float]], None] | None = None,
    inspect: Callable[[int, list[Rollout], list[Rollout], Policy], dict[str, float] | None] | None = None,
    show_progress: bool = False,
    run: tracking.RunLogger | None = None,
) -> TrialResult:
    """Run one trial to its budget, logging to `cfg.tracking`; a crash ends the run FAILED (KILLED on Ctrl-C) and
    re-raises. `show_progress` draws a bar of the budget on the terminal (log lines report the evaluations).
    `run`: a run already opened for this trial (`workbench train` opens it in a helper process,
    `run_process.RunProcess`); by default a new in-process run. `inspect(step, batch, held, policy)` is called
    before each optimizer step with the batch about to be trained and the rollouts the strategy holds (the probe
    measures gradients there); it must leave the model as it found it, and the metrics it returns are logged with
    the step's."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    task = load_task(cfg.task)
    log.info(
        f"trial: B={cfg.batch_size} G={cfg.group_size} ratio={cfg.replay.ratio:g} capacity={cfg.replay.capacity}"
        f" horizon={cfg.replay.horizon} strategy={cfg.replay.strategy} objective={cfg.objective.name}"
        f" budget={cfg.budget.compute_units or '-'} units / {cfg.budget.steps or '-'} steps"
    )
    if run is None:
        run = tracking.RunLogger(cfg.tracking.uri, cfg.tracking.experiment, run_name, parent_run_id, tags)
    run_id = run.run_id  # a run that could not be created raises here, before the trial starts
    if on_run_created:
        on_run_created(run_id)
    with tracking.run_lifecycle(run):
        run.log_params(flatten(cfg))
        return _train(cfg, task, run, observer, on_eval, show_progress, inspect)


def _budget_left(cfg: TrialConfig, step: int, meter: ComputeMeter) -> bool:
    if cfg.budget.steps is not None and step >= cfg.budget.steps:
        return False
    return cfg.budget.compute_units is None or meter.units < cfg.budget.compute_units


class EvalSchedule:
    """When to evaluate: every `every` optimizer steps, or, with `every_units`, at the first step at or past each
    multiple of `every_units` compute units (several multiples crossed in one step give one evaluation)."""

    def __init__(self, every: int, every_units: float | None):
        self.every, self.every_units = every, every_units
        self.next_units = every_units

    def due(self, step: int, units: float) -> bool:
        if self.every_units is None:
            return step % self.every == 0
        if units + 1e-9 < self.next_units:
            return False
        self.next_units = (int((units + 1e-9) // self.every_units) + 1) * self.every_units
        return True


def _budget_bar(cfg: TrialConfig, enabled: bool):
    """A bar over the budget that ends first: compute units when set, else steps."""
    if cfg.budget.compute_units is not None:
        return progress.bar(cfg.budget.compute_units, "trial", "units", enabled)
    return progress.bar(cfg.budget.steps, "trial", "steps", enabled)


def _train(cfg: TrialConfig, task: Task, run: tracking.RunLogger, observer, on_eval, show_progress: bool, inspect=None) -> TrialResult:
    t_start = time.perf_counter()
    policy = Policy(cfg, task)
    run.set_tags({tracking.MODEL_PATH: policy.path, tracking.DEVICE: str(policy.device)})
    B, G = cfg.batch_size, cfg.group_size
    optimizer = make_optimizer(policy.model, cfg.lr)
    warmup = cfg.lr_warmup_steps
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / (warmup + 1)))
    strategy = make_strategy(cfg, StrategyContext(task, policy.tokenizer, lambda rs: rescore(policy, rs), policy.max_new_tokens))
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
        sampler=policy.sample,
    )
    evals: list[dict[str, float]] = []
    ages_seen: Counter[int] = Counter()
    next_uid = 0
    updates = 0
    bar = _budget_bar(cfg, show_progress)
    schedule = EvalSchedule(cfg.eval.every, cfg.eval.every_units)

    eval_seconds = 0.0

    def run_eval(step: int, last: bool = False) -> None:
        nonlocal eval_seconds
        t_eval = time.perf_counter()
        with_k, with_demo = cfg.eval.samples_at(len(evals), last)
        res = evaluate(policy.model, pass_k=with_k, demo_prob=with_demo)
        eval_seconds += time.perf_counter() - t_eval
        row = {
            "step": step,
            "compute_units": meter.units,
            "accuracy": res.accuracy,
            "pass_at_k": res.pass_at_k,
            "mean_at_k": res.mean_at_k,
            "demo_prob": res.demo_prob,
            "gen_rollouts": meter.gen_rollouts,
            "train_rollouts": meter.train_rollouts,
            "seconds": meter.seconds["gen"] + meter.seconds["train"],
        }
        evals.append(row)
        logged = {tracking.EVAL_ACCURACY: res.accuracy, tracking.COMPUTE_UNITS: meter.units}
        if res.demo_prob is not None:
            logged[tracking.EVAL_DEMO_PROB] = res.demo_prob
        if res.pass_at_k is not None:
            logged[tracking.EVAL_PASS_AT_K] = res.pass_at_k
            logged[tracking.EVAL_MEAN_AT_K] = res.mean_at_k
        run.log_metrics(logged, step)
        pass_k = "  -  " if res.pass_at_k is None else f"{res.pass_at_k:.3f}"
        demo = "  -  " if res.demo_prob is None else f"{res.demo_prob:.3f}"
        log.info(
            f"step {step:5d}  units {meter.units:8.1f}  acc {res.accuracy:.3f}  pass@{res.k} {pass_k}  demo {demo}"
            f"  mu {meter.mu:.2f}  {time.perf_counter() - t_start:6.1f}s"
        )
        bar.set_postfix(acc=f"{res.accuracy:.3f}", refresh=False)
        if on_eval:
            on_eval(row)

    with progress.bar_safe_logging(show_progress), bar:
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
            if batch and inspect is not None:
                metrics.update(inspect(step, batch, strategy.held(), policy) or {})  # outside the meter: not training compute
            if batch:
                with meter.timed("train"):
                    obj, grad_norm, applied = train_step(policy, optimizer, batch, cfg, step, strategy.gate)
                meter.train_tokens += sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
                for r in batch:
                    r.uses += 1
                stats = batch_stats(batch, step)
                ages_seen.update(stats.ages)
                updates += int(applied)
                metrics["train/lr"] = lr_schedule.get_last_lr()[0]
                lr_schedule.step()
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
            units_before = meter.units
            meter.step(len(fresh), len(batch))
            metrics.update({
                "train/updates": updates,
                tracking.COMPUTE_UNITS: meter.units,
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
                metrics[tracking.POLICY_ENTROPY] = out.entropy_mean
                metrics["train/completion_length"] = out.generated_tokens / len(fresh)
            run.log_metrics(metrics, step)
            if observer:
                observer(StepRecord(step, fresh, batch, metrics.get("train/loss", float("nan")), metrics))
            step += 1
            bar.update(meter.units - units_before if cfg.budget.compute_units is not None else 1)
            last = not _budget_left(cfg, step, meter)
            if last or schedule.due(step, meter.units):
                run_eval(step, last)

    final = _final_metrics(cfg, evals, meter, step, updates, time.perf_counter() - t_start)
    final["final/eval_seconds"] = eval_seconds  # held-out evaluation: neither generation nor training compute
    run.log_metrics(final, step)
    run.log_text(json.dumps({"age_counts": {str(k): v for k, v in sorted(ages_seen.items())}}), tracking.AGES_ARTIFACT)
    run.log_text(json.dumps(evals), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, evals)


def _final_metrics(cfg: TrialConfig, evals, meter: ComputeMeter, steps: int, updates: int, wall: float) -> dict[str, float]:
    accuracy = [e["accuracy"] for e in evals]
    reading = readings(evals, cfg.eval.metric)  # what compute-to-target reads (greedy accuracy by default)
    spent = [e["compute_units"] for e in evals]
    target = cfg.eval.target_accuracy
    reached = to_target(spent, reading, target)
    final = {
        tracking.FINAL_ACCURACY: accuracy[-1],
        tracking.FINAL_BEST_ACCURACY: max(accuracy),
        tracking.FINAL_INITIAL_ACCURACY: accuracy[0],
        "final/pass_at_k": next((e["pass_at_k"] for e in reversed(evals) if e["pass_at_k"] is not None), float("nan")),
        tracking.FINAL_COMPUTE_UNITS: meter.units,
        tracking.FINAL_CENSORED: float(reached.censored),
        "final/steps": steps,
        "final/updates": updates,
        tracking.FINAL_MU: meter.mu,
        "final/gen_seconds": meter.seconds["gen"],
        "final/train_seconds": meter.seconds["train"],
        tracking.FINAL_WALL_SECONDS: wall,
        "final/gen_rollouts": meter.gen_rollouts,
        "final/train_rollouts": meter.train_rollouts,
        "final/replay_ratio": meter.train_rollouts / max(meter.gen_rollouts, 1),
    }
    # Every estimator of compute-to-target and the curve's summaries (accuracy at budget fractions, normalised AUC,
    # the fitted sigmoid), against the budget in units when there is one; a censored estimate is logged with its flag.
    summary = curve_summary(spent, reading, target, cfg.budget.compute_units)
    final.update({f"final/{k}": v for k, v in summary.items()})
    if meter.measured_mu is not None:
        final[tracking.FINAL_MU_MEASURED] = meter.measured_mu
    if not reached.censored:
        final[tracking.FINAL_COMPUTE_TO_TARGET] = reached.value
        final["final/steps_to_target"] = to_target([e["step"] for e in evals], reading, target).value
    return final
