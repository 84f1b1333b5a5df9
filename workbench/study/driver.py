"""`workbench study run`: create or resume a study, run its baseline first, then local worker processes.

The study's configurations are checked on this machine before anything is created (`workbench.study.preflight`).
Workers are `workbench study worker` subprocesses, the same path a worker on another machine takes. The driver
watches the study: a bar of completed trials on a terminal, a line per change otherwise. Ctrl-C stops the
workers (their running trials are recorded as interrupted; SIGTERM does the same) and the next `study run` resumes up to `n_trials`.
Failures that stop the study (`workbench.study.failfast`) stop its workers too; the next `study run` enqueues the
configurations behind them again, as it does the interrupted ones.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Callable

import optuna
from optuna.trial import TrialState

from workbench import faults
from workbench import interrupts, progress, tracking
from workbench.config import ConfigError
from workbench.study import attrs, failfast, lr_sweep
from workbench.study.context import StudyContext, calibrated, create_or_load
from workbench.study.devices import detect_kind, per_trial, split_devices, worker_env
from workbench.study.preflight import check_study
from workbench.study.spec import StudySpec, check_point
from workbench.study.summary import counts_line, done, log_to_parent_run
from workbench.processes import usable_cores

log = logging.getLogger(__name__)


def run_study(
    ctx: StudyContext,
    n_trials: int,
    workers: int,
    poll: float = 3.0,
    show_progress: bool = False,
    devices: list[int] | None = None,
) -> optuna.Study:
    """Create or resume the study, run its baseline, then `workers` local worker processes until done; with
    `devices`, worker k runs on its own group of them (`workbench.study.devices`). A configuration that cannot run
    here is a `ConfigError` before the study is created; `failfast.verdict` tells how the run ended."""
    check_study(ctx.spec)
    workers = max(workers, 1)
    launch = _Launch(ctx, n_trials, workers, devices, show_progress)  # too few devices: an error before any store
    study = create_or_load(ctx)
    log.info(
        f"study {ctx.spec.name}: {n_trials} trials, {workers} worker(s) x {launch.threads} thread(s){launch.placed};"
        f" storage {tracking.redact_url(ctx.storage_url)}; MLflow {tracking.redact_url(ctx.tracking_uri)}"
    )
    _requeue(study, ctx.spec)

    # The baseline gets every core only where it runs alone (its mu or target still to measure); in a calibrated
    # study the other workers start at once, and a baseline on every core beside them oversubscribes the cores
    # (measured: a 2-thread baseline beside a 1-thread worker on 2 cores ran 3.7x slower, 492 s a seed against 130 s).
    launch.alone = alone = not calibrated(study) and _baseline_pending(study)

    def stopped() -> failfast.Stop | None:
        return failfast.check(study, ctx.spec)

    def baseline_known() -> bool:
        return calibrated(study) or not _baseline_pending(study)

    procs: list[subprocess.Popen] = []
    bar = progress.bar(n_trials, f"study {ctx.spec.name}", "trials", show_progress)
    # A scheduler's or `kill`'s SIGTERM stops the workers as Ctrl-C does (they run in their own sessions, so
    # without this they would outlive the driver).
    previous = interrupts.interrupt_on(signal.SIGTERM)
    try:
        with progress.bar_safe_logging(show_progress), bar:
            procs = [launch.spawn(0)]
            if alone:
                # The first worker runs the baseline alone with every core (its measured mu is the study's
                # reference, its curve may set the target); the others start once both are known, so no core is
                # oversubscribed.
                log.info(
                    f"running the on-policy baseline first with {launch.cores} thread(s) (it sets the study's"
                    " reference mu)"
                )
                _watch(study, procs, bar, poll, until=baseline_known, stopped=stopped)
            if stopped() is None:  # a failed baseline stops the trials that depend on it
                procs += [launch.spawn(k) for k in range(1, workers)]
            _watch(study, procs, bar, poll, stopped=stopped)
    except KeyboardInterrupt:
        log.warning("interrupted: stopping workers (run `workbench study run` again to resume)")
        _stop(procs)
        log_to_parent_run(ctx.tracking_uri, study)
        raise
    finally:
        interrupts.restore(signal.SIGTERM, previous)
    _summarise(ctx, study, n_trials)
    return study


class _Launch:
    """Where the local workers run (their device groups, cores and threads) and the command that starts worker k:
    `workbench study worker`, the same path a worker on another machine takes."""

    def __init__(self, ctx: StudyContext, n_trials: int, workers: int, devices, show_progress: bool):
        self.ctx, self.n_trials, self.devices, self.show_progress = ctx, n_trials, devices, show_progress
        self.groups = self.kind = None
        if devices is not None:
            self.groups, self.kind = split_devices(devices, workers, per_trial(ctx.spec.base)), detect_kind()
        self.cores = usable_cores()
        self.threads = max(1, self.cores // workers)
        if self.groups and self.kind == "cpu":
            self.threads = self.cores = len(self.groups[0])  # a worker's trials (the baseline's too) use its cores
        self.placed = f" on {self.kind} {' | '.join(','.join(map(str, g)) for g in self.groups)}" if self.groups else ""
        self.alone = False
        """The baseline runs first, alone, on every core (and every device)."""

    def spawn(self, k: int) -> subprocess.Popen:
        ctx, first_alone = self.ctx, self.alone and k == 0
        cmd = [
            sys.executable,
            "-m",
            "workbench.cli",
            "study",
            "worker",
            ctx.spec_path,
            "--storage",
            ctx.storage_url,
            "--tracking-uri",
            ctx.tracking_uri,
            "--n-trials",
            str(self.n_trials),
            "--threads",
            str(self.threads),
            "--baseline-threads",
            str(self.cores if first_alone else self.threads),
            *(["--quiet"] if self.show_progress else []),
        ]  # the bar reports their trials
        env = None
        if self.groups:
            cmd += ["--devices", ",".join(map(str, self.groups[k]))]
            if first_alone:  # the baseline's seeds side by side over every device while it runs alone
                cmd += ["--baseline-devices", ",".join(map(str, self.devices))]
            env = {**os.environ, **worker_env(self.groups[k], self.kind)}
        # Own session: a terminal's Ctrl-C reaches the driver only, which forwards exactly one SIGINT.
        return subprocess.Popen(cmd, start_new_session=True, env=env)


def _summarise(ctx: StudyContext, study: optuna.Study, n_trials: int) -> None:
    """The study's trials summarised into its MLflow parent run, ended FINISHED (every trial done) or FAILED; a
    tracking server that does not answer leaves it for the next `study run`."""
    log.info(f"study {ctx.spec.name}: workers done; summarising its trials into the MLflow parent run")
    try:
        log_to_parent_run(ctx.tracking_uri, study)
        parent = study.user_attrs.get(attrs.PARENT_RUN)
        if parent:
            tracking.set_run_status(
                ctx.tracking_uri,
                parent,
                "FINISHED" if done(study) >= lr_sweep.to_run(study, n_trials) else "FAILED",
            )
    except Exception as err:
        if not faults.unreachable(err):
            raise
        # the trials are in the Optuna storage; the summary is written again by the next `study run`
        log.warning(
            f"the study's MLflow parent run was not updated: the tracking server at"
            f" {tracking.redact_url(ctx.tracking_uri)} did not answer ({faults.one_line(err)})"
        )


def _watch(
    study: optuna.Study,
    procs,
    bar,
    poll: float,
    until: Callable[[], bool] | None = None,
    stopped: Callable[[], failfast.Stop | None] = lambda: None,
) -> None:
    """Report the trial counts when they change (bar or line), until every worker exited (or `until()` holds). A
    worker's non-zero exit is an error unless the study's failures stopped it (`stopped()`: `study run` reports
    those)."""
    last = None
    while True:
        if until is not None and until():
            return
        alive = [p for p in procs if p.poll() is None]
        line = counts_line(study)
        if bar.disable:
            if line != last:
                log.info(f"[{time.strftime('%H:%M:%S')}] trials: {line}")
        else:  # every poll: the running trials' progress, and the bar's clock
            bar.n = done(study)
            bar.set_postfix_str("; ".join([line, *_running(study)]), refresh=False)
            bar.refresh()
        last = line
        if any(p.returncode == tracking.EXIT_STORES_FULL for p in procs):  # it said why, in one line
            _stop(alive)  # the others would only hit the same wall
            raise tracking.StoresFull("")
        if not alive:
            bad = [p.returncode for p in procs if p.returncode not in (0, None)]
            if bad and stopped() is None:
                raise RuntimeError(f"a worker exited with code {bad[0]}")
            return
        time.sleep(poll)


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop the workers still running as Ctrl-C does (one SIGINT each; their trials end KILLED), waiting up to a
    minute for each before killing it."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def _running(study: optuna.Study) -> list[str]:
    """`trial 3 (seed 2/3, 31/60 units)` for each running trial that has reported its progress."""
    return [
        f"trial {t.number} ({t.user_attrs[attrs.PROGRESS]})"
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if attrs.PROGRESS in t.user_attrs
    ]


def _baseline_pending(study: optuna.Study) -> bool:
    return any(
        t.user_attrs.get(attrs.BASELINE) and t.state in (TrialState.WAITING, TrialState.RUNNING)
        for t in study.get_trials(deepcopy=False)
    )


def _requeue(study: optuna.Study, spec: StudySpec) -> None:
    """Enqueue again (once) the configurations whose trials were interrupted by Ctrl-C, and those of the failed
    trials that stopped the study (`failfast.check`: its cause is taken as fixed, since the preflight passed), so
    none is lost. A configuration that is no longer a point of the spec's space (the fix removed it) is not."""
    requeued = set(study.user_attrs.get(attrs.REQUEUED, []))
    stop = failfast.check(study, spec)
    if stop is not None and stop.trials:
        log.info(f"resuming after: {stop.reason}")
    behind = set(stop.trials) if stop is not None else set()
    todo = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == TrialState.FAIL
        and t.number not in requeued
        and not t.user_attrs.get(attrs.ARM)
        and (t.user_attrs.get(attrs.INTERRUPTED) or t.number in behind)
    ]
    for t in todo:
        try:
            check_point(spec, t.params, f"trial {t.number}")
        except ConfigError as err:
            log.warning(f"not run again: {err}")
            continue
        kept = {k: True for k in (attrs.BASELINE, attrs.POINT) if t.user_attrs.get(k)}
        study.enqueue_trial(t.params, user_attrs={attrs.REQUEUED_FROM: t.number, **kept})
    if todo:
        study.set_user_attr(attrs.REQUEUED, sorted(requeued | {t.number for t in todo}))
