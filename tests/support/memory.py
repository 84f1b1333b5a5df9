"""The peak of live tensor memory while code runs, counted from the tensors themselves.

`LiveTensorBytes` is a dispatch mode: every tensor an operator returns is counted once per storage (views and
in-place results share it) until its storage is freed. Unlike a process's resident high-water mark, the count
does not depend on the C allocator's caching (glibc kept or returned freed blocks from run to run, so RSS peaks
of the same call differed by 2x); unlike `torch.cuda.max_memory_allocated`, it works on a CPU. It sees what
operators allocate and return; a fused kernel's internal scratch is not counted."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._sizes: dict[int, int] = {}

    def _freed(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self._sizes and key not in given:  # a view or in-place result is no allocation
                    self._sizes[key] = storage.nbytes()
                    self.live += storage.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._freed, key)
        return out
