"""One trial: GRPO with a replay buffer, from a config to MLflow (docs/trial.md). One loop serves both modes; they
differ only in their batch source (`source.BatchSource`: `inline` synchronous, `pipeline` asynchronous).

loop until the budget is spent:
    fresh, batch = source.draw(step)                          # generate (or receive) rollouts; the strategy draws
    loss  = objective(policy, batch)                          # step.train_step: a registered objective
    optimizer step unless strategy.gate(...)                  # (dgg may drop the update)
    account compute; log metrics                              # compute.ComputeMeter, tracking.RunLogger
    every eval.every steps: evaluate on the held-out set      # evaluation.Evaluator
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

import torch

from workbench import progress, seeds, tracking
from workbench.compute import ComputeMeter
from workbench.config import ConfigError, TrialConfig, flatten
from workbench.trial.command import run_command_trial
from workbench.trial.diagnostics import GradientCosine, RunMeans
from workbench.trial.inline import InlineSource
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.record import (
    Evaluations,
    StepRecord,
    TrialResult,
    budget_bar,
    budget_left,
    compute_metrics,
    final_metrics,
    ledger_metrics,
    train_metrics,
    working_seconds,
)
from workbench.trial.replay import Rollout, mark_trained, untrained
from workbench.trial.source import BatchSource, Parts, Replica
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
    task = load_task(cfg.task)  # a task that cannot load (a malformed file) stops here, before anything is recorded
    log.info(
        f"trial: B={cfg.batch_size} G={cfg.group_size} ratio={cfg.replay.ratio:g} capacity={cfg.replay.capacity}"
        f" horizon={cfg.replay.horizon} strategy={cfg.replay.strategy} {_trainer(cfg)}"
        f" budget={cfg.budget.compute_units or '-'} units / {cfg.budget.steps or '-'} steps"
    )
    with progress.watch(log):  # a line at least every 10 s, whatever the phase, from the run's opening on
        progress.ACTIVITY.begin("opening the trial's MLflow run")
        if run is None:
            run = tracking.RunLogger(
                cfg.tracking.uri, cfg.tracking.experiment, run_name, parent_run_id, tags, outage_s=cfg.tracking.outage_s
            )
        run_id = run.run_id  # a run that could not be created raises here, before the trial starts
        if on_run_created:
            on_run_created(run_id)
        with tracking.run_lifecycle(run):
            run.log_params(flatten(cfg))
            if cfg.trainer.kind != "workbench":  # another trainer, by the trial protocol (docs/trainers.md)
                if observer is not None or inspect is not None:
                    raise ConfigError(f"trainer.kind: {cfg.trainer.kind} trials cannot be observed step by step")
                progress.ACTIVITY.begin(f"trial command ({cfg.trainer.kind}) running")
                return run_command_trial(cfg, run, on_eval)
            progress.ACTIVITY.begin("starting the trial")
            if cfg.pipeline.mode == "async":
                from workbench.trial.pipeline import PipelineSource  # spawns processes: loaded only when asked for

                source: BatchSource = PipelineSource(cfg)
            else:
                source = InlineSource(cfg)
            return train(cfg, task, run, source, observer, on_eval, show_progress, inspect)


def _trainer(cfg: TrialConfig) -> str:
    """Who trains, for the trial's first line: the objective of the workbench's loop, or the other trainer."""
    if cfg.trainer.kind == "trl":
        return f"trainer=trl loss={cfg.trainer.trl.loss_type}"
    if cfg.trainer.kind == "command":
        return "trainer=command"
    return f"objective={cfg.objective.name}"


def train(
    cfg: TrialConfig,
    task: Task,
    run: tracking.RunLogger,
    source: BatchSource,
    observer=None,
    on_eval=None,
    show_progress: bool = False,
    inspect=None,
) -> TrialResult:
    """The training loop of every trial, synchronous or asynchronous (`source`): build the optimizer, the strategy
    and the meter around the source's policy, train to the budget evaluating on schedule, log the final metrics,
    the ages and the curve."""
    t_start = time.perf_counter()
    progress.ACTIVITY.begin("loading the model")
    policy = source.policy(task)
    run.set_tags({tracking.MODEL_PATH: policy.path, tracking.DEVICE: str(policy.device), **source.tags})
    replica = Replica.around(policy, task, cfg, source.cfg)
    optimizer, lr_schedule, strategy = replica.optimizer, replica.lr_schedule, replica.strategy
    meter = ComputeMeter(cfg.batch_size, count_parameters(policy.model), cfg.compute.mu)
    bar = budget_bar(cfg, show_progress)
    clock, curve_clock = source.clock(policy)
    evaluations = Evaluations(cfg, policy, task, run, meter, bar, on_eval, t_start, clock, curve_clock)
    cosine = GradientCosine() if cfg.train.grad_cosine else None
    parts = Parts(cfg, task, run, policy, optimizer, strategy, meter, evaluations, clock, cosine)
    with source.running(parts), progress.bar_safe_logging(show_progress), bar:
        steps = _Steps(parts, source, lr_schedule, bar, observer, inspect)
        steps.run()
        clock.stop()

    evals = evaluations.rows
    final = final_metrics(cfg, evals, meter, steps.step, steps.updates, time.perf_counter() - t_start)
    final.update(steps.means.final())
    final["final/eval_seconds"] = evaluations.seconds  # held-out evaluation: neither generation nor training compute
    final.update(source.final())
    final.update(working_seconds(clock))
    run.log_metrics(final, steps.step)
    run.log_text(json.dumps(source.histograms()), tracking.AGES_ARTIFACT)
    run.log_text(json.dumps(evals), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, evals)


class _Steps:
    """The steps of `train`: draw, (inspect), train, account, log, evaluate when due."""

    def __init__(self, parts: Parts, source: BatchSource, lr_schedule, bar, observer, inspect):
        self.p, self.source, self.lr_schedule, self.bar = parts, source, lr_schedule, bar
        self.observer, self.inspect = observer, inspect
        self.step = self.updates = 0
        self.trained_once = 0
        self.means = RunMeans()
        """The run's means of its per-step staleness diagnostics (logged with the final metrics)."""
        """Distinct fresh rollouts trained on at least once (the ledger: generated = this + held untrained +
        discarded)."""

    def run(self) -> None:
        p, source = self.p, self.source
        source.evaluate(0)
        source.begin()  # off the clock
        p.clock.begin()
        while source.more(self.step, budget_left(p.cfg, self.step, p.meter, p.evaluations.rows)):
            units_before = p.meter.units
            self.one(self.step)
            self.step += 1
            self.bar.update(p.meter.units - units_before if p.cfg.budget.compute_units is not None else 1)
            last = not budget_left(p.cfg, self.step, p.meter, p.evaluations.rows)
            if p.evaluations.due(self.step, last):
                source.evaluate(self.step, last)

    def one(self, step: int) -> None:
        p, source, meter = self.p, self.source, self.p.meter
        draw = source.draw(step)
        batch = draw.batch
        metrics: dict[str, float] = {}
        if batch and self.inspect is not None:  # outside the meter: not training compute
            metrics.update(self.inspect(step, batch, p.strategy.held(), p.policy) or {})
        if batch:
            with meter.timed("train"):
                obj, grad_norm, applied = source.train(step, batch)
            draw.trained_once = mark_trained(batch)
            self.trained_once += draw.trained_once
            self.updates += int(applied)
            metrics.update(train_metrics(obj, grad_norm, batch, step, self.lr_schedule.get_last_lr()[0]))
            self.lr_schedule.step()
        generated, trained = source.trained(step, draw)
        meter.step(generated, trained)
        metrics.update(
            {
                **compute_metrics(meter, self.updates),
                "replay/buffer_size": p.strategy.size(),
                **ledger_metrics(meter.gen_rollouts, self.trained_once, untrained(p.strategy.held())),
                "replay/fresh": generated,
                **p.strategy.metrics(),
                **source.metrics(step, draw),
            }
        )
        p.run.log_metrics(metrics, step)
        self.means.add(metrics)
        if self.observer:
            self.observer(StepRecord(step, draw.fresh, batch, metrics.get("train/loss", float("nan")), metrics))
