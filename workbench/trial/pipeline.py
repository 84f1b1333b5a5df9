"""Arnal et al.'s asynchronous system on one machine (`pipeline.mode: async`; replay-papers §1.3, App. B).

    W generator processes, each:                       the trainer (this process):
        pull the published weights when they are           take what arrived (as much as the strategy has room
          `generation.sync_every` versions ahead             for); strategy.stream_batch -> a batch, or wait
        sample a chunk of whole GRPO groups (rewards,      one optimizer step on it (the configured objective)
          advantages, behaviour log-probs frozen)          publish the weights (version = optimizer steps done)
        push it to the transfer queue (waits when full)    evaluate on schedule, generators paused meanwhile

The replay ratio is not set: it emerges from the two sides' speeds (K_train / K_gen). Processes are
`torch.multiprocessing` spawn children; the weights travel through shared-memory tensors under a lock (the
trainer copies its parameters in after each step, a generator copies them out), rollouts through a bounded
multiprocessing queue. A rollout's `birth_step` is the weight version that generated it, so its age at a trainer
step is its policy lag at training, and its lag at generation (versions the trainer had published beyond it when it
was pushed: `Rollout.pushed_version - birth_step`, in flight) is logged as `pipeline/lag_push_mean`.

Accounting: compute units as in a synchronous trial (K_train + mu·K_gen at the configured mu, so the two modes
compare on one scale), generation seconds as the generators' busy seconds, each side's idle seconds (generators
waiting on a full queue, the trainer starved), the weight traffic, mu by the paper's estimator (K_train/T)/(K_gen/W)
(App. D.4) and device-seconds (W + T) x the pipeline's wall time (evaluations excluded).

Faults: a generator that dies (any signal) or raises ends the trial within about a second with one line naming it;
the trial's run ends FAILED (KILLED on Ctrl-C: generators ignore SIGINT and are ended by the trainer); a trainer
exception stops the generators; no child outlives the trial (each also exits when its parent is gone).
"""

from __future__ import annotations

import json
import logging
import os
import queue as queue_errors
import signal
import time
from collections import Counter
from dataclasses import dataclass, field, fields

import numpy as np
import torch
import torch.multiprocessing as mp

from workbench import progress, tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.record import (Evaluations, StepRecord, TrialResult, budget_bar, budget_left, compute_metrics,
                                    final_metrics, train_metrics)
from workbench.trial.replay import Rollout, batch_stats
from workbench.trial.rollouts import PromptStream, generate_groups
from workbench.trial.step import make_optimizer, rescore, train_step
from workbench.trial.strategies import StrategyContext, make_strategy
from workbench.trial.tasks import Task, load_task

log = logging.getLogger(__name__)

CONTEXT = mp.get_context("spawn")
POLL_S = 0.2
"""How often a waiting side looks at the other side's health (a dead generator is noticed within this)."""
JOIN_S = 5.0
"""How long a stopping generator gets to exit before it is terminated, then killed."""


class PipelineError(RuntimeError):
    """A generator died or failed: the asynchronous trial cannot go on."""


class SharedWeights:
    """The trainer's parameters in shared memory with a version number (optimizer steps done)."""

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


@dataclass
class Chunk:
    """What a generator pushes: whole groups sampled with one weight version, and its time since the last chunk."""

    worker: int
    rollouts: list[dict]
    """`Rollout` fields, log-probs as numpy arrays (a tensor per rollout would cost a shared-memory file each)."""
    version: int
    published: int
    """The trainer's latest version when the chunk was pushed (lag at generation = published - version)."""
    generated_tokens: int
    prefill_tokens: int
    entropy_sum: float
    busy_s: float
    """Sampling (and scoring rewards): the generator's compute."""
    sync_s: float
    """Copying published weights in."""
    blocked_s: float
    """Waiting on a full transfer queue (for the previous chunk)."""
    paused_s: float
    """Paused while the trainer evaluated."""
    slowdown_s: float
    """Idled by `pipeline.generator_slowdown`."""


