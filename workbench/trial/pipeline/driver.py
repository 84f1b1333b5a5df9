"""The first trainer's batch source (rank 0, the trial's own process; the loop is `trial.loop.train`'s): start the
generators and the other trainers, train on its shard in lockstep with them, publish the weights, evaluate with the
generators paused."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

import numpy as np
import torch

from workbench import progress
from workbench import seeds, tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig
from workbench.trial.pipeline.devices import place
from workbench.trial.pipeline.distributed import Fabric, LaunchedWiring, launched
from workbench.trial.pipeline.generator import PipelineError, process_threads
from workbench.trial.pipeline.local import LocalWiring
from workbench.trial.pipeline.trainer import LAG_BINS, Shard, StepReport, average_gradients, go, shard_config
from workbench.trial.policy import Policy
from workbench.trial.record import WallClock, devices_in_use, ledger_metrics, mismatch_metrics
from workbench.trial.replay import Rollout
from workbench.trial.source import Draw, Parts
from workbench.trial.step import train_step
from workbench.trial.tasks import Task

log = logging.getLogger(__name__)


class _Account:
    """The pipeline's running account, summed over generators and trainers."""

    def __init__(self):
        self.totals = StepReport()
        self.publish_s = 0.0

    def add(self, step: StepReport) -> None:
        for k, v in step.values.items():
            self.totals.values[k] += v
        self.totals.lag_push += step.lag_push
        self.totals.age += step.age

    def metrics(
        self, meter: ComputeMeter, W: int, T: int, wall: float, startup: float = 0.0, devices: int | None = None
    ) -> dict[str, float]:
        """`pipeline/*`: idle fractions, weight traffic, emergent replay ratio, mu by App. D.4, device-seconds."""
        v, wall, devices = self.totals.values, max(wall, 1e-9), devices or W + T
        out = {
            "pipeline/wall_seconds": wall,
            "pipeline/startup_seconds": startup,
            "pipeline/device_seconds": devices * wall,
            "pipeline/trainer_idle_fraction": v["wait_s"] / (T * wall),
            "pipeline/generator_idle_fraction": v["blocked_s"] / (W * wall),
            "pipeline/generator_busy_fraction": v["busy_s"] / (W * wall),
            "pipeline/gen_blocked_seconds": v["blocked_s"],
            "pipeline/gen_sync_seconds": v["sync_s"],
            "pipeline/gen_paused_seconds": v["paused_s"],
            "pipeline/gen_slowdown_seconds": v["slowdown_s"],
            "pipeline/trainer_wait_seconds": v["wait_s"],
            "pipeline/publish_seconds": self.publish_s,
            "pipeline/chunks": v["chunks"],
            "pipeline/replay_ratio": meter.train_rollouts / max(meter.gen_rollouts, 1),
        }
        if meter.gen_rollouts:
            out["pipeline/mu_d4"] = (meter.train_rollouts / T) / (meter.gen_rollouts / W)
            if meter.train_rollouts and meter.seconds["train"] > 0:  # the generators' own mu, without the emulation
                out["pipeline/mu_busy"] = (v["busy_s"] / meter.gen_rollouts) / (
                    meter.seconds["train"] / meter.train_rollouts
                )
        return out


STARTUP_GRACE_S = 600.0
"""The least a generator is given for its first chunk (loading a model, starting an engine), whatever the timeout."""


class _Arrivals:
    """When each generator last delivered a chunk: one that delivers none for `pipeline.stall_timeout_s` (the time
    spent in evaluations excluded; before its first chunk, at least `STARTUP_GRACE_S`) ends the trial. A hung
    generator is alive, so `Processes.check` never sees it, a queue arm would wait for it forever, and a buffer arm
    would go on replaying a frozen buffer."""

    def __init__(self, generators, timeout: float | None):
        self.generators, self.timeout = generators, timeout
        self.since: list[float] = []
        """Per generator: its last chunk's arrival, or when the wait for its first began."""
        self.delivered: list[bool] = []

    def start(self, workers: int) -> None:
        self.since, self.delivered = [time.monotonic()] * workers, [False] * workers

    def arrived(self, chunk, rollouts) -> None:
        if self.since:
            self.since[chunk.worker], self.delivered[chunk.worker] = time.monotonic(), True

    def resume(self) -> None:
        """After an evaluation (generators paused): every generator's wait starts again."""
        self.since = [time.monotonic()] * len(self.since)

    def check(self) -> None:
        if self.timeout is None:
            return
        now = time.monotonic()
        for w, (t, delivered) in enumerate(zip(self.since, self.delivered)):
            limit = self.timeout if delivered else max(self.timeout, STARTUP_GRACE_S)
            if now - t > limit:
                raise PipelineError(
                    f"pipeline: generator {w} (pid {self.generators.pids[w]}) delivered no rollouts for"
                    f" {limit:g} s (hung, or blocked on a full queue; pipeline.stall_timeout_s)"
                )


