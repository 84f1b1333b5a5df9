"""Ctrl-C and SIGTERM that are never lost to a garbage-collector callback.

Python runs a signal's handler at the next bytecode of the main thread, wherever that is. When it is inside a weakref
callback or a `__del__` (SQLAlchemy's registry cleans up through weakref callbacks while Optuna's storage is
collected), the handler's `KeyboardInterrupt` cannot propagate: Python prints "Exception ignored in ..." with a
traceback and goes on as if no signal had come. A worker that lost its SIGINT so ran until the driver killed it
(measured in CI: the traceback on stderr, the trial's run ended by the kill, not by the interrupt).

`install()` puts a `sys.unraisablehook` in front of Python's: a swallowed `KeyboardInterrupt` is not printed but
delivered again (the signal sent anew 50 ms later, so its handler runs in ordinary code). Every other
unraisable exception goes to the previous hook unchanged. `interrupt_on(signum)` makes a signal raise
`KeyboardInterrupt` as SIGINT does, and records it as the one to raise again.
"""

from __future__ import annotations

import faulthandler
import io
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

REDELIVER_AFTER_S = 0.05
"""Seconds before a swallowed interrupt's signal is sent again (the collector's callbacks take microseconds)."""

_state = {"signum": signal.SIGINT, "previous": None}


def _redeliver(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        # Raised from here, the handler would run inside this hook (and be swallowed again): a thread sends the
        # signal once the main thread is out of the callback.
        again = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), _state["signum"]))
        again.daemon = True
        again.start()
        return
    _state["previous"](unraisable)


def install() -> None:
    """Deliver again any KeyboardInterrupt Python would swallow (idempotent)."""
    if sys.unraisablehook is not _redeliver:
        _state["previous"] = sys.unraisablehook
        sys.unraisablehook = _redeliver


def _raise_interrupt(signum, frame):
    _state["signum"] = signum
    raise KeyboardInterrupt


def interrupt_on(signum: int):
    """Make `signum` raise KeyboardInterrupt in the main thread; returns the previous handler (None off the main
    thread, where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    install()
    return signal.signal(signum, _raise_interrupt)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt as Ctrl-C does (then the handler before): a command
    that records a trial as running (`study confirm`, `race`, `verify`) ends it as failed when a scheduler or `kill`
    stops it, instead of leaving it running for good (no heartbeat marks it stale: `study pack` refused the study)."""
    previous = interrupt_on(signal.SIGTERM)
    try:
        yield
    finally:
        restore(signal.SIGTERM, previous)


def ending() -> None:
    """The process ends on an interrupt it has handled: from now on Ctrl-C and SIGTERM, a second one or one delivered
    again (`install`), are ignored. Raised past the exit, a KeyboardInterrupt makes Python end the process by
    SIGINT, so the caller would read exit -2 where 130 was chosen (seen once in CI: `study confirm` stopped by SIGTERM
    said "interrupted" and exited -2)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def restore(signum: int, previous) -> None:
    """Put back the handler `interrupt_on` replaced."""
    if previous is not None:
        signal.signal(signum, previous)
        if _state["signum"] == signum:
            _state["signum"] = signal.SIGINT


def dump_stacks_on(signum: int) -> bool:
    """On `signum`, write every thread's Python stack to stderr and go on (`faulthandler`): how a study that seems
    stuck says where it is (`kill -USR1 PID`), and what a test that timed out waiting on a process prints. Returns
    whether it is armed (not on platforms without the signal)."""
    try:
        faulthandler.register(signum, all_threads=True, chain=False)
    except (AttributeError, ValueError, RuntimeError, io.UnsupportedOperation):
        return False  # no such signal here, or stderr is not a real file
    return True


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_NAME = 15


def _prctl(option: int, arg) -> bool:
    """Linux's prctl(option, arg); whether it took (False elsewhere)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False  # not Linux


def name_process(title: str) -> None:
    """This process's name as the kernel shows it (`ps`, `top`, /proc/PID/comm; 15 bytes at most)."""
    _prctl(PR_SET_NAME, title.encode()[:15])


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send `signum` to this process when its parent dies (Linux; a SIGKILLed parent runs no
    clean-up of its own, so its children would otherwise run on, orphaned). Returns whether it is armed; a parent
    already gone ends this process at once."""
    parent = os.getppid()
    armed = _prctl(PR_SET_PDEATHSIG, int(signum))
    if armed and os.getppid() != parent:  # the parent died before the request took hold
        os.kill(os.getpid(), signum)
    return armed