def process_threads(cfg: TrialConfig) -> int:
    """torch threads of each of the trial's W + T processes: `threads` (the trial's, default every core) split
    evenly, at least one each."""
    total = cfg.threads or os.cpu_count() or 1
    return max(1, total // (cfg.pipeline.generators + cfg.pipeline.trainers))


def _to_wire(r: Rollout) -> dict:
    d = {f.name: getattr(r, f.name) for f in fields(Rollout)}
    d["behaviour_logprobs"] = r.behaviour_logprobs.numpy()
    return d


def _from_wire(d: dict, published: int) -> Rollout:
    return Rollout(**{**d, "behaviour_logprobs": torch.from_numpy(d["behaviour_logprobs"]), "pushed_version": published})


def _sleep(seconds: float, stop) -> float:
    """Sleep up to `seconds`, waking early when `stop` is set; the seconds slept."""
    t0 = time.perf_counter()
    stop.wait(seconds)
    return time.perf_counter() - t0


def generator_main(cfg: TrialConfig, worker: int, weights: SharedWeights, out, stop, pause, parent: int) -> None:
    """One generator process (spawned): sample chunks of whole groups with the latest weights it pulled, push them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the trainer ends us
    try:
        torch.set_num_threads(process_threads(cfg))
        task = load_task(cfg.task)
        policy = Policy(cfg, task)
        version = weights.pull(policy.model)
        prompts = PromptStream(len(task.train), cfg.seed, stream=worker)
        sampler = torch.Generator(device=policy.device).manual_seed(cfg.seed + 104_729 * worker)
        groups = cfg.pipeline.chunk_groups or max(1, cfg.batch_size // cfg.group_size)
        uid = worker << 40  # uids (and group ids, uid // G) distinct across generators
        sync_s = blocked_s = paused_s = slowdown_s = 0.0
        while not stop.is_set() and os.getppid() == parent:
            if pause.is_set():
                t0 = time.perf_counter()
                while pause.is_set() and not stop.is_set():
                    stop.wait(0.01)
                paused_s += time.perf_counter() - t0
                continue
            if weights.latest() - version >= cfg.generation.sync_every:
                t0 = time.perf_counter()
                version = weights.pull(policy.model)
                sync_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            fresh, samples = generate_groups(policy, task, prompts.take(groups), cfg.group_size, version, sampler, uid)
            busy_s = time.perf_counter() - t0
            uid += len(fresh)
            chunk = Chunk(worker, [_to_wire(r) for r in fresh], version, weights.latest(), samples.generated_tokens,
                          samples.prefill_tokens, samples.entropy_sum, busy_s, sync_s, blocked_s, paused_s, slowdown_s)
            sync_s = blocked_s = paused_s = slowdown_s = 0.0
            t0 = time.perf_counter()
            while not stop.is_set():
                try:
                    out.put(("chunk", chunk), timeout=POLL_S)
                    break
                except queue_errors.Full:
                    if os.getppid() != parent:
                        return
            blocked_s += time.perf_counter() - t0
            if cfg.pipeline.generator_slowdown > 1.0:
                slowdown_s += _sleep((cfg.pipeline.generator_slowdown - 1.0) * busy_s, stop)
    except BaseException as e:  # noqa: BLE001 - reported to the trainer, which ends the trial with it
        try:
            out.put(("error", worker, f"{type(e).__name__}: {e}".splitlines()[0]), timeout=1.0)
        except Exception:  # noqa: BLE001 - the trainer notices the exit code instead
            pass
        raise SystemExit(1)
    finally:
        out.cancel_join_thread()  # never block this process's exit on chunks the trainer will not read


@dataclass
class _Account:
    """The pipeline's running account, summed over generators."""

    chunks: int = 0
    gen_busy_s: float = 0.0
    gen_sync_s: float = 0.0
    gen_blocked_s: float = 0.0
    gen_paused_s: float = 0.0
    gen_slowdown_s: float = 0.0
    trainer_wait_s: float = 0.0
    publish_s: float = 0.0
    lag_push: Counter = field(default_factory=Counter)

    def add(self, c: Chunk) -> None:
        self.chunks += 1
        self.gen_busy_s += c.busy_s
        self.gen_sync_s += c.sync_s
        self.gen_blocked_s += c.blocked_s
        self.gen_paused_s += c.paused_s
        self.gen_slowdown_s += c.slowdown_s
        self.lag_push[c.published - c.version] += len(c.rollouts)


class _Clock:
    """The pipeline's wall seconds since it started, evaluations excluded (generators are paused during them)."""

    def __init__(self):
        self.start: float | None = None
        self.excluded = 0.0

    def __call__(self) -> float:
        return 0.0 if self.start is None else time.perf_counter() - self.start - self.excluded


class _Generators:
    """The W generator processes and the queue they push to; `close` ends them all, whatever state they are in."""

    def __init__(self, cfg: TrialConfig, weights: SharedWeights):
        self.queue = CONTEXT.Queue(maxsize=cfg.pipeline.queue_chunks * cfg.pipeline.generators)
        self.stop, self.pause = CONTEXT.Event(), CONTEXT.Event()
        self.procs = [CONTEXT.Process(target=generator_main, name=f"workbench-generator-{w}", daemon=True,
                                      args=(cfg, w, weights, self.queue, self.stop, self.pause, os.getpid()))
                      for w in range(cfg.pipeline.generators)]
        for p in self.procs:
            p.start()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check(self) -> None:
        """Raise `PipelineError` if a generator has exited."""
        for w, p in enumerate(self.procs):
            if p.exitcode is not None:
                how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit code {p.exitcode}"
                raise PipelineError(f"pipeline: generator {w} (pid {p.pid}) died ({how})")

    def get(self, timeout: float | None):
        """The next message (None if none came within `timeout`; no wait with `timeout` None); a generator's
        reported error raises `PipelineError`."""
        try:
            msg = self.queue.get(timeout=timeout) if timeout is not None else self.queue.get_nowait()
        except queue_errors.Empty:
            return None
        if msg[0] == "error":
            raise PipelineError(f"pipeline: generator {msg[1]} failed: {msg[2]}")
        return msg[1]

    def close(self) -> None:
        self.stop.set()
        self.pause.clear()
        deadline = time.monotonic() + JOIN_S
        while any(p.is_alive() for p in self.procs) and time.monotonic() < deadline:
            try:  # keep the queue moving, so no generator's feeder thread waits on a full pipe
                while True:
                    self.queue.get_nowait()
            except (queue_errors.Empty, OSError, EOFError, ValueError):
                pass
            time.sleep(0.05)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
            p.join(1.0)
        self.queue.cancel_join_thread()
        self.queue.close()


def train_async(cfg: TrialConfig, task: Task, run: tracking.RunLogger, observer=None, on_eval=None,
                show_progress: bool = False) -> TrialResult:
    """One asynchronous trial (module docstring) to its budget; the same run records as a synchronous trial's, plus
    `pipeline/*`."""
    t_start = time.perf_counter()
    torch.set_num_threads(process_threads(cfg))
    policy = Policy(cfg, task)  # builds (and caches) the embedded checkpoint before any generator looks for it
    run.set_tags({tracking.MODEL_PATH: policy.path, tracking.DEVICE: str(policy.device), "pipeline": "async"})
    W, T = cfg.pipeline.generators, cfg.pipeline.trainers
    optimizer = make_optimizer(policy.model, cfg.lr)
    warmup = cfg.lr_warmup_steps
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / (warmup + 1)))
    strategy = make_strategy(cfg, StrategyContext(task, policy.tokenizer, lambda rs: rescore(policy, rs), policy.max_new_tokens))
    meter = ComputeMeter(cfg.batch_size, count_parameters(policy.model), cfg.compute.mu)
    replay_rng = np.random.default_rng([cfg.seed, 1])
    account, ages_seen, updates = _Account(), Counter(), 0
    bar = budget_bar(cfg, show_progress)
    clock = _Clock()
    evaluations = Evaluations(cfg, policy, task, run, meter, bar, on_eval, t_start, clock)
    weights = SharedWeights(policy.model)
    gens = _Generators(cfg, weights)
    run.set_tags({"pipeline.generator_pids": ",".join(map(str, gens.pids))})
    log.info(f"pipeline: async, {W} generator(s) (pids {', '.join(map(str, gens.pids))}), {T} trainer")

    def evaluate(step: int, last: bool = False) -> None:
        gens.pause.set()  # generators stop at their next chunk: evaluation time is nobody's generation
        t0 = time.perf_counter()
        try:
            evaluations(step, last)
        finally:
            gens.pause.clear()
            if clock.start is not None:
                clock.excluded += time.perf_counter() - t0

    def receive(chunk: Chunk, arrived: list[Rollout], stats: dict) -> None:
        account.add(chunk)
        arrived.extend(_from_wire(d, chunk.published) for d in chunk.rollouts)
        meter.seconds["gen"] += chunk.busy_s
        meter.gen_tokens += chunk.generated_tokens
        meter.prefill_tokens += chunk.prefill_tokens
        stats["entropy_sum"] += chunk.entropy_sum
        stats["tokens"] += chunk.generated_tokens
        stats["lag_push"] += (chunk.published - chunk.version) * len(chunk.rollouts)

    try:
        with progress.bar_safe_logging(show_progress), bar:
            evaluate(0)
            clock.start = time.perf_counter()
            step = 0
            while budget_left(cfg, step, meter):
                fresh: list[Rollout] = []
                pending: list[Rollout] = []
                stats = {"entropy_sum": 0.0, "tokens": 0, "lag_push": 0}
                while True:
                    gens.check()
                    room = strategy.room()
                    while room is None or room - len(pending) > 0:  # take what arrived, as far as there is room
                        chunk = gens.get(None)
                        if chunk is None:
                            break
                        receive(chunk, pending, stats)
                    with meter.timed("train"):
                        batch = strategy.stream_batch(pending, step, replay_rng)
                    fresh, pending = fresh + pending, []
                    if batch is not None:
                        break
                    t0 = time.perf_counter()  # starved: wait for the generators
                    chunk = gens.get(POLL_S)
                    account.trainer_wait_s += time.perf_counter() - t0
                    if chunk is not None:
                        receive(chunk, pending, stats)
                with meter.timed("train"):
                    obj, grad_norm, applied = train_step(policy, optimizer, batch, cfg, step, strategy.gate)
                t0 = time.perf_counter()
                weights.publish(policy.model, step + 1)
                account.publish_s += time.perf_counter() - t0
                meter.train_tokens += sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
                for r in batch:
                    r.uses += 1
                ages_seen.update(batch_stats(batch, step).ages)
                updates += int(applied)
                metrics = train_metrics(obj, grad_norm, batch, step, lr_schedule.get_last_lr()[0])
                lr_schedule.step()
                units_before = meter.units
                meter.step(len(fresh), len(batch))
                metrics.update({**compute_metrics(meter, updates), "replay/buffer_size": strategy.size(),
                                "replay/fresh": len(fresh), **strategy.metrics(),
                                **_pipeline_metrics(account, meter, W, T, clock())})
                if fresh:
                    metrics.update({
                        "train/reward_mean": float(np.mean([r.reward for r in fresh])),
                        tracking.POLICY_ENTROPY: stats["entropy_sum"] / max(stats["tokens"], 1),
                        "train/completion_length": stats["tokens"] / len(fresh),
                        "pipeline/lag_push_mean": stats["lag_push"] / len(fresh),
                    })
                run.log_metrics(metrics, step)
                if observer:
                    observer(StepRecord(step, fresh, batch, metrics["train/loss"], metrics))
                step += 1
                bar.update(meter.units - units_before if cfg.budget.compute_units is not None else 1)
                last = not budget_left(cfg, step, meter)
                if evaluations.due(step, last):
                    evaluate(step, last)
            pipeline_wall = clock()
    finally:
        gens.close()

    evals = evaluations.rows
    final = final_metrics(cfg, evals, meter, step, updates, time.perf_counter() - t_start)
    final["final/eval_seconds"] = evaluations.seconds
    final.update({f"final/pipeline_{k.split('/', 1)[1]}": v for k, v in _pipeline_metrics(account, meter, W, T, pipeline_wall).items()})
    run.log_metrics(final, step)
    run.log_text(json.dumps({"age_counts": {str(k): v for k, v in sorted(ages_seen.items())},
                             "lag_push_counts": {str(k): v for k, v in sorted(account.lag_push.items())}}),
                 tracking.AGES_ARTIFACT)
    run.log_text(json.dumps(evals), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, evals)


