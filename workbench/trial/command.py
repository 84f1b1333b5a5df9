"""A trial trained by someone else's code: a command that follows the trial protocol (docs/trainers.md).

The workbench opens the seed's MLflow run, starts the command with the run and the trial config in its environment,
and reads back what the command logged to that run, by the rule every trainer logs by
(`tracking.curve_from_history`):

- `eval/accuracy` (greedy, on the task's held-out set) after s optimizer steps, at step s, from step 0 (before any
  training) to the end;
- the cumulative ledger after optimizer step i (from 0), at step i: `compute/gen_rollouts` (rollouts generated),
  `compute/train_rollouts` (rollout uses trained on), and where the trainer keeps them `compute/discarded_rollouts`
  (dropped untrained), `compute/gen_seconds` and `compute/train_seconds` (what a measured mu reads).

From the ledger the workbench accounts compute units itself, at the study's mu (`compute.mu`) or the one the
reported seconds measure, so a command's trials and the workbench's own compare on one scale. While the command
runs, each new evaluation is passed to `on_eval` (progress, the pruner); a pruner's stop ends the command. A command
that exits non-zero, runs past `trainer.timeout_s`, or reports less than the protocol asks fails the trial in one
line naming what is missing.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from workbench import processes, tracking
from workbench.compute import ComputeMeter, units
from workbench.config import ConfigError, TrialConfig, flatten
from workbench.trial.record import TrialResult, final_metrics

log = logging.getLogger(__name__)

REQUIRED = (tracking.EVAL_ACCURACY, tracking.GEN_ROLLOUTS, tracking.TRAIN_ROLLOUTS)
"""What a trial command must log (docs/trainers.md)."""
CONFIG_ENV = "WORKBENCH_TRIAL_CONFIG"
"""The environment variable naming the trial config's JSON file."""
PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")
TAIL_LINES = 20


class TrialCommandFailed(RuntimeError):
    """The command exited non-zero, ran out of time, or did not report what the protocol asks (one line)."""


def render(argv: list[str], cfg: TrialConfig) -> list[str]:
    """`trainer.command` with each `{dotted.key}` replaced by the trial config's value there, `{python}` by this
    Python; a placeholder that names no key is a `ConfigError` naming it."""
    values = {**flatten(cfg), "python": sys.executable}

    def fill(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise ConfigError(f"trainer.command: {{{key}}} names no trial config key")
        return str(values[key])

    return [PLACEHOLDER.sub(fill, arg) for arg in argv]


def command_env(cfg: TrialConfig, run_id: str, config_path: Path) -> dict[str, str]:
    """The command's environment: ours, plus where its run and its config are."""
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": cfg.tracking.uri,
        "MLFLOW_RUN_ID": run_id,
        CONFIG_ENV: str(config_path),
        "WORKBENCH_SEED": str(cfg.seed),
        "PYTHONUNBUFFERED": "1",
    }


def argv_of(cfg: TrialConfig) -> list[str]:
    """What the trial runs: `trainer.command`, or the TRL integration's entry point for `trainer.kind: trl`."""
    if cfg.trainer.kind == "trl":
        return [sys.executable, "-m", "workbench.integrations.trl"]
    return render(cfg.trainer.command or [], cfg)


