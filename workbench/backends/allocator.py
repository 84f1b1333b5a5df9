"""The process's C allocator, tuned for a CPU trainer: freed activation memory is kept for the next step.

A training step on the CPU allocates and frees tensors of 0.5-10 MB by the hundred (activations, their gradients,
attention's scattered blocks). glibc serves blocks above its mmap threshold with fresh `mmap`s and returns freed
memory at the heap's top to the OS beyond its trim threshold, so every step pays the page faults of memory it had
a moment ago. `keep_freed_memory` raises both thresholds (and pads the heap's growth) with `mallopt`, as the
PyTorch CPU tuning guides do with jemalloc or tcmalloc, without a preloaded library: measured on the default trial
(`benchmarks/allocator.py`), a training step 1.13x faster and peak memory unchanged (docs/performance.md).

Values are untouched (where memory lives never changes what is computed). It applies to glibc's `malloc` only (any
Linux the project runs on); elsewhere, or when the user set glibc's own `MALLOC_*` variables, or with
`WORKBENCH_MALLOC=default`, the allocator is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h>
KEEP_BYTES = 64 << 20
"""Blocks below this come from the heap (not `mmap`), and this much freed memory is kept at the heap's top."""

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; whether they are raised."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get("WORKBENCH_MALLOC", "").lower() == "default":
        return False
    if any(key.startswith("MALLOC_") and key.endswith("_") for key in os.environ) or "glibc.malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False  # the user tuned glibc's allocator already
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (macOS, musl without mallopt)
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = all(
        mallopt(option, value) == 1
        for option, value in (
            (M_MMAP_THRESHOLD, KEEP_BYTES),
            (M_TRIM_THRESHOLD, 4 * KEEP_BYTES),
            (M_TOP_PAD, KEEP_BYTES),
        )
    )
    log.debug(
        f"allocator: glibc mmap threshold {KEEP_BYTES >> 20} MB, trim threshold {4 * KEEP_BYTES >> 20} MB: {done}"
    )
    return done