DEATH_GRACE_S = 5.0  # a dead peer's socket closes before the kernel reports its exit: how long to wait for the exit


def _collective(check, fn, *args):
    """`fn(*args)`, which talks to the other trainers: when it fails because one of them died, say which (waiting up
    to `DEATH_GRACE_S` for the death to become visible: the connection is reset while the process is still exiting);
    when it timed out with everyone alive, a trainer is hung. `check` looks for deaths only: a generator blocked on a
    hung trainer's full inbox is its symptom, not the cause."""
    try:
        return fn(*args)
    except RuntimeError as e:
        deadline = time.monotonic() + DEATH_GRACE_S
        while True:
            try:
                check()
            except PipelineError as died:
                raise died from e
            if time.monotonic() >= deadline:
                if "timeout" in str(e).lower() or "timed out" in str(e).lower():  # alive, but silent: hung
                    raise PipelineError(
                        "pipeline: a trainer made no progress for pipeline.stall_timeout_s (hung; its"
                        " collective timed out)"
                    ) from e
                raise
            time.sleep(0.05)


def _histogram(bins: np.ndarray) -> dict[str, int]:
    """Counts by lag; the last bin (`LAG_BINS` - 1) also holds every larger lag."""
    return {str(i): int(n) for i, n in enumerate(bins) if n}


