"""The trainers: each holds a shard of the rollouts (its inbox and its strategy's buffer) and draws its share of
the batch from it; with T > 1 they train as data parallel replicas, their gradients averaged by torch.distributed
(gloo on CPU) before every optimizer step, and they step in lockstep with the first trainer (rank 0, the trial's
own process), which alone publishes weights, evaluates and logs. The paper shards the buffer the same way: each
trainer keeps N/T and samples only its own shard (App. D.4)."""

from __future__ import annotations

import collections
import os
import queue as queue_errors
import signal
import socket
import threading
import time
from contextlib import nullcontext
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _set_pg_timeout  # noqa: PLC2701 - no public setter after init

from workbench import interrupts, seeds
from workbench.config import TrialConfig
from workbench.trial.pipeline.devices import place
from workbench.trial.pipeline.generator import POLL_S, Chunk, PipelineError, from_wire, process_threads
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout, batch_stats, mark_trained, untrained
from workbench.trial.source import Replica
from workbench.trial.step import train_step
from workbench.trial.tasks import load_task

LAG_BINS = 64
"""Histogram bins of policy lag (versions) summed across trainers each step; the last bin holds the rest."""
SCALARS = [
    "fresh",
    "reward_sum",
    "entropy_sum",
    "gen_tokens",
    "prefill_tokens",
    "lag_push_sum",
    "wait_s",
    "busy_s",
    "sync_s",
    "blocked_s",
    "paused_s",
    "slowdown_s",
    "chunks",
    "train_tokens",
    "trained_once",
    "held_untrained",
]
"""What each trainer reports of its step (summed across trainers)."""
COLLECTIVE_TIMEOUT = timedelta(minutes=10)
"""A trainer waiting in a collective longer than this gives up, where `pipeline.stall_timeout_s` is not set (a rank 0
evaluation, during which the others wait, takes seconds)."""


def collective_timeout(cfg: TrialConfig) -> timedelta:
    """How long a trainer waits in a collective for the others: `pipeline.stall_timeout_s` (a trainer that makes no
    progress that long is hung, as a generator that delivers nothing is), at least `COLLECTIVE_TIMEOUT` when unset."""
    s = cfg.pipeline.stall_timeout_s
    return COLLECTIVE_TIMEOUT if s is None else timedelta(seconds=s)


