"""The generator processes: sample chunks of whole GRPO groups with the latest weights pulled, push them to the
trainers' inboxes; and the trainer-side handle that starts, watches and ends them."""

from __future__ import annotations

import os
import queue as queue_errors
import signal
import time
from dataclasses import dataclass, fields
from typing import Callable

import torch

from workbench import faults
from workbench import interrupts, seeds
from workbench.config import TrialConfig
from workbench.trial.pipeline.devices import place
from workbench import processes
from workbench.processes import SPAWN, usable_cores
from workbench.trial.pipeline.weights import SharedWeights
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.tasks import load_task

POLL_S = 0.2
"""How often a waiting side looks at the other side's health (a dead generator is noticed within this)."""
JOIN_S = 5.0
"""How long a stopping process gets to exit before it is terminated, then killed."""


class PipelineError(RuntimeError):
    """A generator or a trainer process died or failed: the asynchronous trial cannot go on."""


@dataclass
class Chunk:
    """What a generator pushes to one trainer: whole groups sampled with one weight version, and (in the part for
    the first trainer only, so nothing is counted twice) the generator's seconds since its last chunk."""

    worker: int
    rollouts: list[dict]
    """`Rollout` fields, log-probs as numpy arrays (a tensor per rollout would cost a shared-memory file each)."""
    version: int
    published: int
    """The trainer's latest version when the chunk was pushed (lag at generation = published - version)."""
    generated_tokens: int = 0
    prefill_tokens: int = 0
    entropy_sum: float = 0.0
    busy_s: float = 0.0
    """Sampling (and scoring rewards): the generator's compute."""
    sync_s: float = 0.0
    """Copying published weights in."""
    blocked_s: float = 0.0
    """Waiting on a full inbox (for the previous chunk)."""
    paused_s: float = 0.0
    """Paused while the trainer evaluated."""
    slowdown_s: float = 0.0
    """The emulated slower generator's extra cost of this chunk (`emulated_hold`):
    generation compute (the generator holds the chunk that long before pushing it, as a slower one would sample it)."""


