"""The asynchronous pipeline across machines: its processes started by torchrun, wired by torch.distributed.

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr HOST --master-port 29500 \\
        -m workbench.cli train --config trial.yaml      # the same with --node-rank 1 on the other machine

Every rank runs the same command; the launch's world must be W + T (`pipeline.generators` + `pipeline.trainers`).
Ranks 0..T-1 are the trainers (rank 0 is the trial: it opens the MLflow run, evaluates, publishes the weights),
ranks T..T+W-1 the generators. What travels, and how:

- gradients: the trainers' process group (`pipeline.trainers` > 1);
- weights: a generator that is behind asks through the store, and rank 0 sends it the flattened parameters and
  their version point to point on the weights group (rank 0 and the generators);
- both groups are NCCL where every process has a GPU of its own (placed by LOCAL_RANK), else gloo;
- rollouts: through the launcher's TCPStore, one numbered key per chunk and trainer, as bytes (a JSON header and
  the raw log-prob arrays: nothing is unpickled), at most `pipeline.queue_chunks` x W untaken per trainer, as the
  local transfer queue bounds them;
- flags (stop, pause, each generator's working flag), the weights' version, heartbeats, errors: store keys.

Faults: every process beats in the store every `BEAT_S`. Rank 0 ends the trial with one line naming a peer that
reports an error or whose heartbeat stops for `PEER_TIMEOUT_S` (a process, its machine or the network gone), and
the others exit when rank 0's heartbeat stops or the store is gone. torchrun's agent ends the other processes of a
machine on which one fails.
"""

from __future__ import annotations

import json
import logging
import os
import queue as queue_errors
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, fields
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from workbench import faults
from workbench import interrupts
from workbench.config import ConfigError, TrialConfig
from workbench.trial.pipeline.devices import place
from workbench.trial.pipeline.generator import POLL_S, Chunk, PipelineError, run_generator
from workbench.trial.pipeline.trainer import RENDEZVOUS_TIMEOUT, collective_timeout, run_trainer

log = logging.getLogger(__name__)

BEAT_S = 0.5
"""How often every process of a launched pipeline says it is alive (a store counter)."""
PEER_TIMEOUT_S = 10.0
"""A process whose heartbeat stops this long is gone (killed, its machine down, the network cut)."""
STORE_POLL_S = 0.005
"""How often a process waiting on a store key looks again."""
JOIN_S = 5.0
"""How long rank 0 waits, at the end, for every other process to say it has exited."""
MAGIC = b"WBC1"
"""The first bytes of a chunk on the wire (a JSON header, then the arrays it lists)."""


@dataclass(frozen=True)
class Launch:
    """Where this process sits in a torchrun launch (its environment)."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    host: str
    port: int
    agent_store: bool
    """torchrun's agent hosts the TCPStore (every rank is its client), else rank 0 hosts it."""


