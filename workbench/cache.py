"""The on-disk cache of things built once and shared by every trial: the embedded checkpoint, RLEP pools, the
decode step compiled ahead of time."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

from workbench.config import ModelConfig


def cache_root(model_cfg: ModelConfig | None = None) -> Path:
    """`model.cache_dir`, else `$WORKBENCH_CACHE`, else `~/.cache/replay-workbench`."""
    root = (
        (model_cfg.cache_dir if model_cfg is not None else None)
        or os.environ.get("WORKBENCH_CACHE")
        or Path.home() / ".cache" / "replay-workbench"
    )
    return Path(root).expanduser()


def build_once(final: Path, build: Callable[[Path], None], ready: Callable[[Path], bool] = Path.exists) -> Path:
    """`final`, built first if it is not `ready`: under an exclusive file lock (concurrent workers wait for the
    first builder), by `build(tmp)` writing a file or directory at a temporary sibling path, which then replaces
    `final` atomically, so nobody ever sees half a build."""
    if ready(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(final):
            return final
        tmp = final.parent / f".{final.name}.build-{os.getpid()}"
        if tmp.is_dir():
            shutil.rmtree(tmp)
        build(tmp)
        if final.is_dir():
            shutil.rmtree(final)
        os.replace(tmp, final)
        return final