def _pipeline_metrics(a: _Account, meter: ComputeMeter, W: int, T: int, wall: float) -> dict[str, float]:
    """The asynchronous account (`pipeline/*`): idle fractions, weight traffic, emergent replay ratio, mu by the
    paper's estimator, device-seconds."""
    wall = max(wall, 1e-9)
    out = {
        "pipeline/wall_seconds": wall,
        "pipeline/device_seconds": (W + T) * wall,
        "pipeline/trainer_idle_fraction": a.trainer_wait_s / wall,
        "pipeline/generator_idle_fraction": a.gen_blocked_s / (W * wall),
        "pipeline/generator_busy_fraction": a.gen_busy_s / (W * wall),
        "pipeline/gen_blocked_seconds": a.gen_blocked_s,
        "pipeline/gen_sync_seconds": a.gen_sync_s,
        "pipeline/gen_paused_seconds": a.gen_paused_s,
        "pipeline/gen_slowdown_seconds": a.gen_slowdown_s,
        "pipeline/trainer_wait_seconds": a.trainer_wait_s,
        "pipeline/publish_seconds": a.publish_s,
        "pipeline/chunks": a.chunks,
        "pipeline/replay_ratio": meter.train_rollouts / max(meter.gen_rollouts, 1),
    }
    if meter.gen_rollouts:
        out["pipeline/mu_d4"] = (meter.train_rollouts / T) / (meter.gen_rollouts / W)
    return out