def launched() -> Launch | None:
    """This process's place in a torchrun launch of two or more processes, or None (the pipeline on one machine:
    rank 0 spawns the rest)."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" not in env or int(env.get("WORLD_SIZE", "1")) < 2:
        return None
    return Launch(
        int(env["RANK"]),
        int(env["WORLD_SIZE"]),
        int(env.get("LOCAL_RANK", "0")),
        int(env.get("LOCAL_WORLD_SIZE", "1")),
        env["MASTER_ADDR"],
        int(env["MASTER_PORT"]),
        env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
    )


def check_launch(cfg: TrialConfig, launch: Launch) -> None:
    """A launch that fits the trial: an asynchronous one with W + T processes, else one line (`ConfigError`)."""
    W, T = cfg.pipeline.generators, cfg.pipeline.trainers
    if cfg.pipeline.mode != "async":
        raise ConfigError(
            f"torchrun launched {launch.world} processes for one trial: set pipeline.mode: async (a"
            " synchronous trial is one process)"
        )
    if launch.world != W + T:
        raise ConfigError(
            f"pipeline: torchrun launched {launch.world} processes, but pipeline.generators +"
            f" pipeline.trainers = {W + T} (one process each)"
        )


def role(cfg: TrialConfig, rank: int) -> tuple[str, int]:
    """("trainer", r) for ranks below T, ("generator", w) for rank T + w."""
    T = cfg.pipeline.trainers
    return ("trainer", rank) if rank < T else ("generator", rank - T)


class Fabric:
    """This process's connections in a launched pipeline: the store (keys under `workbench/`), the default gloo
    group, the trainers' and the weights' groups, its heartbeat, its placed config."""

    def __init__(self, launch: Launch, cfg: TrialConfig):
        W, T = cfg.pipeline.generators, cfg.pipeline.trainers
        check_launch(cfg, launch)
        self.launch, self.W, self.T = launch, W, T
        interrupts.die_with_parent(signal.SIGKILL)  # a launcher killed (its machine lost) takes its processes along
        self.rank = launch.rank
        self.role, self.index = role(cfg, launch.rank)
        self.cfg = place(cfg, self.role, self.index, (launch.local_rank, launch.local_world))
        self.store = self._client()
        dist.init_process_group(
            "gloo",
            store=dist.PrefixStore("pg/", self._base),
            rank=launch.rank,
            world_size=launch.world,
            timeout=max(collective_timeout(cfg), RENDEZVOUS_TIMEOUT),
        )
        self.backend = self._agree_backend()
        if self.backend == "nccl":
            torch.cuda.set_device(torch.device(self.cfg.model.device))
        # every rank creates every group, in the same order (torch.distributed's rule)
        self.trainers_group = (
            dist.new_group(list(range(T)), backend=self.backend, timeout=collective_timeout(cfg)) if T > 1 else None
        )
        self.weights_group = dist.new_group([0, *range(T, T + W)], backend=self.backend)
        self.store.set(f"pid/{self.rank}", f"{os.getpid()}@{socket.gethostname()}")
        self.store.set(
            f"who/{self.rank}",
            f"{self.role} {self.index} (rank {self.rank}, pid {os.getpid()} on {socket.gethostname()})",
        )
        self._beats = _Beats(self.store)
        self._beating = threading.Event()
        self._beat_thread = threading.Thread(target=self._beat, name="workbench-heartbeat", daemon=True)
        self._beat_thread.start()

    def _client(self) -> "GuardedStore":
        """A connection to the launch's store (torchrun's agent hosts it, or rank 0 does), keys under `workbench/`."""
        launch = self.launch
        self._base = dist.TCPStore(
            launch.host,
            launch.port,
            None,
            is_master=not launch.agent_store and launch.rank == 0,
            timeout=RENDEZVOUS_TIMEOUT,
            wait_for_workers=False,
        )
        return GuardedStore(dist.PrefixStore("workbench/", self._base), f"{launch.host}:{launch.port}")

    def _agree_backend(self) -> str:
        """NCCL if every process has a GPU of its own (NCCL refuses two ranks on one device), else gloo."""
        device = self.cfg.model.device
        own = (
            device.startswith("cuda")
            and torch.device(device).index is not None
            and dist.is_nccl_available()
            and torch.cuda.device_count() >= self.launch.local_world
        )  # placed on cuda:LOCAL_RANK (`place`)
        flag = torch.tensor([1 if own else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return "nccl" if flag.item() else "gloo"

    def _beat(self) -> None:
        launch = self.launch
        store = dist.PrefixStore(
            "workbench/",
            dist.TCPStore(
                launch.host,
                launch.port,
                None,
                is_master=False,
                timeout=timedelta(seconds=PEER_TIMEOUT_S),
                wait_for_workers=False,
            ),
        )
        while not self._beating.is_set():
            try:
                store.add(f"beat/{self.rank}", 1)
            except Exception:  # noqa: BLE001 - the store is gone: the others notice this process's silence
                return
            self._beating.wait(BEAT_S)

    def who(self, rank: int, key: str = "who") -> str:
        """How rank `rank` names itself (`who`: its role, rank, pid and host; `pid`: pid@host)."""
        try:
            return self.store.get(f"{key}/{rank}").decode() if self.store.check([f"{key}/{rank}"]) else f"rank {rank}"
        except Exception:  # noqa: BLE001 - the store is gone
            return f"rank {rank}"

    def silent_for(self, rank: int) -> float:
        """Seconds since `rank`'s heartbeat last moved (as this process saw it)."""
        return self._beats.silent_for(rank)

    def rank0_alive(self) -> bool:
        """Rank 0 beats and the store answers: what a generator or another trainer goes on for."""
        try:
            return self.silent_for(0) < PEER_TIMEOUT_S
        except Exception:  # noqa: BLE001 - the store is gone with rank 0's machine
            return False

    def rank0_moving(self, within: float = 4 * BEAT_S) -> bool:
        """Whether rank 0's heartbeat moves within `within` seconds: asked after a failure, which may be rank 0's
        death (its connections close at once; its heartbeat's silence takes `PEER_TIMEOUT_S` to be sure of)."""
        try:
            first, deadline = self.store.add("beat/0", 0), time.monotonic() + within
            while time.monotonic() < deadline:
                time.sleep(0.05)
                if self.store.add("beat/0", 0) != first:
                    return True
        except Exception:  # noqa: BLE001 - the store is gone with rank 0's machine
            pass
        return False

    def flag(self, name: str) -> "StoreFlag":
        return StoreFlag(self.store, name)

    def exited(self, error: str | None = None) -> None:
        """Say this process is done (with its error's one line), stop beating."""
        try:
            if error is not None:
                self.store.set(f"error/{self.rank}", error)
            self.store.set(f"exited/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - rank 0's store is gone: nobody is left to tell
            pass
        self._beating.set()

    def close(self) -> None:
        self._beating.set()
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a peer already gone
            pass


class GuardedStore:
    """The launch's store, whose failures (the agent hosting it exited, its machine or the network gone) are one
    `PipelineError` line naming it, not the store client's C++ trace."""

    def __init__(self, store: dist.Store, address: str):
        self._store, self.address = store, address

    def __getattr__(self, name: str):
        method = getattr(self._store, name)

        def guarded(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except dist.DistError as e:
                first = faults.one_line(e, None)
                raise PipelineError(
                    f"pipeline: the launch's store at {self.address} is gone ({first}): its launcher"
                    " (torchrun on the first machine) exited, or the network is cut"
                ) from None

        return guarded


class _Beats:
    """Each rank's heartbeat counter and when this process last saw it move (its own clock: clocks of different
    machines are never compared). The store is read at most every `BEAT_S` / 2 per rank."""

    def __init__(self, store):
        self.store = store
        self.seen: dict[int, list] = {}
        """rank -> [its count, when it last moved, when it was last read]."""
        self.lock = threading.Lock()

    def silent_for(self, rank: int) -> float:
        now = time.monotonic()
        with self.lock:
            entry = self.seen.get(rank)
            if entry is not None and now - entry[2] < BEAT_S / 2:
                return now - entry[1]
            count = self.store.add(f"beat/{rank}", 0)
            if entry is None or count != entry[0]:
                self.seen[rank] = [count, now, now]
                return 0.0
            entry[2] = now
            return now - entry[1]


class StoreFlag:
    """A flag every process sees (`threading.Event`'s methods): a store key that exists while it is set."""

    def __init__(self, store, name: str):
        self.store, self.key = store, f"flag/{name}"

    def is_set(self) -> bool:
        return self.store.check([self.key])

    def set(self) -> None:
        self.store.set(self.key, "1")

    def clear(self) -> None:
        self.store.delete_key(self.key)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.01))
        return True


