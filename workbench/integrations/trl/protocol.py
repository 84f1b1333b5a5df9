"""The trial protocol on a TRL trainer: a `TrainerCallback` that logs what a study reads (docs/trainers.md).

Each optimizer step, the ledger after it (rollouts generated, trained on, discarded; generation and training
seconds), the compute units, the buffer's metrics and TRL's own (as `trl/<name>`), at step i for optimizer step i
counted from 0; the held-out greedy accuracy by the workbench's own evaluator (`workbench.trial.record.Evaluations`:
the same problems, decoder and grading as a native trial) before training and then on `eval.*`'s cadence, at step s
after s optimizer steps; and the budget: the callback stops training where a native trial would stop
(`workbench.trial.record.budget_left`).
"""

from __future__ import annotations

import time

from mlflow.entities import Metric
from transformers import TrainerCallback

from workbench import tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig
from workbench.integrations.trl.ledger import Ledger
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.record import (
    Evaluations,
    WallClock,
    budget_left,
    compute_metrics,
    ledger_metrics,
    working_seconds,
)
from workbench.trial.tasks import Task

TRL_PREFIX = "trl/"


class RunWriter:
    """Metrics into an existing MLflow run (the one the study opened for this trial, `$MLFLOW_RUN_ID`), held and
    sent every `flush_every` seconds (a write a step would cost a TRL step on a small model a few percent), at each
    evaluation (the study's pruner reads them) and at the end."""

    def __init__(self, tracking_uri: str, run_id: str, flush_every: float = 5.0):
        self.client, self.run_id, self.flush_every = tracking.client(tracking_uri), run_id, flush_every
        self._points: list[Metric] = []
        self._last = time.monotonic()

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self._points += [Metric(k, float(v), now, int(step)) for k, v in metrics.items() if v is not None]
        if tracking.EVAL_ACCURACY in metrics or time.monotonic() - self._last >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        points, self._points, self._last = self._points, [], time.monotonic()
        for i in range(0, len(points), tracking.MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=points[i : i + tracking.MAX_BATCH])

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, v)


class _NoBar:
    def set_postfix(self, **_) -> None:
        pass


class ProtocolCallback(TrainerCallback):
    """Logs the protocol of one trial (`cfg`) trained by a TRL trainer whose rollouts `ledger` counts; evaluates
    `policy` (the model the trainer trains) on `task`'s held-out set."""

    def __init__(self, cfg: TrialConfig, policy: Policy, task: Task, ledger: Ledger, run: RunWriter):
        self.cfg, self.ledger, self.run = cfg, ledger, run
        self.meter = ComputeMeter(cfg.batch_size, count_parameters(policy.model), cfg.compute.mu)
        self.wall = WallClock()
        self.evaluations = Evaluations(cfg, policy, task, run, self.meter, _NoBar(), wall=self.wall)
        self._t0 = 0.0
        self.stopped_by_budget = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.evaluations(0)
        self.wall.begin()

    def on_step_begin(self, args, state, control, **kwargs):
        self.ledger.begin_step()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        step_s = time.perf_counter() - self._t0
        done = self.ledger.step
        gen_s = done.get("gen_seconds", 0.0)
        self.meter.seconds["gen"] += gen_s
        self.meter.seconds["train"] += max(step_s - gen_s, 0.0)
        self.meter.step(int(done.get("fresh", 0)), int(done.get("trained", 0)))
        step = state.global_step  # optimizer steps done
        metrics = {
            **compute_metrics(self.meter, step),
            **ledger_metrics(self.ledger.gen_rollouts, self.ledger.trained_once, self.ledger.held_untrained),
            "replay/fresh": done.get("fresh", 0),
            **{k: v for k, v in done.items() if "/" in k},
        }
        self.run.log_metrics(metrics, step - 1)
        more = budget_left(self.cfg, step, self.meter, self.evaluations.rows)
        if not more or self.evaluations.due(step, False):
            self.evaluations(step, last=not more)
        if not more:
            self.stopped_by_budget = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        """The `final/*` of the clocks a native trial keeps (the workbench logs the rest from the ledger)."""
        self.wall.stop()
        self.run.log_metrics(
            {"final/eval_seconds": self.evaluations.seconds, **working_seconds(self.wall)}, state.global_step
        )
        self.run.flush()

    def on_log(self, args, state, control, logs=None, **kwargs):
        """TRL's own step metrics (reward, clip ratios, entropy, ...) as `trl/<name>`, and the native names a
        study's plots read where TRL has the same quantity."""
        if not logs or not state.global_step:
            return
        numbers = {f"{TRL_PREFIX}{k}": v for k, v in logs.items() if isinstance(v, (int, float))}
        native = {
            "train/reward_mean": logs.get("reward"),
            "train/loss": logs.get("loss"),
            "train/grad_norm": logs.get("grad_norm"),
            "train/lr": logs.get("learning_rate"),
            tracking.POLICY_ENTROPY: logs.get("entropy"),
            "offpolicy/clip_frac": logs.get("clip_ratio/region_mean"),
            "train/completion_length": logs.get("completions/mean_length"),
        }
        self.run.log_metrics({**numbers, **{k: v for k, v in native.items() if v is not None}}, state.global_step - 1)