def shard_config(cfg: TrialConfig) -> TrialConfig:
    """One trainer's share of the batch and the buffer: B/T rollouts per step from N/T (at least B/T)."""
    T = cfg.pipeline.trainers
    if T == 1:
        return cfg
    shard = cfg.model_copy(deep=True)
    shard.batch_size = cfg.batch_size // T
    shard.replay.capacity = max(shard.batch_size, cfg.replay.capacity // T)
    return shard


class StepReport:
    """One trainer's account of one step, as a vector that sums across trainers (`dist.all_reduce`)."""

    def __init__(self):
        self.values = dict.fromkeys(SCALARS, 0.0)
        self.lag_push = np.zeros(LAG_BINS)
        self.age = np.zeros(LAG_BINS)

    def add_chunk(self, c: Chunk, rollouts: list[Rollout]) -> None:
        v = self.values
        v["fresh"] += len(rollouts)
        v["reward_sum"] += sum(r.reward for r in rollouts)
        v["entropy_sum"] += c.entropy_sum
        v["gen_tokens"] += c.generated_tokens
        v["prefill_tokens"] += c.prefill_tokens
        v["lag_push_sum"] += (c.published - c.version) * len(rollouts)
        for k in ("busy_s", "sync_s", "blocked_s", "paused_s", "slowdown_s"):
            v[k] += getattr(c, k)
        v["chunks"] += 1 if c.busy_s > 0 else 0
        self.lag_push[min(c.published - c.version, LAG_BINS - 1)] += len(rollouts)

    def add_batch(self, batch: list[Rollout], step: int, trained_once: int, held: list[Rollout]) -> None:
        """A trained batch (`trained_once` of its rollouts for the first time) and what its strategy holds after it."""
        self.values["train_tokens"] += sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
        self.values["trained_once"] += trained_once
        self.values["held_untrained"] = untrained(held)
        for a in batch_stats(batch, step).ages:
            self.age[min(a, LAG_BINS - 1)] += 1

    def summed(self, world: int, group=None) -> "StepReport":
        """This report summed over the `world` trainers (every trainer calls it at the same step; `group`: their
        process group, None for the default one). On the CPU: the counts are host numbers whatever the backend."""
        if world == 1:
            return self
        flat = torch.tensor(
            [*self.values.values(), *self.lag_push, *self.age], dtype=torch.float64, device=_device(group)
        )
        dist.all_reduce(flat, group=group)
        flat = flat.cpu()
        out = StepReport()
        out.values = dict(zip(SCALARS, flat[: len(SCALARS)].tolist()))
        out.lag_push = flat[len(SCALARS) : len(SCALARS) + LAG_BINS].numpy()
        out.age = flat[len(SCALARS) + LAG_BINS :].numpy()
        return out


class Shard:
    """One trainer's inbox and the strategy holding its rollouts: `next_batch` takes what arrived (as far as the
    strategy has room), draws, and waits for more while it cannot.

    A strategy that takes any number of rollouts (a buffer: `room()` is None) has its inbox emptied by a thread as
    chunks arrive, also while the trainer trains, so its generators never wait on the bounded transfer queue: the
    paper's workers append to the buffer directly. A strategy with a bounded room (the queue) leaves chunks in the
    transfer queue, so its generators wait when it is full, as the paper's do on a full LIFO queue."""

    def __init__(self, inbox, strategy, rng: np.random.Generator, check, on_arrival=None):
        self.inbox, self.strategy, self.rng, self.check = inbox, strategy, rng, check
        self.on_arrival = on_arrival
        """Called with each chunk and its rollouts as they arrive (rank 0's running account)."""
        self.early: list[Chunk] = []
        """Chunks taken before the first batch (`first_chunk`), received with it."""
        self.drained: collections.deque = collections.deque()
        """Messages the draining thread took from the inbox, oldest first (buffer strategies)."""
        self.arrived = threading.Condition()
        self.draining: threading.Thread | None = None
        self.closing = threading.Event()

    def close(self) -> None:
        """Stop the draining thread (it exits within `POLL_S`): a thread left in `get` at the interpreter's exit aborts
        the process."""
        if self.draining is not None:
            self.closing.set()
            self.draining.join()
            self.draining = None

    def _drain(self) -> None:
        while not self.closing.is_set():
            try:
                msg = self.inbox.get(timeout=POLL_S)
            except queue_errors.Empty:
                continue
            except (OSError, EOFError, ValueError):  # the queue closed: the trial is over
                return
            except PipelineError as e:  # a launched pipeline's store is gone: the trial's loop says so
                msg = ("broken", str(e))
                self.closing.set()
            with self.arrived:
                self.drained.append(msg)
                self.arrived.notify()

    def _start_draining(self) -> None:
        if self.draining is None and self.strategy.room() is None:
            self.draining = threading.Thread(target=self._drain, name="workbench-inbox", daemon=True)
            self.draining.start()

    def first_chunk(self) -> None:
        """Wait for the first chunk (the generators' start-up: a process, its imports, the model), keeping it for the
        first batch, so that the pipeline's clock can start when there is something to train on."""
        while not self.early:
            self.check()
            chunk = self._get(POLL_S)
            if chunk is not None:
                self.early.append(chunk)

    def _get(self, timeout: float | None):
        if self.draining is not None:
            with self.arrived:
                if not self.drained and timeout is not None:
                    self.arrived.wait(timeout)
                msg = self.drained.popleft() if self.drained else None
            if msg is None:
                return None
        else:
            try:
                msg = self.inbox.get(timeout=timeout) if timeout is not None else self.inbox.get_nowait()
            except queue_errors.Empty:
                return None
        if msg[0] == "error":
            raise PipelineError(f"pipeline: {msg[1]} failed: {msg[2]}")
        if msg[0] == "broken":
            raise PipelineError(msg[1])
        return msg[1]

    def next_batch(self, step: int, report: StepReport, timed) -> tuple[list[Rollout], list[Rollout]]:
        """(the batch, the rollouts that arrived for it); `timed` wraps the strategy's draw (training compute)."""
        fresh: list[Rollout] = []
        pending: list[Rollout] = []

        def receive(chunk: Chunk) -> None:
            rollouts = [from_wire(d, chunk.published) for d in chunk.rollouts]
            report.add_chunk(chunk, rollouts)
            if self.on_arrival:
                self.on_arrival(chunk, rollouts)
            pending.extend(rollouts)

        for chunk in self.early:
            receive(chunk)
        self.early = []
        self._start_draining()
        while True:
            self.check()
            room = self.strategy.room()
            while room is None or room - len(pending) > 0:  # take what arrived, as far as there is room
                chunk = self._get(None)
                if chunk is None:
                    break
                receive(chunk)
            with timed():
                batch = self.strategy.stream_batch(pending, step, self.rng)
            fresh, pending = fresh + pending, []
            if batch is not None:
                return batch, fresh
            t0 = time.perf_counter()  # starved: wait for the generators
            chunk = self._get(POLL_S)
            report.values["wait_s"] += time.perf_counter() - t0
            if chunk is not None:
                receive(chunk)


def _device(group) -> torch.device:
    """Where a collective's small host tensors go for `group`'s backend: NCCL takes only CUDA tensors."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def average_gradients(world: int, group=None):
    """A `train_step` gate that averages the gradients over the `world` trainers in `group` (and never drops the
    step)."""

    def gate(model, step: int) -> bool:
        params = list(model.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=group)
        flat /= world
        for g, avg in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            g.copy_(avg)
        return False

    return gate


def go(flag: bool | None, world: int, group=None) -> bool:
    """Rank 0's decision to take another step (`flag`), as every trainer learns it."""
    if world == 1:
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_device(group))
    dist.broadcast(t, 0, group=group)
    return bool(t.item())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RENDEZVOUS_TIMEOUT = timedelta(minutes=10)
