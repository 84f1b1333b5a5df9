"""The first trainer's loop (rank 0, the trial's own process): start the generators and the other trainers, train
on its shard in lockstep with them, publish the weights, evaluate with the generators paused, log the run."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import torch

from workbench import progress, seeds, tracking
from workbench.compute import ComputeMeter
from workbench.config import TrialConfig
from workbench.trial.pipeline.devices import place
from workbench.trial.pipeline.distributed import Fabric, LaunchedWiring, launched
from workbench.trial.pipeline.generator import PipelineError, process_threads
from workbench.trial.pipeline.local import LocalWiring
from workbench.trial.pipeline.trainer import LAG_BINS, Shard, StepReport, average_gradients, go, shard_config
from workbench.trial.policy import Policy, count_parameters
from workbench.trial.record import (
    Evaluations,
    StepRecord,
    TrialResult,
    WallClock,
    budget_bar,
    budget_left,
    compute_metrics,
    devices_in_use,
    final_metrics,
    mismatch_metrics,
    train_metrics,
    working_seconds,
)
from workbench.trial.step import make_lr_schedule, make_optimizer, rescore, train_step
from workbench.trial.strategies import StrategyContext, make_strategy
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


def train_async(
    cfg: TrialConfig, task: Task, run: tracking.RunLogger, observer=None, on_eval=None, show_progress: bool = False
) -> TrialResult:
    """One asynchronous trial (the package's docstring) to its budget; the run records what a synchronous trial's
    does, plus `pipeline/*`. Batch diagnostics (loss, ratios) are the first trainer's shard's; counts, ages and
    compute are summed over all trainers. Started by torchrun (`distributed`), this process is rank 0 and the
    others are already running; else it spawns them (`local`)."""
    t_start = time.perf_counter()
    W, T = cfg.pipeline.generators, cfg.pipeline.trainers
    torch.set_num_threads(process_threads(cfg))
    launch = launched()
    fabric = Fabric(launch, cfg) if launch is not None else None
    policy = Policy(
        fabric.cfg if fabric else place(cfg, "trainer", 0), task
    )  # builds (and caches) the embedded checkpoint before any other process looks for it
    run.set_tags({tracking.MODEL_PATH: policy.path, tracking.DEVICE: str(policy.device), "pipeline": "async"})
    shard_cfg = shard_config(cfg)
    optimizer = make_optimizer(policy.model, cfg.lr)
    lr_schedule = make_lr_schedule(optimizer, cfg.lr_warmup_steps)
    strategy = make_strategy(
        shard_cfg,
        StrategyContext(
            task,
            policy.tokenizer,
            lambda rs: rescore(policy, rs, shard_cfg.train.micro_batch_size),
            policy.max_new_tokens,
        ),
    )
    meter = ComputeMeter(cfg.batch_size, count_parameters(policy.model), cfg.compute.mu)
    account, updates = _Account(), 0
    bar = budget_bar(cfg, show_progress)
    clock = WallClock(devices_in_use(policy.device, process_threads(cfg), W + T))  # starts with the first rollouts in
    evaluations = Evaluations(cfg, policy, task, run, meter, bar, on_eval, t_start, clock, clock)
    wiring = LaunchedWiring(fabric, cfg, policy.model) if fabric else LocalWiring(cfg, policy.model)
    weights, pause, working = wiring.weights, wiring.pause, wiring.working
    generators, trainers, group = wiring.generators, wiring.trainers, wiring.group
    shard: Shard | None = None
    try:
        wiring.start()
        run.set_tags(
            {
                "pipeline.generator_pids": ",".join(map(str, generators.pids)),
                **({"pipeline.trainer_pids": ",".join(map(str, trainers.pids))} if T > 1 else {}),
                **(
                    {"pipeline.launch": f"torchrun, {launch.world} processes, backend {fabric.backend}"}
                    if fabric
                    else {}
                ),
            }
        )
        log.info(
            f"pipeline: async, {W} generator(s) (pids {', '.join(map(str, generators.pids))}), {T} trainer(s)"
            + (f", launched by torchrun ({fabric.backend})" if fabric else "")
        )

        arrivals = _Arrivals(generators, cfg.pipeline.stall_timeout_s)

        def died() -> None:
            generators.check()
            trainers.check()

        def check() -> None:
            died()
            arrivals.check()

        shard = Shard(
            wiring.inbox, strategy, np.random.default_rng(seeds.replay_draws(cfg.seed)), check, arrivals.arrived
        )
        gate = average_gradients(T, group) if T > 1 else strategy.gate

        def evaluate(step: int, last: bool = False) -> None:
            pause.set()  # evaluation time is nobody's generation: wait (on the clock) until no generator samples
            while any(working[:]):
                check()
                time.sleep(0.005)
            try:
                evaluations(step, last)  # off the clock
            finally:
                pause.clear()
                arrivals.resume()

        with progress.bar_safe_logging(show_progress), bar:
            evaluate(0)
            arrivals.start(W)
            shard.first_chunk()  # the generators' start-up, off the clock
            clock.begin()
            step = 0
            while _collective(died, go, budget_left(cfg, step, meter, evaluations.rows), T, group):
                mine = StepReport()
                batch, fresh = shard.next_batch(step, mine, lambda: meter.timed("train"))
                with meter.timed("train"):
                    obj, grad_norm, applied = _collective(
                        died, train_step, policy, optimizer, batch, shard_cfg, step, gate
                    )
                mine.add_batch(batch, step)
                report = _collective(died, mine.summed, T, group)
                t0 = time.perf_counter()
                weights.publish(policy.model, step + 1, check)
                account.publish_s += time.perf_counter() - t0
                account.add(report)
                v = report.values
                meter.seconds["gen"] += v["busy_s"] + v["slowdown_s"]  # an emulated slower generator's cost included
                meter.gen_tokens += int(v["gen_tokens"])
                meter.prefill_tokens += int(v["prefill_tokens"])
                meter.train_tokens += int(v["train_tokens"])
                for r in batch:
                    r.uses += 1
                updates += int(applied)
                metrics = train_metrics(obj, grad_norm, batch, step, lr_schedule.get_last_lr()[0])
                lr_schedule.step()
                units_before = meter.units
                meter.step(int(v["fresh"]), cfg.batch_size)
                trained = report.age.sum()
                metrics.update(
                    {
                        **compute_metrics(meter, updates),
                        "replay/buffer_size": strategy.size(),
                        "replay/fresh": v["fresh"],
                        "replay/age_mean": float(report.age @ np.arange(LAG_BINS)) / trained,
                        **strategy.metrics(),
                        **account.metrics(meter, W, T, clock(), clock.startup, clock.devices),
                    }
                )
                if v["fresh"]:
                    metrics.update(
                        {
                            "train/reward_mean": v["reward_sum"] / v["fresh"],
                            tracking.POLICY_ENTROPY: v["entropy_sum"] / max(v["gen_tokens"], 1),
                            "train/completion_length": v["gen_tokens"] / v["fresh"],
                            "pipeline/lag_push_mean": v["lag_push_sum"] / v["fresh"],
                        }
                    )
                metrics.update(mismatch_metrics(fresh))  # vLLM generators: this shard's fresh rollouts
                run.log_metrics(metrics, step)
                if observer:
                    observer(StepRecord(step, fresh, batch, metrics["train/loss"], metrics))
                step += 1
                bar.update(meter.units - units_before if cfg.budget.compute_units is not None else 1)
                last = not budget_left(cfg, step, meter, evaluations.rows)
                if evaluations.due(step, last):
                    evaluate(step, last)
            pipeline_wall = clock.stop()
    finally:
        wiring.close()  # stop the generators first: then the inbox's thread
        if shard is not None:
            shard.close()

    evals = evaluations.rows
    final = final_metrics(cfg, evals, meter, step, updates, time.perf_counter() - t_start)
    final["final/eval_seconds"] = evaluations.seconds
    final.update(
        {
            f"final/pipeline_{k.split('/', 1)[1]}": v
            for k, v in account.metrics(meter, W, T, pipeline_wall, clock.startup, clock.devices).items()
        }
    )
    final.update(working_seconds(clock))
    run.log_metrics(final, step)
    run.log_text(
        json.dumps(
            {"age_counts": _histogram(account.totals.age), "lag_push_counts": _histogram(account.totals.lag_push)}
        ),
        tracking.AGES_ARTIFACT,
    )
    run.log_text(json.dumps(evals), tracking.CURVE_ARTIFACT)
    return TrialResult(run.run_id, final, evals)
