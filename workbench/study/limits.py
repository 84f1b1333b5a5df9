"""A seed's limits, watched by its worker (`StudySpec.limits`, docs/faults.md): no progress for `stall_s`, longer
than `wall_s`, more resident memory than `memory_mib`. The seed runs in a slot process (`workbench.study.slots`);
a seed over a limit has its process tree killed, as a cgroup's OOM killer or a scheduler's time limit would, and
its trial fails with one line saying which limit."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

OUT_OF_MEMORY = ("MemoryError", "OutOfMemoryError")
"""Exceptions that say a seed ran out of memory itself (host, or CUDA: `torch.OutOfMemoryError`)."""


def out_of_memory(err: BaseException) -> bool:
    """Whether a seed's failure is out of memory (its process may keep what it held: it is restarted)."""
    text = str(err).lower()
    return type(err).__name__ in OUT_OF_MEMORY or "out of memory" in text or "can't allocate memory" in text


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
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
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
            for line in open(f"/proc/{p}/status"):
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


@dataclass
class Watch:
    """One running seed as its worker sees it: when it started, when it last made progress, its MLflow run."""

    started: float = field(default_factory=time.monotonic)
    progressed: float = field(default_factory=time.monotonic)
    run_id: str | None = None

    def progress(self) -> None:
        self.progressed = time.monotonic()

    def over(self, limits, pid: int) -> str | None:
        """Which limit the seed (in process `pid`) is over, as its failure's one line; None within them."""
        now = time.monotonic()
        if limits.stall_s is not None and now - self.progressed > limits.stall_s:
            return (
                f"hung: no training step for {now - self.progressed:.0f} s (limits.stall_s {limits.stall_s:g});"
                " its processes were killed"
            )
        if limits.wall_s is not None and now - self.started > limits.wall_s:
            return f"over its wall-time limit: {now - self.started:.0f} s (limits.wall_s {limits.wall_s:g}); its processes were killed"
        if limits.memory_mib is not None:
            rss = resident_mib(pid)
            if rss > limits.memory_mib:
                return (
                    f"out of memory: its processes held {rss:.0f} MiB (limits.memory_mib {limits.memory_mib:g});"
                    " they were killed"
                )
        return None