"""How long the trainers get to find each other (a spawned trainer imports torch and builds its model first)."""


def group_backend(device: str) -> str:
    """The trainers' backend: NCCL where each trainer has a GPU of its own (placed on `cuda:r`, `devices.place`),
    else gloo (a CPU, or trainers sharing one GPU, which NCCL refuses)."""
    return "nccl" if device.startswith("cuda") and dist.is_nccl_available() else "gloo"


def join_group(rank: int, world: int, port: int, timeout: timedelta = COLLECTIVE_TIMEOUT, device: str = "auto") -> None:
    """Join the trainers' group on 127.0.0.1 (NCCL or gloo by `device`, this trainer's: `group_backend`); its
    collectives then time out after `timeout` (the rendezvous itself gets `RENDEZVOUS_TIMEOUT`: torch takes one
    timeout for both at init). Under NCCL a collective that times out aborts the process (NCCL's watchdog)."""
    backend = group_backend(device)
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=max(timeout, RENDEZVOUS_TIMEOUT),
    )
    if timeout < RENDEZVOUS_TIMEOUT:
        _set_pg_timeout(timeout)


ORPHAN_GRACE_S = 1.0
"""How long a failing trainer waits to see whether its failure is rank 0's death (its sockets close a moment before
the kernel reparents this process and sends the parent-death signal)."""


def _unless_orphaned(alive) -> None:
    """Return if rank 0 is alive (`alive()`) after `ORPHAN_GRACE_S`, so the failure is raised as this trainer's;
    else exit without a word: the trial's death is said once, by its run's helper, not by every child's traceback
    of a closed connection."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not alive():
        os._exit(1)


def trainer_main(cfg: TrialConfig, rank: int, port: int, inbox, stop, parent: int) -> None:
    """Trainer `rank` >= 1 spawned by the trial (`run_trainer`): it ignores Ctrl-C (rank 0 ends it), dies with its
    parent, and joins the trainers' group on 127.0.0.1."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: rank 0 ends us
    interrupts.die_with_parent(signal.SIGKILL)  # a SIGKILLed trial leaves no orphan (its run's helper says so)
    torch.set_num_threads(process_threads(cfg))
    cfg = place(cfg, "trainer", rank)
    join_group(rank, cfg.pipeline.trainers, port, collective_timeout(cfg), cfg.model.device)
    try:
        run_trainer(cfg, rank, inbox, stop, lambda: os.getppid() == parent)
    finally:
        dist.destroy_process_group()


def run_trainer(cfg: TrialConfig, rank: int, inbox, stop, alive, group=None) -> None:
    """Trainer `rank` >= 1 (`cfg` already placed): its own replica and shard, stepping with rank 0 in `group` until
    rank 0 says stop, `stop` is set or rank 0 is gone (`alive()` false)."""
    world = cfg.pipeline.trainers
    torch.set_num_threads(process_threads(cfg))
    shard: Shard | None = None
    try:
        task = load_task(cfg.task)
        policy = Policy(cfg, task)
        shard_cfg = shard_config(cfg)
        replica = Replica.around(policy, task, cfg, shard_cfg)
        optimizer, lr_schedule, strategy = replica.optimizer, replica.lr_schedule, replica.strategy

        def check() -> None:
            if stop.is_set() or not alive():
                raise SystemExit(0)

        shard = Shard(inbox, strategy, np.random.default_rng(seeds.replay_draws(cfg.seed, rank)), check)
        gate = average_gradients(world, group)
        step = 0
        while go(None, world, group):
            report = StepReport()
            batch, _ = shard.next_batch(step, report, nullcontext)
            train_step(policy, optimizer, batch, shard_cfg, step, gate)
            lr_schedule.step()
            report.add_batch(batch, step, mark_trained(batch), strategy.held())
            report.summed(world, group)
            step += 1
    except Exception:  # not SystemExit: a trainer told to stop exits at once
        _unless_orphaned(alive)
        raise
    finally:
        if shard is not None:
            shard.close()
        inbox.cancel_join_thread()
