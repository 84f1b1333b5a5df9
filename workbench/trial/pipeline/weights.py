"""The trainer's weights, published to the generators through shared memory."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
import torch.multiprocessing  # noqa: F401  (shares tensors between processes: its picklers for them, registered)

from workbench.processes import SPAWN

CONTEXT = SPAWN
"""Every process of the pipeline is a spawn child (`workbench.processes.SPAWN`): no state forked from a parent that
runs threads."""
LOCK_POLL_S = 0.2
"""While waiting for the weights' lock, how often to look whether a peer died (a process killed while it holds the
lock never releases it)."""


class SharedWeights:
    """The trainer's parameters in shared-memory tensors with a version number (optimizer steps done), under a
    lock: the trainer copies its parameters in after each step, a generator copies them out when it is behind.
    On one machine a publish is a memory copy (a torch.distributed broadcast would carry it across machines)."""

    def __init__(self, model: torch.nn.Module):
        self.tensors = {n: p.detach().clone().share_memory_() for n, p in model.named_parameters()}
        self.version = CONTEXT.Value("q", 0, lock=False)
        self.lock = CONTEXT.Lock()

    @contextmanager
    def _held(self, check: Callable[[], None] | None):
        """The lock; while waiting for it, `check()` every `LOCK_POLL_S` (it raises when a peer has died: a generator
        SIGKILLed while pulling left the trainer waiting here forever)."""
        while not self.lock.acquire(timeout=LOCK_POLL_S):
            if check is not None:
                check()
        try:
            yield
        finally:
            self.lock.release()

    def publish(self, model: torch.nn.Module, version: int, check: Callable[[], None] | None = None) -> None:
        with self._held(check), torch.no_grad():
            for n, p in model.named_parameters():
                self.tensors[n].copy_(p)
            _finished(self.tensors.values())
            self.version.value = version

    def pull(self, model: torch.nn.Module, check: Callable[[], None] | None = None) -> int:
        """Copy the published weights into `model`; their version."""
        with self._held(check), torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(self.tensors[n])
            _finished(model.parameters())
            return int(self.version.value)

    def latest(self) -> int:
        return int(self.version.value)


def _finished(tensors) -> None:
    """Wait for the copies into or out of CUDA tensors to land before the lock is released: a CUDA `copy_` only
    queues the copy, and another process reading the shared tensors after the lock would see half of it."""
    devices = {t.device for t in tensors if t.is_cuda}
    for device in devices:
        torch.cuda.current_stream(device).synchronize()
