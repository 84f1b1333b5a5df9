"""The trainer's weights, published to the generators through shared memory."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

CONTEXT = mp.get_context("spawn")
"""Every process of the pipeline is a spawn child: no state forked from a parent that runs threads."""


class SharedWeights:
    """The trainer's parameters in shared-memory tensors with a version number (optimizer steps done), under a
    lock: the trainer copies its parameters in after each step, a generator copies them out when it is behind.
    On one machine a publish is a memory copy (a torch.distributed broadcast would carry it across machines)."""

    def __init__(self, model: torch.nn.Module):
        self.tensors = {n: p.detach().clone().share_memory_() for n, p in model.named_parameters()}
        self.version = CONTEXT.Value("q", 0, lock=False)
        self.lock = CONTEXT.Lock()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        with self.lock, torch.no_grad():
            for n, p in model.named_parameters():
                self.tensors[n].copy_(p)
            self.version.value = version

    def pull(self, model: torch.nn.Module) -> int:
        """Copy the published weights into `model`; their version."""
        with self.lock, torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(self.tensors[n])
            return int(self.version.value)

    def latest(self) -> int:
        return int(self.version.value)
