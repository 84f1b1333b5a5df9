"""Device slots: a trial's seeds in parallel, one long-lived process per slot of the worker's devices.

A worker given more devices than one trial needs (`--devices 0-7` to one worker, or the on-policy baseline that
runs alone first with every device, `--baseline-devices`) splits them into slots of one trial's need (1 device,
or W + T for an asynchronous trial) and runs a configuration's seeds side by side, one per slot, so no device
idles while a configuration's seeds run in turn. Each slot is a process started once and kept for the worker's
life: it confines itself to its devices (CUDA_VISIBLE_DEVICES before CUDA starts, or its cores as affinity and
threads), and what a process keeps between seeds (the policy's compiled code, a generation engine) serves every
seed it runs.

The worker keeps the trial's bookkeeping: each slot sends its evaluation rows back as they come, the worker
runs the trial's hooks on them (progress, the pruner on the first seed), and a pruned or interrupted trial stops
every slot's seed at its next evaluation, each ending its own run as a lone seed would. A slot process ends with
its worker, also when the worker is killed (`interrupts.die_with_parent`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from workbench import interrupts, processes, progress, tracking
from workbench.faults import out_of_memory
from workbench.processes import SPAWN, kill_tree  # spawned: nothing forked from a worker running Optuna's heartbeat
from workbench.study.limits import Watch
from workbench.trial.loop import TrialStopped

log = logging.getLogger(__name__)

BEAT_S = 1.0
"""How often a slot tells its worker that its seed made progress (a training step), at most."""


class LimitExceeded(RuntimeError):
    """A seed went over one of the study's limits (`StudySpec.limits`) and its worker killed its processes."""


@dataclass(frozen=True)
class Slot:
    """One trial's devices: GPU indices as the worker's CUDA_VISIBLE_DEVICES names them (`visible`), or cores."""

    kind: str
    devices: tuple[int, ...]
    visible: str | None = None
    """cuda: the slot's CUDA_VISIBLE_DEVICES; None leaves the worker's as it is (one slot of all its GPUs)."""

    def describe(self) -> str:
        return f"{self.kind} {','.join(map(str, self.devices))}"


def slots_of(seen: dict[str, Any], need: int) -> list[Slot]:
    """The slots of a worker's devices (`devices.apply`'s record): consecutive groups of `need`, in order."""
    ids = list(seen["devices"])
    visible = (seen.get("visible") or "").split(",") if seen["kind"] == "cuda" else None
    out = []
    for k in range(len(ids) // need):
        group = tuple(ids[k * need : (k + 1) * need])
        names = ",".join(visible[k * need : (k + 1) * need]) if visible else None
        out.append(Slot(seen["kind"], group, names))
    return out


class _Stop:
    """The worker's word to a slot: stop the running seed at its next evaluation, for a reason."""

    def __init__(self):
        self.flag = SPAWN.Event()
        self.text = SPAWN.Array("c", 400)

    def set(self, reason: str) -> None:
        self.text.value = reason.encode()[:399]
        self.flag.set()

    def clear(self) -> None:
        self.flag.clear()

    def check(self) -> None:
        if self.flag.is_set():
            raise TrialStopped(self.text.value.decode() or "stopped")


def _serve(conn, slot: Slot, stop: _Stop, quiet: bool = False) -> None:
    """A slot process: confine to the slot, then run the seeds it is sent until told to end (or its worker dies).
    Its lines go to the worker's stderr as the worker's own would (`quiet` as the worker is), each after the slot's
    name: a seed's warm start, steps and evaluations are seen as they happen, not only when it ends."""
    interrupts.die_with_parent()
    progress.setup_logging(quiet=quiet, prefix=f"[{slot.describe()}] ", bars=False)
    interrupts.name_process("wb-slot")  # what `ps` and `top` show for it (and what the fault tests look for)
    processes.confine(slot.kind, slot.devices, slot.visible)
    # A terminal's Ctrl-C reaches the worker, which ends a running seed with SIGTERM (its run ends KILLED, as a
    # seed run in the worker itself would on Ctrl-C); SIGINT alone would reach this process twice from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupts.interrupt_on(signal.SIGTERM)
    from workbench.trial.loop import run_trial  # after the confinement: torch starts CUDA on its devices only

    try:
        while (job := conn.recv()) is not None:
            cfg, kwargs = job

            def forward(row: dict[str, float]) -> None:
                conn.send(("eval", row))
                stop.check()

            beat = [0.0]

            def stepped(_record) -> None:  # progress for the worker's watchdog, at most every BEAT_S
                if time.monotonic() - beat[0] >= BEAT_S:
                    beat[0] = time.monotonic()
                    conn.send(("step", None))

            try:
                result = run_trial(
                    cfg,
                    on_eval=forward,
                    observer=stepped,
                    on_run_created=lambda run_id: conn.send(("run", run_id)),
                    **kwargs,
                )
                conn.send(("done", result))
            except BaseException as err:  # noqa: BLE001  (reported to the worker, which raises it for the trial)
                conn.send(("error", _portable(err)))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the worker is gone, or stopping


def _portable(err: BaseException) -> BaseException:
    """`err` if it survives pickling (its type and message are the trial's failure reason), else a RuntimeError
    that names it."""
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(err).__name__}: {err}\n{''.join(traceback.format_exception(err))[-2000:]}")


