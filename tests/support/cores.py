"""The cores a test session may use, and each pytest-xdist worker's share of them.

`make test` runs the suite in as many xdist workers as the machine has cores. Each worker keeps to its own share
(its CPU affinity, set as it starts: `pin_worker`), and every process a test starts inherits it, so a study the
test launches sees one core and runs one torch thread. Without the shares, two studies of two threads each would
take turns on two cores, and a multi-threaded torch process that shares its cores runs tens of times slower
(measured: a 12-step toy trial 0.9 s alone, ~80 s beside another such study).

A test that needs the machine's cores themselves (two workers on cores 0 and 1, `--devices 0,1`) is marked
`all_cores`: it gets every core back and the machine to itself while it runs (`turn`: the other workers' tests
hold a shared lock, an `all_cores` test the exclusive one), so its processes are not slowed by another worker's
on one of its cores (measured: a slot's seed on the shared core started after the other slot's seed had ended).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SAVED = "WORKBENCH_TEST_CORES"
"""The session's cores before a worker took its share (inherited by the test's processes)."""


def machine_cores() -> list[int]:
    """Every core the session may use, whatever this worker's share."""
    if os.environ.get(_SAVED):
        return [int(c) for c in os.environ[_SAVED].split(",")]
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pin_worker(worker: str | None, workers: int) -> None:
    """Keep xdist worker `worker` ("gw0", "gw1", ...) of `workers` to its share of the cores: every
    `workers`-th core from its index (nothing outside xdist, with one worker, or where the system has no affinity)."""
    cores = machine_cores()
    if not worker or workers < 2 or len(cores) < workers or not hasattr(os, "sched_setaffinity"):
        return
    os.environ[_SAVED] = ",".join(map(str, cores))
    os.sched_setaffinity(0, cores[int(worker.removeprefix("gw")) % workers :: workers])


def widened() -> set[int]:
    """Every core for the running test of a pinned worker (an `all_cores` test); returns what to restore."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, machine_cores())
    return before


def pinned() -> bool:
    """Whether this worker keeps to a share of the cores (`pin_worker` did)."""
    return bool(os.environ.get(_SAVED))


_held: list = []
"""The open lock file of this worker's running test (`turn`), for `whole_machine`."""


@contextmanager
def turn(lock: Path, exclusive: bool) -> Iterator[None]:
    """Run a test holding the session's core lock `lock` (a file every worker sees): shared for a test on its
    worker's share, exclusive for an `all_cores` test, which so runs while no other worker's test does."""
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        _held.append(f)
        try:
            yield
        finally:
            _held.pop()
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def whole_machine() -> Iterator[None]:
    """Within a running test: every core, and the machine to itself, for the part that needs them (the test's shared
    lock made exclusive, waiting for the other workers' running tests), then back to its worker's share. An
    `all_cores` test holds the machine from start to end; this keeps the other workers waiting only while it must."""
    if not pinned() or not _held:
        yield
        return
    f = _held[-1]
    fcntl.flock(f, fcntl.LOCK_EX)  # flock converts shared to exclusive by releasing first: no deadlock between two
    before = widened()
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        fcntl.flock(f, fcntl.LOCK_SH)
