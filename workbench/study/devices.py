"""The devices of a study's workers: `--devices 0,1,2,3` split into one set per worker process.

A synchronous trial needs one device, an asynchronous one W + T (`pipeline.generators` + `pipeline.trainers`,
docs/pipeline.md); `study run --workers K --devices ...` gives worker k the k-th group of that many, and
`study worker --devices ...` gives its one process the set it names. A worker never touches a device outside its set:

- on a GPU machine its environment's CUDA_VISIBLE_DEVICES lists exactly its devices (set before CUDA starts), so
  every trial it runs sees them as `cuda:0` .. and nothing else; the ids count within the CUDA_VISIBLE_DEVICES the
  study was started with (a scheduler's mask), as CUDA's own indices do;
- on a CPU the ids are cores: the worker pins itself to them (its CPU affinity, inherited by the processes it
  starts: an asynchronous trial's generators and trainers) and runs torch with one thread per core.

A worker with more devices than one trial needs runs a configuration's seeds side by side, one per slot of a
trial's need (`workbench.study.slots`). Each trial records the set its worker ran with (`attrs.DEVICES`): kind, ids, and what the process saw (its
CUDA_VISIBLE_DEVICES or its affinity), which is how tests check real workers.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from workbench.config import ConfigError, PipelineConfig


def parse_devices(text: str) -> list[int]:
    """`0,1,2,3`, `0-3` or a mix (`0-1,4,6-7`), in the order given; duplicates and anything else are errors."""
    ids: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        found = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not found:
            raise ConfigError(f"--devices: expected ids like 0,1,2 or 0-3, got {part!r}")
        lo, hi = int(found.group(1)), int(found.group(2) or found.group(1))
        if hi < lo:
            raise ConfigError(f"--devices: the range {part} runs backwards")
        ids += range(lo, hi + 1)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConfigError(f"--devices: {','.join(map(str, duplicates))} listed twice")
    return ids


def per_trial(base: dict[str, Any]) -> int:
    """Devices one trial of a study with this base config needs: 1, or W + T for an asynchronous trial."""
    pipeline = PipelineConfig(**(base.get("pipeline") or {}))
    return pipeline.generators + pipeline.trainers if pipeline.mode == "async" else 1


def split_devices(ids: list[int], workers: int, need: int) -> list[list[int]]:
    """Worker k gets ids[k·share : (k + 1)·share], share = len(ids) // workers (at least `need`: a worker with more
    devices than one trial needs, on a CPU, runs its trials with more threads)."""
    if len(ids) < workers * need:
        per = f" ({need} per trial: {'W + T' if need > 1 else 'one'})"
        raise ConfigError(
            f"--devices: {len(ids)} device(s) for {workers} worker(s) x {need}{per}; give at least {workers * need}"
        )
    share = len(ids) // workers
    return [ids[k * share : (k + 1) * share] for k in range(workers)]


def detect_kind() -> Literal["cuda", "cpu"]:
    """GPUs when torch sees any, else cores (torch imported here: the driver needs it only for this)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def worker_env(ids: list[int], kind: str) -> dict[str, str]:
    """What a worker process starts with beyond its parent's environment: one thread per core on a CPU. (Its GPUs
    it sets itself, `apply`, counting within the CUDA_VISIBLE_DEVICES it inherits.)"""
    return {} if kind == "cuda" else {"OMP_NUM_THREADS": str(len(ids))}


_INHERITED: dict[str, Any] = {}
"""What this process was allowed as it started: its CUDA_VISIBLE_DEVICES ("value") and cores ("cores")."""


def inherited_gpus() -> list[str] | None:
    """The GPUs this process was allowed before it confined itself: its CUDA_VISIBLE_DEVICES as it started (a
    scheduler's mask: indices, UUIDs or MIG names), None when unset (every GPU)."""
    if "value" not in _INHERITED:
        _INHERITED["value"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    value = _INHERITED["value"]
    return None if value is None else [d.strip() for d in value.split(",") if d.strip()]


def gpu_names(ids: list[int]) -> str:
    """CUDA_VISIBLE_DEVICES for `ids`, counted within the inherited mask: `--devices 0,1` under a scheduler's
    CUDA_VISIBLE_DEVICES=4,5,6,7 means GPUs 4 and 5."""
    visible = inherited_gpus()
    if visible is None:
        return ",".join(map(str, ids))
    beyond = [i for i in ids if i >= len(visible)]
    if beyond:
        raise ConfigError(
            f"--devices: {','.join(map(str, beyond))} beyond the {len(visible)} GPU(s) this process may use "
            f"(CUDA_VISIBLE_DEVICES={','.join(visible)}; --devices counts within it)"
        )
    return ",".join(visible[i] for i in ids)


def apply(ids: list[int]) -> dict[str, Any]:
    """Confine this worker process to `ids`, before any CUDA work; returns what it now sees (`attrs.DEVICES`).

    Where torch is built with CUDA, CUDA_VISIBLE_DEVICES is set first to the GPUs `ids` name within the inherited
    one (CUDA reads it once, when it starts); where torch then sees no GPU, the ids are cores and the process is
    pinned to them."""
    import torch

    if torch.version.cuda is not None and inherited_gpus() != []:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_names(ids)
    if detect_kind() == "cuda":
        return {"kind": "cuda", "devices": list(ids), "pid": os.getpid(), "visible": os.environ["CUDA_VISIBLE_DEVICES"]}
    return _cores(ids)


def describe(ids: list[int], kind: str) -> dict[str, Any]:
    """What `apply` would record for `ids`, without confining this process (another set's slots: the baseline's
    `--baseline-devices`)."""
    if kind == "cuda":
        return {"kind": "cuda", "devices": list(ids), "visible": gpu_names(ids)}
    _check_cores(ids)
    return {"kind": "cpu", "devices": list(ids)}


def _check_cores(ids: list[int]) -> None:
    """Each id a core this process was allowed before it pinned itself, or a one-line error."""
    if not hasattr(os, "sched_getaffinity"):
        return
    cores = _INHERITED.setdefault("cores", sorted(os.sched_getaffinity(0)))
    missing = [i for i in ids if i not in cores]
    if missing:
        raise ConfigError(
            f"--devices: core(s) {','.join(map(str, missing))} not available here (cores {_ranges(cores)})"
        )


def _cores(ids: list[int]) -> dict[str, Any]:
    if not hasattr(os, "sched_setaffinity"):  # macOS: no affinity API; the thread count still confines it
        return {"kind": "cpu", "devices": list(ids), "pid": os.getpid(), "affinity": None}
    _check_cores(ids)
    os.sched_setaffinity(0, ids)
    return {"kind": "cpu", "devices": list(ids), "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0))}


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}" if ids and ids == list(range(ids[0], ids[-1] + 1)) else ",".join(map(str, ids))