class SlotPool:
    """One process per slot, started on first use and kept until `close`."""

    def __init__(self, slots: list[Slot], limits=None):
        self.slots = slots
        self.limits = limits
        """The study's `TrialLimits` (None: none), watched on every seed."""
        self._procs: list[tuple[Any, Any, Any]] = []  # (process, connection, stop event)

    def _start(self) -> None:
        self._procs = [self._spawn(slot) for slot in self.slots]
        log.info(
            f"device slots: {' | '.join(s.describe() for s in self.slots)} (a configuration's seeds run side by side)"
        )

    @staticmethod
    def _spawn(slot: Slot) -> tuple[Any, Any, Any]:
        parent, child = SPAWN.Pipe()
        stop = _Stop()
        quiet = not logging.getLogger("workbench").isEnabledFor(logging.INFO)
        proc = SPAWN.Process(
            target=_serve, args=(child, slot, stop, quiet), name=f"workbench-slot-{slot.describe()}", daemon=True
        )
        proc.start()
        child.close()
        return proc, parent, stop

    def _revive(self) -> None:
        """A slot whose process died (killed for its memory, say) gets a new one: the next trial has every slot."""
        for k, (proc, conn, _) in enumerate(self._procs):
            if not proc.is_alive():
                conn.close()
                log.warning(
                    f"device slot {self.slots[k].describe()}: its process ended ({proc.exitcode}); starting it again"
                )
                self._procs[k] = self._spawn(self.slots[k])

    def run(self, jobs: list[tuple[Any, dict[str, Any]]], hooks: list[Callable[[dict[str, float]], None]]) -> list[Any]:
        """Run `jobs` (a trial config and `run_trial`'s keyword arguments each) over the slots, at most one per slot
        at a time, calling `hooks[i]` on job i's evaluation rows; the results in the jobs' order. The first error
        (a hook's `TrialStopped`, a seed's failure, Ctrl-C) stops the other seeds at their next evaluation, and is
        raised once every slot is idle."""
        if not self._procs:
            self._start()
        self._revive()
        results: list[Any] = [None] * len(jobs)
        pending = list(range(len(jobs)))
        busy: dict[Any, int] = {}  # connection -> job index
        watches: dict[Any, Watch] = {}
        limited = self.limits is not None and self.limits.any
        failure: BaseException | None = None
        for _, _, stop in self._procs:
            stop.clear()
        try:
            while pending or busy:
                for proc, conn, _ in self._procs:
                    if pending and conn not in busy and failure is None:
                        i = pending.pop(0)
                        cfg, kwargs = jobs[i]
                        slot = self.slots[[c for _, c, _ in self._procs].index(conn)]
                        conn.send((cfg, {**kwargs, "tags": {**kwargs.get("tags", {}), tracking.SLOT: slot.describe()}}))
                        busy[conn] = i
                        watches[conn] = Watch()
                if not busy:
                    break
                if limited:
                    failure = self._police(busy, watches, jobs, failure)
                for conn in wait(list(busy), timeout=1.0 if limited else 5.0):
                    i = busy[conn]
                    try:
                        kind, payload = conn.recv()
                    except EOFError:
                        del busy[conn]
                        failure = failure or RuntimeError(
                            f"the slot process of seed {i + 1} died (exit code {self._exit_code(conn)})"
                        )
                        self._stop_all(str(failure))
                        continue
                    if kind in ("step", "eval", "run"):
                        watches[conn].progress()
                    if kind == "run":
                        watches[conn].run_id = payload
                    elif kind == "eval":
                        try:
                            hooks[i](payload)
                        except TrialStopped as err:
                            failure = failure or err
                            self._stop_all(str(err))
                    elif kind == "done":
                        results[i] = payload
                        del busy[conn]
                    elif kind == "error":
                        del busy[conn]
                        if out_of_memory(payload):  # what it held may not be given back: a fresh process
                            self._restart(conn)
                        if failure is None:
                            failure = payload
                            self._stop_all(f"seed {i + 1} failed")
                pending = [] if failure is not None else pending
        except KeyboardInterrupt:
            for proc, conn, _ in self._procs:
                if conn in busy and proc.is_alive():
                    os.kill(proc.pid, signal.SIGTERM)  # the seed's run ends KILLED
            self._drain(busy)
            raise
        if failure is not None:
            raise failure
        return results

    def _police(self, busy: dict[Any, int], watches: dict[Any, Watch], jobs, failure):
        """Kill the process tree of every busy seed over a limit, end its run FAILED with the reason, stop the
        others; the first failure (this one, if there was none)."""
        for conn in list(busy):
            proc = self._proc(conn)
            reason = watches[conn].over(self.limits, proc.pid)
            if reason is None:
                continue
            i = busy.pop(conn)
            kill_tree(proc.pid)
            proc.join(timeout=5.0)
            log.warning(f"seed {i + 1}: {reason}")
            run_id = watches[conn].run_id
            if run_id is not None:
                try:
                    tracking.fail_run(jobs[i][0].tracking.uri, run_id, f"{LimitExceeded.__name__}: {reason}")
                except Exception as err:  # noqa: BLE001 - the tracking store away: the trial's failure still says it
                    log.warning(f"seed {i + 1}: its run {run_id} could not be ended ({tracking.failure_reason(err)})")
            if failure is None:
                failure = LimitExceeded(reason)
                self._stop_all(f"seed {i + 1}: {reason}")
        return failure

    def _proc(self, conn):
        return next(proc for proc, c, _ in self._procs if c is conn)

    def _restart(self, conn) -> None:
        """End a slot's process now (it is started again before the next seed: `_revive`)."""
        proc = self._proc(conn)
        kill_tree(proc.pid)
        proc.join(timeout=5.0)

    def _stop_all(self, reason: str) -> None:
        for _, _, stop in self._procs:
            stop.set(reason)

    def _drain(self, busy: dict[Any, int]) -> None:
        """Wait (up to a minute) for the stopped seeds to end their runs."""
        while busy:
            ready = wait(list(busy), timeout=60.0)
            if not ready:
                return
            for conn in ready:
                try:
                    kind, _ = conn.recv()
                except EOFError:
                    kind = "gone"
                if kind in ("done", "error", "gone"):
                    del busy[conn]

    def _exit_code(self, conn) -> int | None:
        for proc, c, _ in self._procs:
            if c is conn:
                proc.join(timeout=1.0)
                return proc.exitcode
        return None

    def close(self) -> None:
        for proc, conn, _ in self._procs:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        processes.stop([proc for proc, _, _ in self._procs], wait_s=30)
        self._procs = []
