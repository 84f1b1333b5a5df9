"""A seed's limits, watched by its worker (`StudySpec.limits`, docs/faults.md): no progress for `stall_s`, longer
than `wall_s`, more resident memory than `memory_mib`. The seed runs in a slot process (`workbench.study.slots`);
a seed over a limit has its process tree killed, as a cgroup's OOM killer or a scheduler's time limit would, and
its trial fails with one line saying which limit. What the watch needs of processes (a tree's memory, killing it)
lives in `workbench.processes`, what an error is in `workbench.faults`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# the names a seed's limits are read with (tests/e2e/test_study_limits.py), kept where they were
from workbench.faults import out_of_memory as out_of_memory
from workbench.processes import descendants as descendants
from workbench.processes import kill_tree as kill_tree
from workbench.processes import resident_mib


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