class PipelineSource:
    """The asynchronous batch source (the package's docstring): generators in other processes feed this trainer's
    shard; the trainers train in lockstep and sum their step reports; the weights are published after each step;
    evaluations pause the generators. Batch diagnostics (loss, ratios) are this, the first, trainer's shard's;
    counts, ages and compute are summed over all trainers. Started by torchrun (`distributed`), this process is
    rank 0 and the others are already running; else it spawns them (`local`)."""

    def __init__(self, cfg: TrialConfig):
        self.full = cfg
        self.cfg = shard_config(cfg)
        self.W, self.T = cfg.pipeline.generators, cfg.pipeline.trainers
        self.tags = {"pipeline": "async"}
        self.account = _Account()
        self.launch = launched()
        self.fabric = Fabric(self.launch, cfg) if self.launch is not None else None

    def policy(self, task: Task) -> Policy:
        torch.set_num_threads(process_threads(self.full))
        # builds (and caches) the embedded checkpoint before any other process looks for it
        return Policy(self.fabric.cfg if self.fabric else place(self.full, "trainer", 0), task)

    def clock(self, policy: Policy):
        clock = WallClock(devices_in_use(policy.device, process_threads(self.full), self.W + self.T))
        return clock, clock  # starts with the first rollouts in; a curve row's seconds are the pipeline's wall time

    @contextmanager
    def running(self, parts: Parts):
        self.p, cfg, fabric = parts, self.full, self.fabric
        wiring = LaunchedWiring(fabric, cfg, parts.policy.model) if fabric else LocalWiring(cfg, parts.policy.model)
        self.wiring, self.shard = wiring, None
        try:
            wiring.start()
            self._announce()
            self.arrivals = _Arrivals(wiring.generators, cfg.pipeline.stall_timeout_s)
            self.shard = Shard(
                wiring.inbox,
                parts.strategy,
                np.random.default_rng(seeds.replay_draws(cfg.seed)),
                self._check,
                self.arrivals.arrived,
            )
            self.gate = average_gradients(self.T, wiring.group) if self.T > 1 else parts.strategy.gate
            yield
        finally:
            wiring.close()  # stop the generators first: then the inbox's thread
            if self.shard is not None:
                self.shard.close()

    def _announce(self) -> None:
        generators, trainers, fabric = self.wiring.generators, self.wiring.trainers, self.fabric
        self.p.run.set_tags(
            {
                "pipeline.generator_pids": ",".join(map(str, generators.pids)),
                **({"pipeline.trainer_pids": ",".join(map(str, trainers.pids))} if self.T > 1 else {}),
                **(
                    {"pipeline.launch": f"torchrun, {self.launch.world} processes, backend {fabric.backend}"}
                    if fabric
                    else {}
                ),
            }
        )
        log.info(
            f"pipeline: async, {self.W} generator(s) (pids {', '.join(map(str, generators.pids))}), {self.T} trainer(s)"
            + (f", launched by torchrun ({fabric.backend})" if fabric else "")
        )

    def _died(self) -> None:
        self.wiring.generators.check()
        self.wiring.trainers.check()

    def _check(self) -> None:
        self._died()
        self.arrivals.check()

    def evaluate(self, step: int, last: bool = False) -> None:
        pause, working = self.wiring.pause, self.wiring.working
        pause.set()  # evaluation time is nobody's generation: wait (on the clock) until no generator samples
        while any(working[:]):
            self._check()
            time.sleep(0.005)
        try:
            self.p.evaluations(step, last)  # off the clock
        finally:
            pause.clear()
            self.arrivals.resume()

    def begin(self) -> None:
        self.arrivals.start(self.W)
        self.shard.first_chunk()  # the generators' start-up, off the clock

    def more(self, step: int, budget_left: bool) -> bool:
        return _collective(self._died, go, budget_left, self.T, self.wiring.group)

    def draw(self, step: int) -> Draw:
        mine = StepReport()
        progress.ACTIVITY.begin(f"step {step}: waiting for the generators' rollouts")
        batch, fresh = self.shard.next_batch(step, mine, lambda: self.p.meter.timed("train"))
        return Draw(fresh, batch, mine)

    def train(self, step: int, batch: list[Rollout]) -> tuple[float, float, bool]:
        p = self.p
        return _collective(self._died, train_step, p.policy, p.optimizer, batch, self.cfg, step, self.gate, p.cosine)

    def trained(self, step: int, draw: Draw) -> tuple[int, int]:
        mine, meter = draw.state, self.p.meter
        mine.add_batch(draw.batch, step, draw.trained_once, self.p.strategy.held())
        self.report = report = _collective(self._died, mine.summed, self.T, self.wiring.group)
        t0 = time.perf_counter()
        self.wiring.weights.publish(self.p.policy.model, step + 1, self._check)
        self.account.publish_s += time.perf_counter() - t0
        self.account.add(report)
        v = report.values
        meter.seconds["gen"] += v["busy_s"] + v["slowdown_s"]  # an emulated slower generator's cost included
        meter.gen_tokens += int(v["gen_tokens"])
        meter.prefill_tokens += int(v["prefill_tokens"])
        meter.train_tokens += int(v["train_tokens"])
        return int(v["fresh"]), self.full.batch_size

    def _pipeline(self) -> dict[str, float]:
        clock = self.p.clock
        return self.account.metrics(self.p.meter, self.W, self.T, clock(), clock.startup, clock.devices)

    def metrics(self, step: int, draw: Draw) -> dict[str, float]:
        report = self.report
        v = report.values
        metrics = {"replay/age_mean": float(report.age @ np.arange(LAG_BINS)) / report.age.sum(), **self._pipeline()}
        if v["fresh"]:
            metrics.update(
                {
                    "train/reward_mean": v["reward_sum"] / v["fresh"],
                    tracking.POLICY_ENTROPY: v["entropy_sum"] / max(v["gen_tokens"], 1),
                    "train/completion_length": v["gen_tokens"] / v["fresh"],
                    "pipeline/lag_push_mean": v["lag_push_sum"] / v["fresh"],
                }
            )
        metrics.update(mismatch_metrics(draw.fresh))  # vLLM generators: this shard's fresh rollouts
        # the ledger of every trainer's shard (the loop's own reads rank 0's only)
        totals = self.account.totals.values
        metrics.update(ledger_metrics(self.p.meter.gen_rollouts, int(totals["trained_once"]), int(v["held_untrained"])))
        return metrics

    def final(self) -> dict[str, float]:
        return {f"final/pipeline_{k.split('/', 1)[1]}": v for k, v in self._pipeline().items()}

    def histograms(self) -> dict[str, dict[str, int]]:
        totals = self.account.totals
        return {"age_counts": _histogram(totals.age), "lag_push_counts": _histogram(totals.lag_push)}