class StoreFlags:
    """The generators' working flags (`multiprocessing.Array`'s indexing): one store key each."""

    def __init__(self, store, count: int):
        self.store, self.keys = store, [f"working/{w}" for w in range(count)]

    def __setitem__(self, w: int, value: int) -> None:
        self.store.set(self.keys[w], str(int(value)))

    def __getitem__(self, index: slice) -> list[int]:
        return [int(self.store.get(k)) if self.store.check([k]) else 0 for k in self.keys[index]]


def encode(message: tuple) -> bytes:
    """A transfer-queue message on the wire: ("chunk", Chunk) or ("error", who, text), as `MAGIC`, the JSON header's
    length (8 bytes), the header, then the raw arrays it lists (dtype and length each)."""
    arrays: list[np.ndarray] = []
    if message[0] == "error":
        header = {"kind": "error", "who": message[1], "text": message[2]}
    else:
        chunk: Chunk = message[1]
        rollouts = []
        for d in chunk.rollouts:
            r = dict(d)
            for key in ("behaviour_logprobs", "trainer_logprobs"):
                a = r.pop(key, None)
                if a is None:
                    r[key] = None
                else:
                    a = np.ascontiguousarray(a)
                    r[key] = [a.dtype.str, int(a.size)]
                    arrays.append(a.reshape(-1))
            rollouts.append(r)
        header = {
            "kind": "chunk",
            **{f.name: getattr(chunk, f.name) for f in fields(Chunk) if f.name != "rollouts"},
            "rollouts": rollouts,
        }
    head = json.dumps(header, default=_plain).encode()
    return MAGIC + len(head).to_bytes(8, "little") + head + b"".join(a.tobytes() for a in arrays)


