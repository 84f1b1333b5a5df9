"""`workbench study worker`: join a study from any machine and run its trials until the study has enough.

Before joining, the configurations the study runs are checked on this machine (`workbench.study.preflight`).
Trials come from Optuna's `study.optimize`; a callback in the manner of Optuna's `MaxTrialsCallback` (counting as
this study counts: skipped proposals and `study verify` arms do not count) stops it when the study is done, its
failures stop it (`workbench.study.failfast`), the space is exhausted, or the remaining work is in flight
elsewhere. The worker then waits rather than exits while another worker's trial may still need a retry (its
heartbeat stops if it dies) or while the baseline runs elsewhere (it sets the reference mu). A trial that raises
fails with its reason; the worker goes on unless that failure stops the study.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import optuna
from optuna.trial import TrialState

from workbench import faults
from workbench import interrupts, tracking
from workbench.study import attrs, failfast, lr_sweep
from workbench.study.context import StudyContext, calibrated, load_existing, stores_full
from workbench.study.placement import place
from workbench.study.objective import StudyObjective
from workbench.study.preflight import check_study
from workbench.study.spec import StudySpec, feasible_space_size
from workbench.study.storage import awaiting_silent
from workbench.study.summary import counts

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0
MU_WAIT_SECONDS = 3600


def space_exhausted(study: optuna.Study, spec: StudySpec) -> bool:
    """A finite space (all knobs choices or stepped ranges) whose feasible configurations have all been run."""
    size = feasible_space_size(spec)
    if size is None:
        return False
    ran = {
        tuple(sorted(t.params.items()))
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if not t.user_attrs.get(attrs.SKIPPED) and not t.user_attrs.get(attrs.ARM)
    }
    return len(ran) >= size


def baseline_running(study: optuna.Study) -> bool:
    return any(
        t.user_attrs.get(attrs.BASELINE) and t.state == TrialState.RUNNING for t in study.get_trials(deepcopy=False)
    )


class StudyBudget:
    """When a worker stops asking for trials: an Optuna callback, and the checks the worker makes between runs."""

    def __init__(self, spec: StudySpec, n_trials: int):
        self.spec, self.n_trials = spec, n_trials

    def target(self, study: optuna.Study) -> int:
        """Trials to complete: `n_trials`, the learning rates an lr sweep queued past its ends, less the points it
        skipped past a decline."""
        return lr_sweep.to_run(study, self.n_trials)

    def finished(self, study: optuna.Study) -> str | None:
        """Why the study needs no more trials from anyone (None while it does)."""
        c = counts(study)
        if c["complete"] + c["pruned"] >= self.target(study):
            return "done"
        stop = failfast.check(study, self.spec)
        if stop is not None:
            return stop.reason
        if c["skipped"] >= 10 * self.target(study) or space_exhausted(study, self.spec):
            return "the search space has no untried feasible configuration left"
        return None

    def waiting(self, study: optuna.Study) -> bool:
        """Whether this worker should wait instead of starting a trial: the baseline is running elsewhere without
        a reference mu or target yet, or the remaining trials are all in flight elsewhere (stay to retry them if their
        worker dies)."""
        if not calibrated(study) and baseline_running(study):
            return True
        c = counts(study)
        return c["complete"] + c["pruned"] + c["running"] >= self.target(study)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        lr_sweep.extend(study, self.spec)
        if self.finished(study) or self.waiting(study):
            study.stop()


def run_worker(
    ctx: StudyContext,
    n_trials: int,
    threads: int | None = None,
    baseline_threads: int | None = None,
    devices: list[int] | None = None,
    baseline_devices: list[int] | None = None,
) -> failfast.Stop | None:
    """Run trials of an existing study until `n_trials` are complete (or pruned); fault-tolerant. Returns the
    failures that stopped the study, if they did (`workbench.study.failfast`).

    The study's configurations are checked on this machine first (`ConfigError`, nothing run). A trial that raises
    (NaN, exception, out of memory) fails with its reason and the worker goes on, unless the failure stops the
    study; trials of dead workers are failed by heartbeat and retried. With `devices`, the process confines itself
    to them first (`workbench.study.devices.apply`) and every trial records them; where they hold more than one
    trial's need, a configuration's seeds run side by side, one per slot (`workbench.study.slots`), and so do the
    baseline's over `baseline_devices`.
    """
    check_study(ctx.spec)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # A study started in the background of a script (`nohup workbench study run ... &`) inherits SIGINT ignored,
        # and so would its workers: the driver's forwarded SIGINT (its Ctrl-C, its SIGTERM) must stop them.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.install()  # a SIGINT that lands in a garbage-collector callback is delivered again, not lost
    placed = place(ctx.spec, devices, baseline_devices, threads, baseline_threads)
    study = load_existing(ctx)
    objective = StudyObjective(
        ctx, study, placed.threads, placed.baseline_threads, devices=placed.seen, pools=placed.pools
    )
    try:
        return _run(ctx, study, objective, n_trials)
    finally:
        placed.close()


def _run(ctx: StudyContext, study: optuna.Study, objective: StudyObjective, n_trials: int) -> failfast.Stop | None:
    """The worker's loop; a store's disk found full anywhere in it (a trial's run, a storage write) stops it with
    one line (`tracking.StoresFull`)."""
    try:
        return _trials(ctx, study, objective, n_trials)
    except Exception as err:
        if faults.disk_full(err) or objective.stores_full:
            raise tracking.StoresFull(stores_full(ctx)) from None
        raise


def _trials(ctx: StudyContext, study: optuna.Study, objective: StudyObjective, n_trials: int) -> failfast.Stop | None:
    budget = StudyBudget(ctx.spec, n_trials)
    waited = 0.0
    while True:
        if objective.stores_full:
            raise tracking.StoresFull(stores_full(ctx))
        optuna.storages.fail_stale_trials(study)
        why = budget.finished(study)
        if why == "done" and awaiting_silent(study):
            time.sleep(POLL_SECONDS)
            continue
        if why:
            if why == "done":
                return None
            log.warning(f"stopping: {why}")
            return failfast.check(study, ctx.spec)
        if budget.waiting(study):
            if not calibrated(study) and waited >= MU_WAIT_SECONDS:
                raise RuntimeError("gave up waiting for the baseline trial to set the study's reference mu and target")
            time.sleep(POLL_SECONDS)
            waited += POLL_SECONDS
            continue
        optimize(study, objective, budget)
        if objective.stores_full:
            raise tracking.StoresFull(stores_full(ctx))


class _Watched:
    """The objective, remembering which trial it last ran and whether that run returned."""

    def __init__(self, objective):
        self.objective, self.trial_id, self.returned = objective, None, False

    def __call__(self, trial: optuna.Trial):
        self.trial_id, self.returned = trial._trial_id, False
        value = self.objective(trial)
        self.returned = True
        return value


def optimize(study: optuna.Study, objective, budget) -> None:
    """`study.optimize` that survives its own trial being declared dead.

    A worker stalled past the heartbeat grace period (suspended, swapping, a long GC) has its trial failed and
    retried by another worker; when it wakes and finishes, Optuna cannot record the result (its tell finds a FAIL
    trial) and raises outside `catch`. The retry owns that configuration now: drop this result and go on.
    """
    watched = _Watched(objective)
    try:
        study.optimize(watched, callbacks=[budget], catch=(Exception,), gc_after_trial=True)
    except (ValueError, AssertionError):
        if not (watched.returned and study._storage.get_trial(watched.trial_id).state == TrialState.FAIL):
            raise
        log.warning(
            "this worker's trial was declared dead (no heartbeat within the grace period) and is retried "
            "elsewhere; its result is dropped"
        )
