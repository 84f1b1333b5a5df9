"""Where a process's trials run: the devices it confines itself to, the slots that run a configuration's seeds side
by side, and the torch threads each seed gets. One home for the study worker and the commands that train arms of a
study (`study confirm`, `verify`, `race`): `--devices 0-1` on two cores runs two seeds at once, one thread each.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workbench.study.context import StudyContext
from workbench.study.devices import apply, describe, detect_kind, per_trial, split_devices
from workbench.study.slots import Slot, SlotPool, slots_of
from workbench.study.objective import StudyObjective
from workbench.study.spec import StudySpec

log = logging.getLogger("workbench.study")


@dataclass
class Placement:
    seen: dict[str, Any] | None = None
    """The devices this process confined itself to (`workbench.study.devices.apply`), None without `--devices`."""
    pools: dict[str, SlotPool] = field(default_factory=dict)
    """Slot pools by role: "trials" (its own devices' slots), "baseline" (a baseline run side by side elsewhere)."""
    threads: int | None = None
    baseline_threads: int | None = None

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()


def place(
    spec: StudySpec,
    devices: list[int] | None,
    baseline_devices: list[int] | None = None,
    threads: int | None = None,
    baseline_threads: int | None = None,
) -> Placement:
    """Confine this process to `devices` (enough for one trial, or a one-line `ConfigError`) and split them into
    slots where they hold more than one trial's need; a study whose seeds are watched (`StudySpec.limits`) runs them
    in a process of their own even without."""
    seen, pools = None, {}
    if devices is not None:
        need = per_trial(spec.base)
        split_devices(devices, 1, need)
        seen = apply(devices)
        if seen["kind"] == "cpu":
            threads = baseline_threads = len(devices)
        sees = seen.get("visible") or ",".join(map(str, seen.get("affinity") or []))
        log.info(f"worker {os.getpid()}: {seen['kind']} devices {','.join(map(str, devices))} (it sees {sees})")
        pools = slot_pools(
            seen, need, describe(baseline_devices, seen["kind"]) if baseline_devices else None, spec.limits
        )
    if spec.limits.any and "trials" not in pools:
        pools["trials"] = SlotPool([whole_slot(seen)], spec.limits)
    return Placement(seen, pools, threads, baseline_threads)


def slot_pools(seen: dict, need: int, baseline: dict | None, limits=None) -> dict[str, SlotPool]:
    """The worker's slot pools: its own devices' ("trials") where they hold several slots, and the baseline's
    ("baseline") where `baseline` (its devices' record) holds several; each watches `limits`."""
    pools = {}
    if len(own := slots_of(seen, need)) > 1:
        pools["trials"] = SlotPool(own, limits)
    if baseline is not None and len(theirs := slots_of(baseline, need)) > 1:
        pools["baseline"] = SlotPool(theirs, limits)
    return pools


def whole_slot(seen: dict | None) -> Slot:
    """One slot of everything this worker has (its `--devices`, else every GPU or core it sees): where its seeds run
    when they are watched (`StudySpec.limits`) and there are no slots to spread them over."""
    if seen is not None:
        return Slot(seen["kind"], tuple(seen["devices"]), seen.get("visible"))
    if detect_kind() == "cuda":
        return Slot("cuda", (0,), None)
    return Slot("cpu", tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else (0,))


@contextlib.contextmanager
def arm_objective(ctx: StudyContext, study, threads: int | None, devices: list[int] | None) -> Iterator[StudyObjective]:
    """The objective that trains arms of an existing study (`study confirm`, `verify`, `race`) on `devices`: with
    several slots a configuration's seeds run side by side; its slots close when the command ends."""
    placed = place(ctx.spec, devices, threads=threads)
    try:
        yield StudyObjective(ctx, study, placed.threads, devices=placed.seen, pools=placed.pools)
    finally:
        placed.close()
