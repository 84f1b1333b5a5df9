"""`workbench study run`: create or resume a study, run its baseline first, then local worker processes.

Workers are `workbench study worker` subprocesses, the same path a worker on another machine takes. The driver
watches the study: a bar of completed trials on a terminal, a line per change otherwise. Ctrl-C stops the
workers (their running trials are recorded as interrupted; SIGTERM does the same) and the next `study run` resumes up to `n_trials`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import optuna
from optuna.trial import TrialState

from workbench import progress, tracking
from workbench.study import attrs
from workbench.study.context import StudyContext, calibrated, create_or_load
from workbench.study.devices import detect_kind, per_trial, split_devices, worker_env
from workbench.study.summary import counts_line, done, log_to_parent_run

log = logging.getLogger(__name__)


def run_study(ctx: StudyContext, n_trials: int, workers: int, poll: float = 3.0, show_progress: bool = False,
              devices: list[int] | None = None) -> optuna.Study:
    """Create or resume the study, run its baseline, then `workers` local worker processes until done; with
    `devices`, worker k runs on its own group of them (`workbench.study.devices`)."""
    workers = max(workers, 1)
    groups = kind = None
    if devices is not None:
        groups, kind = split_devices(devices, workers, per_trial(ctx.spec.base)), detect_kind()
    study = create_or_load(ctx)
    cores = os.cpu_count() or 1
    threads = max(1, cores // workers)
    if groups and kind == "cpu":
        threads = cores = len(groups[0])  # a worker's trials (the baseline's too) use its cores only
    placed = f" on {kind} {' | '.join(','.join(map(str, g)) for g in groups)}" if groups else ""
    log.info(f"study {ctx.spec.name}: {n_trials} trials, {workers} worker(s) x {threads} thread(s){placed};"
             f" storage {tracking.redact_url(ctx.storage_url)}; MLflow {tracking.redact_url(ctx.tracking_uri)}")
    _requeue_interrupted(study)

    # The baseline gets every core only where it runs alone (its mu or target still to measure); in a calibrated
    # study the other workers start at once, and a baseline on every core beside them oversubscribes the cores
    # (measured: a 2-thread baseline beside a 1-thread worker on 2 cores ran 3.7x slower, 492 s a seed against 130 s).
    alone = not calibrated(study) and _baseline_pending(study)

    def spawn(k: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "workbench.cli", "study", "worker", ctx.spec_path, "--storage", ctx.storage_url,
               "--tracking-uri", ctx.tracking_uri, "--n-trials", str(n_trials), "--threads", str(threads),
               "--baseline-threads", str(cores if alone and k == 0 else threads),
               *(["--quiet"] if show_progress else [])]  # the bar reports their trials
        env = None
        if groups:
            cmd += ["--devices", ",".join(map(str, groups[k]))]
            env = {**os.environ, **worker_env(groups[k], kind)}
        # Own session: a terminal's Ctrl-C reaches the driver only, which forwards exactly one SIGINT.
        return subprocess.Popen(cmd, start_new_session=True, env=env)

    procs: list[subprocess.Popen] = []
    bar = progress.bar(n_trials, f"study {ctx.spec.name}", "trials", show_progress)
    previous = _sigterm_as_interrupt()
    try:
        with progress.bar_safe_logging(show_progress), bar:
            procs = [spawn(0)]
            if alone:
                # The first worker runs the baseline alone with every core (its measured mu is the study's
                # reference, its curve may set the target); the others start once both are known, so no core is
                # oversubscribed.
                log.info(f"running the on-policy baseline first with {cores} thread(s) (it sets the study's reference mu)")
                _watch(study, procs, bar, poll, until=lambda: calibrated(study) or not _baseline_pending(study))
            procs += [spawn(k) for k in range(1, workers)]
            _watch(study, procs, bar, poll)
    except KeyboardInterrupt:
        log.warning("interrupted: stopping workers (run `workbench study run` again to resume)")
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        log_to_parent_run(ctx.tracking_uri, study)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    log_to_parent_run(ctx.tracking_uri, study)
    parent = study.user_attrs.get(attrs.PARENT_RUN)
    if parent:
        tracking.set_run_status(ctx.tracking_uri, parent, "FINISHED" if done(study) >= n_trials else "FAILED")
    return study


def _sigterm_as_interrupt():
    """A scheduler's or `kill`'s SIGTERM stops the workers as Ctrl-C does (they run in their own sessions, so
    without this they would outlive the driver). Returns the previous handler, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def _watch(study: optuna.Study, procs, bar, poll: float, until: Callable[[], bool] | None = None) -> None:
    """Report the trial counts when they change (bar or line), until every worker exited (or `until()` holds)."""
    last = None
    while True:
        if until is not None and until():
            return
        alive = [p for p in procs if p.poll() is None]
        line = counts_line(study)
        if line != last:
            if bar.disable:
                log.info(f"[{time.strftime('%H:%M:%S')}] trials: {line}")
            else:
                bar.n = done(study)
                bar.set_postfix_str(line)
            last = line
        if not alive:
            bad = [p.returncode for p in procs if p.returncode not in (0, None)]
            if bad:
                raise RuntimeError(f"a worker exited with code {bad[0]}")
            return
        time.sleep(poll)


def _baseline_pending(study: optuna.Study) -> bool:
    return any(t.user_attrs.get(attrs.BASELINE) and t.state in (TrialState.WAITING, TrialState.RUNNING) for t in study.get_trials(deepcopy=False))


def _requeue_interrupted(study: optuna.Study) -> None:
    """Enqueue again (once) the configurations whose trials were interrupted by Ctrl-C, so none is lost."""
    requeued = set(study.user_attrs.get(attrs.REQUEUED, []))
    todo = [t for t in study.get_trials(deepcopy=False)
            if t.state == TrialState.FAIL and t.user_attrs.get(attrs.INTERRUPTED) and t.number not in requeued]
    for t in todo:
        user_attrs = {attrs.REQUEUED_FROM: t.number, **({attrs.BASELINE: True} if t.user_attrs.get(attrs.BASELINE) else {})}
        study.enqueue_trial(t.params, user_attrs=user_attrs)
    if todo:
        study.set_user_attr(attrs.REQUEUED, sorted(requeued | {t.number for t in todo}))