def process_threads(cfg: TrialConfig) -> int:
    """torch threads of each of the trial's W + T processes: `threads` (the trial's, default every core) split
    evenly, at least one each."""
    total = cfg.threads or usable_cores()
    return max(1, total // (cfg.pipeline.generators + cfg.pipeline.trainers))


def to_wire(r: Rollout) -> dict:
    d = {f.name: getattr(r, f.name) for f in fields(Rollout)}
    d["behaviour_logprobs"] = r.behaviour_logprobs.numpy()
    if r.trainer_logprobs is not None:  # sampled by a vLLM engine: the generator's trainer-side view of its tokens
        d["trainer_logprobs"] = r.trainer_logprobs.numpy()
    return d


def from_wire(d: dict, published: int) -> Rollout:
    theirs = d.get("trainer_logprobs")
    return Rollout(
        **{
            **d,
            "behaviour_logprobs": torch.from_numpy(d["behaviour_logprobs"]),
            "pushed_version": published,
            "trainer_logprobs": None if theirs is None else torch.from_numpy(theirs),
        }
    )


def split_groups(rollouts: list[Rollout], parts: int, offset: int) -> list[list[Rollout]]:
    """Whole groups dealt to `parts` trainers in turn, starting at `offset` (so shards stay balanced when a chunk's
    groups do not divide evenly: the paper spreads new rollouts across shards, App. D.4)."""
    out: list[list[Rollout]] = [[] for _ in range(parts)]
    groups: dict[int, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group, []).append(r)
    for i, members in enumerate(groups.values()):
        out[(i + offset) % parts].extend(members)
    return out


def emulated_hold(cfg: TrialConfig, busy_s: float, generated_tokens: int) -> float:
    """Seconds an emulated slower generator (`pipeline.generator_slowdown` s) holds a chunk: (s - 1) x its modelled
    sampling time, the generated tokens x `pipeline.generator_token_seconds` where that is set (counted work: the
    same on a loaded machine), else (s - 1) x `busy_s`, the sampling time measured."""
    extra = cfg.pipeline.generator_slowdown - 1.0
    if extra <= 0:
        return 0.0
    per_token = cfg.pipeline.generator_token_seconds
    return extra * (generated_tokens * per_token if per_token is not None else busy_s)


def _hold(seconds: float, stop, pause, working, worker: int) -> float:
    """The emulated slower generator's extra time, `seconds` of it, spent before the chunk is pushed (a slow
    generator's rollouts arrive that much later, with the weights they were sampled with). An evaluation stops its
    clock: the generator is marked not working until the pause ends. Returns the seconds paused."""
    paused, end = 0.0, time.perf_counter() + seconds
    while not stop.is_set():
        if pause.is_set():
            working[worker] = 0
            t0 = time.perf_counter()
            while pause.is_set() and not stop.is_set():
                stop.wait(0.01)
            working[worker] = 1
            paused += time.perf_counter() - t0
            end += time.perf_counter() - t0
        left = end - time.perf_counter()
        if left <= 0:
            break
        stop.wait(min(left, 0.02))
    return paused


def pull(weights: SharedWeights, policy: Policy, check) -> int:
    """The published weights into the generator's model and, with a vLLM engine, into the engine in place
    (`VllmSampler.sync`); their version."""
    version = weights.pull(policy.model, check)
    if policy.engine is not None:
        policy.engine.sync(policy.model, version)
    return version


def generator_main(
    cfg: TrialConfig, worker: int, weights: SharedWeights, inboxes, stop, pause, working, parent: int
) -> None:
    """One generator process spawned by the trial (`run_generator`): it ignores Ctrl-C (the trainer ends it) and
    dies with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the trainer ends us
    interrupts.die_with_parent(signal.SIGKILL)  # a SIGKILLed trial leaves no orphan (its run's helper says so)
    run_generator(
        place(cfg, "generator", worker), worker, weights, inboxes, stop, pause, working, lambda: os.getppid() == parent
    )


def run_generator(
    cfg: TrialConfig, worker: int, weights, inboxes, stop, pause, working, alive: Callable[[], bool]
) -> None:
    """Generator `worker` (`cfg` already placed on its device): sample chunks of whole groups with the latest weights
    it pulled, deal their groups to the trainers' inboxes, until `stop` is set or the trainer is gone (`alive()`
    false). `working[worker]` is 1 while it samples (or holds a chunk, emulating a slower generator): an evaluation
    sets `pause` and waits for every generator to be idle, so no generation overlaps it. The weights, inboxes and
    flags are the local pipeline's shared memory and queues, or a launched pipeline's (`distributed`)."""
    try:
        torch.set_num_threads(process_threads(cfg))
        task = load_task(cfg.task)
        policy = Policy(cfg, task)

        def orphaned() -> None:  # a trainer killed while publishing never releases the weights' lock
            if not alive():
                raise PipelineError("the trainer is gone")

        version = pull(weights, policy, orphaned)
        prompts = PromptStream(len(task.train), cfg.seed, stream=worker)
        sampler = torch.Generator(device=policy.device).manual_seed(seeds.rollout_sampler(cfg.seed, worker))
        groups = cfg.pipeline.chunk_groups or max(1, cfg.batch_size // cfg.group_size)
        uid = worker << 40  # uids (and group ids, uid // G) distinct across generators
        sync_s = blocked_s = paused_s = 0.0
        chunks = 0
        while not stop.is_set() and alive():
            working[worker] = 1  # before looking at `pause`: an evaluation that set it waits for this to clear
            if pause.is_set():
                working[worker] = 0
                t0 = time.perf_counter()
                while pause.is_set() and not stop.is_set():
                    stop.wait(0.01)
                paused_s += time.perf_counter() - t0
                continue
            if weights.latest() - version >= cfg.generation.sync_every:
                t0 = time.perf_counter()
                version = pull(weights, policy, orphaned)
                sync_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            fresh, samples = generate_groups(policy, task, prompts.take(groups), cfg.group_size, version, sampler, uid)
            busy_s = time.perf_counter() - t0
            uid += len(fresh)
            slowdown_s = emulated_hold(cfg, busy_s, samples.generated_tokens)
            if slowdown_s > 0:
                paused_s += _hold(slowdown_s, stop, pause, working, worker)
            working[worker] = 0
            published = weights.latest()
            parts = split_groups(fresh, len(inboxes), chunks)
            chunks += 1
            sent = [Chunk(worker, [to_wire(r) for r in part], version, published) for part in parts]
            first = sent[0]  # the chunk's costs travel with the first trainer's part
            first.generated_tokens, first.prefill_tokens, first.entropy_sum = (
                samples.generated_tokens,
                samples.prefill_tokens,
                samples.entropy_sum,
            )
            first.busy_s, first.sync_s, first.blocked_s, first.paused_s, first.slowdown_s = (
                busy_s,
                sync_s,
                blocked_s,
                paused_s,
                slowdown_s,
            )
            dealt = _deal(sent, inboxes, stop, pause, alive)
            if dealt is None:
                return
            waited, paused_after = dealt
            sync_s = 0.0
            blocked_s, paused_s = waited, paused_after  # reported with the next chunk
    except BaseException as e:  # noqa: BLE001 - reported to the trainer, which ends the trial with it
        try:
            inboxes[0].put(("error", f"generator {worker}", faults.one_line(e, None, typed=True)), timeout=1.0)
        except Exception:  # noqa: BLE001 - the trainer notices the exit code instead
            pass
        raise SystemExit(1)
    finally:
        for inbox in inboxes:
            inbox.cancel_join_thread()  # never block this process's exit on chunks no trainer will read


def _deal(chunks: list[Chunk], inboxes, stop, pause, alive: Callable[[], bool]) -> tuple[float, float] | None:
    """Put each trainer's chunk in its inbox, waiting while one is full: (seconds blocked on full inboxes, seconds
    waited while the trainer evaluated: a pause), or None when the trainer is gone."""
    waited = paused_after = 0.0
    for inbox, chunk in zip(inboxes, chunks):
        while not stop.is_set():
            t1 = time.perf_counter()
            try:
                inbox.put(("chunk", chunk), timeout=POLL_S)
                break
            except queue_errors.Full:
                if not alive():
                    return None
            finally:
                if pause.is_set():
                    paused_after += time.perf_counter() - t1
                else:
                    waited += time.perf_counter() - t1
    return waited, paused_after


def describe_exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


class Processes:
    """Child processes of the trial (generators, trainers) and how to end them, whatever state they are in."""

    def __init__(self, kind: str):
        self.kind = kind
        self.procs: list = []

    def start(self, target, args: tuple, name: str) -> None:
        p = SPAWN.Process(target=target, name=name, daemon=True, args=args)
        p.start()
        self.procs.append(p)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check(self) -> None:
        """Raise `PipelineError` if one of them has exited."""
        for i, p in enumerate(self.procs):
            if p.exitcode is not None:
                raise PipelineError(
                    f"pipeline: {p.name.removeprefix('workbench-').replace('-', ' ')} (pid {p.pid}) died"
                    f" ({describe_exit(p.exitcode)})"
                )

    def end(self, drain=()) -> None:
        """Wait up to `JOIN_S` for them to exit (emptying the queues in `drain`, so none waits on a full pipe), then
        terminate, then kill."""

        def empty() -> None:
            for q in drain:
                try:
                    while True:
                        q.get_nowait()
                except (queue_errors.Empty, OSError, EOFError, ValueError):
                    pass

        processes.stop(self.procs, JOIN_S, terminate_s=1.0, while_waiting=empty if drain else None)
