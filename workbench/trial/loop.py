"""One trial: GRPO with a replay buffer, from a config to MLflow (docs/trial.md).

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
import os
import time
from collections import Counter
from typing import Callable

import numpy as np
import torch

from workbench import progress, seeds, tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig, flatten
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.record import (
    Evaluations,
    StepRecord,
    TrialResult,
    WallClock,
    budget_bar,
    budget_left,
    compute_metrics,
    devices_in_use,
    final_metrics,
    fresh_metrics,
    mismatch_metrics,
    train_metrics,
    working_seconds,
)
from workbench.trial.replay import Rollout, batch_stats
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import make_lr_schedule, make_optimizer, rescore, train_step
from workbench.trial.strategies import StrategyContext, make_strategy
from workbench.trial.tasks import Task, load_task

__all__ = ["StepRecord", "TrialResult", "TrialStopped", "run_trial"]

log = logging.getLogger(__name__)


class TrialStopped(tracking.RunStopped):
    """Raised by an `on_eval` hook to end a trial early (a pruner): the run ends FINISHED, tagged `stopped`."""


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
    torch.manual_seed(seeds.torch_global(cfg.seed))
    task = load_task(cfg.task)
    log.info(
        f"trial: B={cfg.batch_size} G={cfg.group_size} ratio={cfg.replay.ratio:g} capacity={cfg.replay.capacity}"
        f" horizon={cfg.replay.horizon} strategy={cfg.replay.strategy} objective={cfg.objective.name}"
        f" budget={cfg.budget.compute_units or '-'} units / {cfg.budget.steps or '-'} steps"
    )
    if run is None:
        run = tracking.RunLogger(
            cfg.tracking.uri, cfg.tracking.experiment, run_name, parent_run_id, tags, outage_s=cfg.tracking.outage_s
        )
    run_id = run.run_id  # a run that could not be created raises here, before the trial starts
    if on_run_created:
        on_run_created(run_id)
    with tracking.run_lifecycle(run):
        run.log_params(flatten(cfg))
        if cfg.pipeline.mode == "async":
            from workbench.trial.pipeline import train_async  # spawns processes: loaded only when asked for

            return train_async(cfg, task, run, observer, on_eval, show_progress)
        return _train(cfg, task, run, observer, on_eval, show_progress, inspect)


def _train(
    cfg: TrialConfig, task: Task, run: tracking.RunLogger, observer, on_eval, show_progress: bool, inspect=None
) -> TrialResult:
    t_start = time.perf_counter()
    policy = Policy(cfg, task)
    run.set_tags({tracking.MODEL_PATH: policy.path, tracking.DEVICE: str(policy.device)})
    B, G = cfg.batch_size, cfg.group_size
    optimizer = make_optimizer(policy.model, cfg.lr)
    lr_schedule = make_lr_schedule(optimizer, cfg.lr_warmup_steps)
    strategy = make_strategy(
        cfg,
        StrategyContext(
            task, policy.tokenizer, lambda rs: rescore(policy, rs, cfg.train.micro_batch_size), policy.max_new_tokens
        ),
    )
    meter = ComputeMeter(B, count_parameters(policy.model), cfg.compute.mu)
    prompts = PromptStream(len(task.train), cfg.seed, strategy.prompts(len(task.train)))
    sampler = torch.Generator(device=policy.device).manual_seed(seeds.rollout_sampler(cfg.seed))
    replay_rng = np.random.default_rng(seeds.replay_draws(cfg.seed))
    updates = 0
    next_uid = 0
    ages_seen: Counter[int] = Counter()
    bar = budget_bar(cfg, show_progress)
    wall = WallClock(devices_in_use(policy.device, cfg.threads or os.cpu_count() or 1))
    evaluations = Evaluations(cfg, policy, task, run, meter, bar, on_eval, t_start, wall)

    with progress.bar_safe_logging(show_progress), bar:
        evaluations(0)
        wall.begin()
        step = 0
        while budget_left(cfg, step, meter, evaluations.rows):
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
                metrics.update(
                    inspect(step, batch, strategy.held(), policy) or {}
                )  # outside the meter: not training compute
            if batch:
                with meter.timed("train"):
                    obj, grad_norm, applied = train_step(policy, optimizer, batch, cfg, step, strategy.gate)
                meter.train_tokens += sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
                for r in batch:
                    r.uses += 1
                ages_seen.update(batch_stats(batch, step).ages)
                updates += int(applied)
                metrics.update(train_metrics(obj, grad_norm, batch, step, lr_schedule.get_last_lr()[0]))
                lr_schedule.step()
            units_before = meter.units
            meter.step(len(fresh), len(batch))
            metrics.update(
                {
                    **compute_metrics(meter, updates),
                    "replay/buffer_size": strategy.size(),
                    "replay/fresh": len(fresh),
                    **strategy.metrics(),
                }
            )
            if fresh and policy.engine is not None:
                metrics.update(
                    {
                        **mismatch_metrics(fresh),
                        "mismatch/engine_lag": step - policy.engine.version,
                        "mismatch/syncs": policy.engine.syncs,
                    }
                )
            if fresh:
                metrics.update(fresh_metrics(fresh, out.entropy_mean, out.generated_tokens))
            run.log_metrics(metrics, step)
            if observer:
                observer(StepRecord(step, fresh, batch, metrics.get("train/loss", float("nan")), metrics))
            step += 1
            bar.update(meter.units - units_before if cfg.budget.compute_units is not None else 1)
            last = not budget_left(cfg, step, meter, evaluations.rows)
            if evaluations.due(step, last):
                evaluations(step, last)

    wall.stop()
    evals = evaluations.rows
    final = final_metrics(cfg, evals, meter, step, updates, time.perf_counter() - t_start)
    final["final/eval_seconds"] = evaluations.seconds  # held-out evaluation: neither generation nor training compute
    final.update(working_seconds(wall))
    run.log_metrics(final, step)
    run.log_text(json.dumps({"age_counts": {str(k): v for k, v in sorted(ages_seen.items())}}), tracking.AGES_ARTIFACT)
    run.log_text(json.dumps(evals), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, evals)
