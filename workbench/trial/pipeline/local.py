"""The pipeline on one machine: rank 0 (the trial's process) spawns the generators and the other trainers, and
they share weights through shared memory and rollouts through bounded multiprocessing queues.

A wiring is what rank 0's loop (`driver`) talks to, here or across machines (`distributed.LaunchedWiring`): the
weights it publishes, its own inbox, the stop and pause flags, each generator's working flag, the generators and
other trainers (`check()` raises when one died, `pids`, `end()`), the trainers' process group, and `close()`.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from workbench.config import TrialConfig
from workbench.processes import SPAWN
from workbench.trial.pipeline.devices import place
from workbench.trial.pipeline.generator import Processes, generator_main
from workbench.trial.pipeline.trainer import collective_timeout, free_port, join_group, trainer_main
from workbench.trial.pipeline.weights import SharedWeights


class LocalWiring:
    """Every process of the trial on this machine, children of this one."""

    def __init__(self, cfg: TrialConfig, model: torch.nn.Module):
        self.cfg = cfg
        W, T = cfg.pipeline.generators, cfg.pipeline.trainers
        self.weights = SharedWeights(model)
        self.inboxes = [SPAWN.Queue(maxsize=cfg.pipeline.queue_chunks * W) for _ in range(T)]
        self.inbox = self.inboxes[0]
        self.stop, self.pause = SPAWN.Event(), SPAWN.Event()
        self.working = SPAWN.Array("b", W)  # per generator: 1 while it samples (run_generator)
        self.generators, self.trainers = Processes("generator"), Processes("trainer")
        self.group = None
        """The trainers' process group (the default one here), for T > 1."""
        self._grouped = False

    def start(self) -> None:
        """Spawn the W generators and T - 1 trainers; join the trainers' group (T > 1)."""
        cfg, W, T = self.cfg, self.cfg.pipeline.generators, self.cfg.pipeline.trainers
        for w in range(W):
            self.generators.start(
                generator_main,
                (cfg, w, self.weights, self.inboxes, self.stop, self.pause, self.working, os.getpid()),
                f"workbench-generator-{w}",
            )
        if T > 1:
            port = free_port()
            for rank in range(1, T):
                self.trainers.start(
                    trainer_main,
                    (cfg, rank, port, self.inboxes[rank], self.stop, os.getpid()),
                    f"workbench-trainer-{rank}",
                )
            join_group(0, T, port, collective_timeout(cfg), place(cfg, "trainer", 0).model.device)
            self._grouped = True

    def close(self) -> None:
        """Stop every child (then terminate, then kill) and free the queues and the group."""
        self.stop.set()
        self.pause.clear()
        self.generators.end(drain=self.inboxes)
        self.trainers.end(drain=self.inboxes)
        for q in self.inboxes:
            q.cancel_join_thread()
            q.close()
        if self._grouped:
            dist.destroy_process_group()