class _Output:
    """The command's stdout and stderr, forwarded line by line to the log (indented) and its last lines kept."""

    def __init__(self, stream):
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.thread = threading.Thread(target=self._read, args=(stream,), name="trial-command-output", daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            line = line.rstrip()
            if line:
                self.tail.append(line)
                log.info(f"  | {line}")

    def last(self) -> str:
        return self.tail[-1] if self.tail else "(it printed nothing)"


def run_command_trial(
    cfg: TrialConfig,
    run: tracking.RunLogger,
    on_eval: Callable[[dict[str, float]], None] | None = None,
) -> TrialResult:
    """Run the trial command to its end under `run` (already opened; the caller ends it) and return its result, its
    rows accounted in compute units as the workbench's own."""
    argv = argv_of(cfg)
    run.set_tags({tracking.TRAINER: cfg.trainer.kind})
    run.flush()  # the run's params and tags stored before the command writes to it
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="workbench-trial-") as tmp:
        config_path = Path(tmp) / "trial.json"
        config_path.write_text(json.dumps(cfg.model_dump(mode="json")))
        config_path.chmod(0o600)  # the tracking URI may hold a password
        log.info(f"trial command: {' '.join(argv)}")
        proc = subprocess.Popen(
            argv,
            env=command_env(cfg, run.run_id, config_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its whole tree is ended with it
        )
        output = _Output(proc.stdout)
        try:
            rows = _follow(cfg, run.run_id, proc, on_eval, started)
        except BaseException:
            processes.kill_tree(proc.pid)
            proc.wait()
            raise
        finally:
            output.thread.join(5)
    if proc.returncode != 0:
        raise TrialCommandFailed(f"trial command exited with {proc.returncode}: {output.last()}")
    rows = _checked(cfg, run.run_id, rows)
    return _result(cfg, run, rows, time.perf_counter() - started)


def _follow(cfg: TrialConfig, run_id: str, proc: subprocess.Popen, on_eval, started: float) -> list[dict]:
    """Wait for the command, reading its evaluations every `trainer.poll_s` and handing each new one to `on_eval`."""
    client = tracking.client(cfg.tracking.uri)
    seen = 0
    rows: list[dict] = []
    while True:
        done = proc.poll() is not None
        rows = tracking.curve_from_history(client, run_id)
        if len(rows) > seen and on_eval is not None and not done:
            mu = _mu(cfg, client.get_run(run_id).data.metrics, final=False)
            for row in rows[seen:]:
                on_eval({**row, "compute_units": units(row["train_rollouts"], row["gen_rollouts"], cfg.batch_size, mu)})
        seen = len(rows)
        if done:
            return rows
        limit = cfg.trainer.timeout_s
        if limit is not None and time.perf_counter() - started > limit:
            raise TrialCommandFailed(f"trial command still running after trainer.timeout_s = {limit:g} s: stopped")
        try:
            proc.wait(cfg.trainer.poll_s)
        except subprocess.TimeoutExpired:
            pass


def _checked(cfg: TrialConfig, run_id: str, rows: list[dict]) -> list[dict]:
    """The rows, or one line naming what the command did not report."""
    logged = tracking.client(cfg.tracking.uri).get_run(run_id).data.metrics
    missing = [name for name in REQUIRED if name not in logged]
    if missing:
        raise TrialCommandFailed(
            f"trial command reported no {', '.join(missing)} to its MLflow run (the protocol: docs/trainers.md)"
        )
    if rows[0]["step"] != 0:
        raise TrialCommandFailed(
            f"trial command's first {tracking.EVAL_ACCURACY} is at step {rows[0]['step']:g}: the protocol asks for"
            " one at step 0, before training"
        )
    return rows


def _mu(cfg: TrialConfig, logged: dict[str, float], final: bool = True) -> float:
    """The mu of the account: `compute.mu`, else the one the command's latest ledger and seconds measure (1.0 while
    nothing is measured yet; at the end, nothing measured is an error)."""
    if cfg.compute.mu is not None:
        return cfg.compute.mu
    measured = measured_mu(logged)
    if measured is None and final:
        raise TrialCommandFailed(
            f"trial command reported no {tracking.GEN_SECONDS} and {tracking.TRAIN_SECONDS}, and compute.mu is not"
            " set: nothing to account compute units with"
        )
    return measured or 1.0


def measured_mu(logged: dict[str, float]) -> float | None:
    """(generation seconds per generated rollout) / (training seconds per trained rollout), from a run's latest
    metrics, as `ComputeMeter.measured_mu` reads its own."""
    meter = ComputeMeter(1, 0)
    meter.gen_rollouts = int(logged.get(tracking.GEN_ROLLOUTS, 0))
    meter.train_rollouts = int(logged.get(tracking.TRAIN_ROLLOUTS, 0))
    meter.seconds = {"gen": logged.get(tracking.GEN_SECONDS, 0.0), "train": logged.get(tracking.TRAIN_SECONDS, 0.0)}
    if not meter.seconds["gen"]:
        return None
    return meter.measured_mu


def _result(cfg: TrialConfig, run: tracking.RunLogger, rows: list[dict], wall: float) -> TrialResult:
    """The rows accounted at the trial's mu, the `final/*` metrics a native trial logs, the curve artifact."""
    logged = tracking.client(cfg.tracking.uri).get_run(run.run_id).data.metrics
    mu = _mu(cfg, logged)
    for row in rows:
        row["compute_units"] = units(row["train_rollouts"], row["gen_rollouts"], cfg.batch_size, mu)
        row["wall_seconds"] = row["seconds"]
    meter = ComputeMeter(cfg.batch_size, 0, fixed_mu=mu)
    meter.gen_rollouts = int(logged[tracking.GEN_ROLLOUTS])
    meter.train_rollouts = int(logged[tracking.TRAIN_ROLLOUTS])
    meter.seconds = {"gen": logged.get(tracking.GEN_SECONDS, 0.0), "train": logged.get(tracking.TRAIN_SECONDS, 0.0)}
    meter.units = rows[-1]["compute_units"]
    steps = int(rows[-1]["step"])
    final = final_metrics(cfg, rows, meter, steps, steps, wall)
    measured = measured_mu(logged)
    if measured is not None:
        final[tracking.FINAL_MU_MEASURED] = measured
    run.log_metrics(final, steps)
    run.log_text(json.dumps(rows), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, rows)
