"""A trial's MLflow run driven from a helper process, for `workbench train`.

Importing MLflow and opening its store takes ~1.9 s of Python, and the trial process spends its first ~3.5 s
importing torch and transformers on one core. `RunProcess` starts a helper process before those imports: MLflow
loads and the run is created on the other core meanwhile, and the trial talks to it through a pipe with
`RunLogger`'s methods. Metrics and tags are sent without waiting (their errors surface at the next call that
waits: `log_params`, `flush`, `log_text`, `end`), so the store's writes never stall a training step either.

If the trial process dies without ending the run, the helper ends it FAILED with that reason. Ctrl-C reaches
both processes; the helper ignores it and lets the trial end the run KILLED, as an in-process run would be.
A study worker keeps its runs in-process (`tracking.RunLogger`): it imports MLflow once for all its trials.
"""

from __future__ import annotations

import atexit
import queue
import sys
import signal
import threading
import time
from typing import Any

from workbench import tracking
from workbench.processes import SPAWN

REPLY_TIMEOUT = 600.0
"""Seconds to wait for the helper's answer before calling it hung."""


def _serve(
    conn,
    tracking_uri: str,
    experiment: str,
    run_name: str | None,
    parent_run_id: str | None,
    tags: dict[str, str] | None,
    outage_s: float,
) -> None:
    """The helper process: create the run, then apply the trial's calls in order until `end` or a closed pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gone = "the trial process exited without ending its run"
    try:
        run = tracking.RunLogger(tracking_uri, experiment, run_name, parent_run_id, tags, outage_s=outage_s)
    except Exception as err:  # noqa: BLE001  (reported to the trial, which raises it)
        _send(conn, ("error", tracking.failure_reason(err)))
        return
    if not _send(conn, ("ok", run.run_id)):  # the trial stopped before its run was ready (bad input found late)
        run.end(tracking.STATUS_FAILED, gone)
        return
    deferred: str | None = None  # the first error of a call the trial did not wait for
    calls = _reader(conn)
    while True:
        call = calls.get()
        if call is not None:
            method, args, wants_reply = call
        else:  # gone without a word: killed (a SIGKILL, the kernel's OOM killer)
            run.end(tracking.STATUS_FAILED, gone)
            sys.stderr.write(f"workbench: the trial process is gone (killed?); its run {run.run_id} ended FAILED\n")
            return
        if method == "exit":  # the trial process exits without `end` (an error it reported itself)
            run.end(tracking.STATUS_FAILED, gone)
            return
        try:
            result = getattr(run, method)(*args)
        except Exception as err:  # noqa: BLE001
            result, deferred = None, deferred or tracking.failure_reason(err)
            if isinstance(err, tracking.TrackingUnavailable) and not wants_reply:  # the trial cannot be recorded: say
                _send(conn, ("error", deferred))  # so now, not at its next call that waits (its end, hours later)
                deferred = None
        if wants_reply:
            if not _send(conn, ("error", deferred) if deferred else ("ok", result)):
                if method != "end":
                    run.end(tracking.STATUS_FAILED, gone)
                return
            deferred = None
        if method == "end":
            return


def _reader(conn) -> "queue.Queue":
    """The trial's calls as they arrive, read by a thread (None once the pipe closed): the trial never waits on a
    full pipe while this process waits out a tracking server's outage (`tracking.RunLogger`)."""
    calls: queue.Queue = queue.Queue()

    def read() -> None:
        while True:
            try:
                call = conn.recv()
            except (EOFError, OSError):
                calls.put(None)
                return
            calls.put(call)
            if call[0] in ("end", "exit"):
                return

    threading.Thread(target=read, name="workbench-mlflow-reader", daemon=True).start()
    return calls


def _send(conn, message) -> bool:
    """Send to the trial process; False when it is gone (its end of the pipe closed), never a traceback."""
    try:
        conn.send(message)
        return True
    except (BrokenPipeError, EOFError, OSError):
        return False


class RunProcess:
    """A new MLflow run owned by a helper process, with `tracking.RunLogger`'s interface."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
        outage_s: float = 300.0,
    ):
        self._conn, child = SPAWN.Pipe()
        self._proc = SPAWN.Process(
            target=_serve,
            args=(child, tracking_uri, experiment, run_name, parent_run_id, tags, outage_s),
            name="workbench-mlflow",
            daemon=True,
        )
        self._proc.start()
        child.close()
        self.tracking_uri = tracking_uri
        self._run_id: str | None = None
        # a process that exits without `end` closes the pipe first (before multiprocessing stops its daemons), so
        # the helper ends the run FAILED instead of being killed with it RUNNING
        atexit.register(self._close)

    def _close(self) -> None:
        if not self._conn.closed:
            _send(self._conn, ("exit", (), False))  # an exit, not a kill: the helper ends the run without a word
            self._conn.close()
        self._proc.join(timeout=30)

    def _answer(self, timeout: float = REPLY_TIMEOUT) -> Any:
        if not self._conn.poll(timeout):
            raise RuntimeError(f"MLflow logging process: no answer in {REPLY_TIMEOUT:.0f} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(timeout=5)
            raise RuntimeError(f"MLflow logging process exited (code {self._proc.exitcode})") from None
        if kind == "error":
            unavailable = f"{tracking.TrackingUnavailable.__name__}: "
            if value.startswith(unavailable):
                raise tracking.TrackingUnavailable(value.removeprefix(unavailable))
            raise RuntimeError(f"MLflow: {value}")
        return value

    @property
    def run_id(self) -> str:
        """The run's id (waits for the helper to have created it; raises what creating it raised)."""
        if self._run_id is None:
            self._run_id = self._answer()
        return self._run_id

    def _call(self, method: str, *args, reply: bool = False) -> Any:
        self.run_id  # noqa: B018  (the run exists, or its creation's error is raised here)
        if not reply and self._conn.poll():  # the helper said, unasked, that the run cannot be recorded
            self._answer(timeout=0)
        try:
            self._conn.send((method, args, reply))
        except (BrokenPipeError, OSError):
            self._proc.join(timeout=5)
            raise RuntimeError(f"MLflow logging process exited (code {self._proc.exitcode})") from None
        return self._answer() if reply else None

    def log_params(self, params: dict[str, Any]) -> None:
        self._call("log_params", params, reply=True)

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._call("set_tags", tags)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._call("log_metrics", metrics, step, int(time.time() * 1000))

    def flush(self) -> None:
        self._call("flush", reply=True)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call("log_text", text, artifact_file, reply=True)

    def end(self, status: str, reason: str | None = None) -> None:
        try:
            self._call("end", status, reason, reply=True)
        finally:
            self._close()
            atexit.unregister(self._close)