def _plain(value):
    """numpy and torch scalars and arrays as JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not on the wire: {type(value).__name__}")


def decode(data: bytes) -> tuple:
    """`encode`'s message back (a malformed one raises `PipelineError`: the store holds only this pipeline's keys)."""
    if data[:4] != MAGIC:
        raise PipelineError("pipeline: a transfer-queue message that is not a chunk (another program's store key?)")
    size = int.from_bytes(data[4:12], "little")
    header = json.loads(data[12 : 12 + size])
    if header["kind"] == "error":
        return ("error", header["who"], header["text"])
    offset = 12 + size
    rollouts = []
    for r in header.pop("rollouts"):
        for key in ("behaviour_logprobs", "trainer_logprobs"):
            if r[key] is not None:
                dtype, n = np.dtype(r[key][0]), r[key][1]
                r[key] = np.frombuffer(data, dtype=dtype, count=n, offset=offset).copy()
                offset += n * dtype.itemsize
        rollouts.append(r)
    header.pop("kind")
    return ("chunk", Chunk(rollouts=rollouts, **header))


class StoreOutbox:
    """A generator's end of one trainer's transfer queue (`multiprocessing.Queue.put`'s contract): a chunk waits,
    up to `timeout`, while `capacity` chunks are untaken (then `queue.Full`); an error message never waits."""

    def __init__(self, store, trainer: int, capacity: int):
        self.store, self.capacity = store, capacity
        self.sent, self.taken, self.key = f"sent/{trainer}", f"taken/{trainer}", f"chunk/{trainer}"
        self.error: str | None = None
        """The error this generator reported, if any (its one line)."""

    def put(self, message: tuple, timeout: float) -> None:
        if message[0] == "chunk":
            deadline = time.monotonic() + timeout
            while self.store.add(self.sent, 0) - self.store.add(self.taken, 0) >= self.capacity:
                if time.monotonic() >= deadline:
                    raise queue_errors.Full
                time.sleep(STORE_POLL_S)
        else:
            self.error = message[2]
        n = self.store.add(self.sent, 1)
        self.store.set(f"{self.key}/{n}", encode(message))

    def cancel_join_thread(self) -> None:
        """Nothing to flush: a put has reached the store when it returns."""


class StoreInbox:
    """A trainer's end of its transfer queue (`multiprocessing.Queue.get`'s contract): the chunks in the order
    their numbers were taken, each deleted from the store and counted as taken when it is read."""

    def __init__(self, store, trainer: int):
        self.store, self.taken, self.key = store, f"taken/{trainer}", f"chunk/{trainer}"
        self.next = 1

    def get(self, timeout: float | None = None) -> tuple:
        key = f"{self.key}/{self.next}"
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.store.check([key]):
            if deadline is not None and time.monotonic() >= deadline:
                raise queue_errors.Empty
            time.sleep(STORE_POLL_S)
        data = self.store.get(key)
        self.store.delete_key(key)
        self.store.add(self.taken, 1)
        self.next += 1
        return decode(data)

    def get_nowait(self) -> tuple:
        return self.get(timeout=0.0)

    def cancel_join_thread(self) -> None:
        """Nothing buffered in this process."""

    def close(self) -> None:
        """The store outlives the trainer."""


class DistWeights:
    """The weights across processes (`SharedWeights`' methods): rank 0 keeps the latest published parameters as one
    flat tensor and sends it, with its version, to each generator that asks (a thread serving the requests the
    generators number in the store); a generator receives it into its model. On the weights group's device: the
    GPU under NCCL, host memory under gloo."""

    def __init__(self, fabric: Fabric, model: torch.nn.Module | None = None):
        self.fabric, self.store = fabric, fabric.store
        self.flat: torch.Tensor | None = None
        self.lock = threading.Lock()
        self.version = 0
        self._closing = threading.Event()
        self._server: threading.Thread | None = None
        if model is not None:  # rank 0: publish version 0, then serve
            self.publish(model, 0)
            self._server = threading.Thread(target=self._serve, name="workbench-weights", daemon=True)
            self._server.start()

    def _buffer(self, params: list[torch.Tensor]) -> torch.Tensor:
        if self.flat is None:
            dtypes = {p.dtype for p in params}
            if len(dtypes) != 1:
                raise PipelineError(
                    f"pipeline: parameters of several dtypes ({sorted(map(str, dtypes))}) cannot travel as one tensor"
                )
            device = params[0].device if self.fabric.backend == "nccl" else torch.device("cpu")
            self.flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype, device=device)
        return self.flat

    def publish(self, model: torch.nn.Module, version: int, check=None) -> None:
        params = list(model.parameters())
        with self.lock, torch.no_grad():
            flat, offset = self._buffer(params), 0
            for p in params:
                flat[offset : offset + p.numel()].copy_(p.reshape(-1))
                offset += p.numel()
            if flat.is_cuda:
                torch.cuda.current_stream(flat.device).synchronize()
            self.version = version
        self.store.set("version", str(version))

    def latest(self) -> int:
        return int(self.store.get("version"))

    def pull(self, model: torch.nn.Module, check=None) -> int:
        """Ask rank 0 for the published weights, receive them into `model`; their version."""
        params = list(model.parameters())
        flat = self._buffer(params)
        version = torch.zeros(1, dtype=torch.int64, device=flat.device)
        n = self.store.add("want", 1)
        self.store.set(f"want/{n}", str(self.fabric.rank))
        dist.recv(version, src=0, group=self.fabric.weights_group)
        dist.recv(flat, src=0, group=self.fabric.weights_group)
        with torch.no_grad():
            offset = 0
            for p in params:
                p.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        return int(version.item())

    def _serve(self) -> None:
        n = 1
        while not self._closing.is_set():
            key = f"want/{n}"
            try:
                if not self.store.check([key]):
                    time.sleep(STORE_POLL_S)
                    continue
                rank = int(self.store.get(key))
                self.store.delete_key(key)
                with self.lock:
                    version = torch.tensor([self.version], dtype=torch.int64, device=self.flat.device)
                    dist.send(version, dst=rank, group=self.fabric.weights_group)
                    dist.send(self.flat, dst=rank, group=self.fabric.weights_group)
            except Exception as e:  # noqa: BLE001 - a generator gone mid-send: rank 0's peer check names it
                if not self._closing.is_set():
                    log.debug(f"pipeline: serving weights: {e}")
                    time.sleep(POLL_S)
                continue
            n += 1

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.join(timeout=JOIN_S)


class Peers:
    """The other processes of one kind in a launched pipeline, as rank 0 sees them (`Processes`' methods): one that
    reports an error or whose heartbeat stops for `PEER_TIMEOUT_S` ends the trial."""

    def __init__(self, fabric: Fabric, kind: str, ranks: list[int]):
        self.fabric, self.kind, self.ranks = fabric, kind, ranks
        self.stopping = False

    @property
    def pids(self) -> list[str]:
        return [self.fabric.who(r, "pid") for r in self.ranks]

    def check(self) -> None:
        store = self.fabric.store
        for r in self.ranks:
            if store.check([f"error/{r}"]):
                raise PipelineError(f"pipeline: {self.fabric.who(r)} failed: {store.get(f'error/{r}').decode()}")
            if not self.stopping and store.check([f"exited/{r}"]):
                raise PipelineError(f"pipeline: {self.fabric.who(r)} exited before the trial ended")
            silent = self.fabric.silent_for(r)
            if silent >= PEER_TIMEOUT_S:
                raise PipelineError(
                    f"pipeline: {self.fabric.who(r)} has not answered for {silent:.0f} s (killed, or its"
                    " machine or the network is gone)"
                )

    def end(self, drain=()) -> None:
        """Wait up to `JOIN_S` for each to say it exited (the stop flag is set): one that does not is left to its
        launcher, which ends its machine's processes when this one exits."""
        self.stopping = True
        deadline = time.monotonic() + JOIN_S
        store = self.fabric.store
        while time.monotonic() < deadline:
            try:
                if all(store.check([f"exited/{r}"]) for r in self.ranks):
                    return
            except Exception:  # noqa: BLE001 - the store is gone
                return
            time.sleep(0.05)


class LaunchedWiring:
    """What rank 0's loop talks to (`local.LocalWiring`'s attributes) when torchrun started every process."""

    def __init__(self, fabric: Fabric, cfg: TrialConfig, model: torch.nn.Module):
        W, T = cfg.pipeline.generators, cfg.pipeline.trainers
        self.fabric = fabric
        self.weights = DistWeights(fabric, model)
        self.inbox = StoreInbox(fabric.store, 0)
        self.stop, self.pause = fabric.flag("stop"), fabric.flag("pause")
        self.working = StoreFlags(fabric.store, W)
        self.generators = Peers(fabric, "generator", list(range(T, T + W)))
        self.trainers = Peers(fabric, "trainer", list(range(1, T)))
        self.group = fabric.trainers_group

    def start(self) -> None:
        """The processes are torchrun's: already running."""

    def close(self) -> None:
        """Stop the others and wait for them to exit; a store already gone (the trial's failure) is not raised
        again here."""
        for step in (self.stop.set, self.pause.clear, self.generators.end, self.trainers.end):
            try:
                step()
            except PipelineError:
                break
        self.weights.close()
        self.fabric.exited()
        self.fabric.close()


def run_peer(cfg: TrialConfig, launch: Launch) -> int:
    """A rank other than 0 of a launched pipeline: a generator or a trainer until rank 0 says stop or is gone; its
    exit code. A failure is one line, here and, through the store, in rank 0's error."""
    fabric = Fabric(launch, cfg)
    W, T = cfg.pipeline.generators, cfg.pipeline.trainers
    stop = fabric.flag("stop")
    error = None
    outboxes = [StoreOutbox(fabric.store, t, cfg.pipeline.queue_chunks * W) for t in range(T)]
    try:
        if fabric.role == "generator":
            run_generator(
                fabric.cfg,
                fabric.index,
                DistWeights(fabric),
                outboxes,
                stop,
                fabric.flag("pause"),
                StoreFlags(fabric.store, W),
                fabric.rank0_alive,
            )
        else:
            run_trainer(
                fabric.cfg,
                fabric.index,
                StoreInbox(fabric.store, fabric.index),
                stop,
                fabric.rank0_alive,
                fabric.trainers_group,
            )
    except SystemExit as e:  # a generator that failed has told rank 0 through its inbox (the same line)
        error = None if not e.code else (outboxes[0].error or f"exit code {e.code}")
    except Exception as e:  # noqa: BLE001 - one line, here and to rank 0
        error = faults.one_line(e, None, typed=True)
    orphaned = not _stopped(stop) and not fabric.rank0_moving()  # the trial is gone, not told to stop
    if orphaned:
        error = None  # a failure of rank 0's, not this process's
    fabric.exited(error)
    who = f"pipeline: {fabric.role} {fabric.index} (rank {fabric.rank})"
    if orphaned:
        print(f"{who}: rank 0 (the trial) is gone; exiting", file=sys.stderr)
    elif error is not None:
        print(f"{who}: {error}", file=sys.stderr)
    fabric.close()
    return 1 if orphaned or error is not None else 0


def _stopped(stop: StoreFlag) -> bool:
    try:
        return stop.is_set()
    except Exception:  # noqa: BLE001 - the store is gone: so is the trial
        return True
