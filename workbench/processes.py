"""Processes, in one place: how the workbench starts a child process, confines a process to its devices, finds and
kills a process tree, and stops a set of processes.

- `SPAWN`: every Python child is spawned, never forked (a study worker runs threads: Optuna's heartbeat, MLflow's;
  a trial runs torch's), so a child holds no lock a thread of its parent held.
- `usable_cores`: the cores this process may run on (its CPU affinity: `taskset`, a cgroup's cpuset), which
  every default thread count starts from.
- `confine`: a process on its devices, before CUDA starts: its CUDA_VISIBLE_DEVICES, or its cores as its CPU
  affinity, and its thread count.
- `descendants`, `resident_mib`, `kill_tree`: a process tree through Linux's /proc (a seed over its limits is
  killed with everything under it, as a cgroup's OOM killer would: docs/faults.md).
- `stop`: a set of child processes ended whatever state they are in: waited for, then terminated, then killed.

Nothing of the workbench is imported here.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence

SPAWN = multiprocessing.get_context("spawn")
"""The context every child process of the workbench is started from (its processes, pipes, queues, locks, shared
values): spawned, nothing forked from a parent that runs threads."""


# ---------------------------------------------------------------- devices


def usable_cores() -> int:
    """How many cores this process may run on: its CPU affinity where the system has one (Linux), else every core.
    A process kept to one core by `taskset -c 0` on a 2-core machine counts 1, so it starts one torch thread, not
    two that would take turns on that core (a multi-threaded torch process sharing its cores runs tens of times
    slower: each parallel region waits for a thread that is not scheduled)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def confine(
    kind: str | None, devices: Sequence[int] = (), visible: str | None = None, threads: int | None = None
) -> None:
    """Confine this process to `devices`, before CUDA starts (CUDA reads CUDA_VISIBLE_DEVICES once):

    - `kind` "cuda": CUDA_VISIBLE_DEVICES becomes `visible` (the GPUs' names as the parent's mask counts them;
      None leaves it as inherited);
    - `kind` "cpu": the devices are cores, the process's CPU affinity (where the system has one: not macOS);
    - `kind` None: its devices are left as they are;
    - `threads`: OMP_NUM_THREADS (read by torch as it starts, and inherited by the process's children) and, where
      torch has started already, its thread count (None leaves both as they are)."""
    if kind == "cuda":
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    elif kind is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, devices)
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        if "torch" in sys.modules:  # not imported here: a process confined before torch starts stays without it
            sys.modules["torch"].set_num_threads(threads)


# ---------------------------------------------------------------- process trees


def descendants(pid: int) -> list[int]:
    """Every live process under `pid` (Linux /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry))
    out, frontier = [], [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            out.append(child)
            frontier.append(child)
    return out


def resident_mib(pid: int) -> float:
    """Resident memory of `pid` and every process under it, MiB (0 where /proc is not there)."""
    total = 0
    for p in (pid, *descendants(pid)):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and everything under it (children first found, so none is reparented out of reach)."""
    for p in [*descendants(pid), pid]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- a set of processes


def stop(
    procs: Iterable,
    wait_s: float,
    terminate_s: float | None = None,
    while_waiting: Callable[[], None] | None = None,
    poll_s: float = 0.05,
) -> None:
    """End `procs` (`multiprocessing` processes, already told to stop, if at all): wait up to `wait_s` in all for
    them to exit (calling `while_waiting()` every `poll_s` meanwhile, where given: to empty the queues they write
    to, so none waits on a full pipe), then SIGTERM each one left and wait `terminate_s` (None: no SIGTERM), then
    SIGKILL each one still left; every one is joined."""
    procs = list(procs)
    deadline = time.monotonic() + wait_s
    if while_waiting is None:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    else:
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            while_waiting()
            time.sleep(poll_s)
    for p in procs:
        if terminate_s is not None and p.is_alive():
            p.terminate()
            p.join(terminate_s)
        if p.is_alive():
            p.kill()
            p.join(1.0)
