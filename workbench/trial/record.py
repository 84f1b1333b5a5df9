"""What a trial records, whichever pipeline runs it (`loop`: synchronous; `pipeline`: asynchronous): its budget,
its held-out evaluations and their schedule, each optimizer step's metrics, and the `final/*` metrics."""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from workbench import progress, tracking
from workbench.compute import ComputeMeter, to_target
from workbench.config import TrialConfig
from workbench.estimators import curve_summary, fitted, readings
from workbench.trial.evaluation import EvalResult, Evaluator
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout, batch_stats

log = logging.getLogger(__name__)


class WallClock:
    """A trial's working wall seconds: from `begin()` (training can start: a synchronous trial after its first
    evaluation, an asynchronous one when the first rollouts reach the trainer), evaluations excluded. Before it
    begins it reads 0; what passed since it was made until then, evaluations excluded, is `startup`. Read on equal
    bases in both modes: `wall_seconds` and `device_seconds` (x `devices`) of a curve row."""

    def __init__(self, devices: int = 1):
        self.devices = devices
        self.start: float | None = None
        self.excluded = 0.0
        self.made = time.perf_counter()
        self.startup = 0.0
        self.frozen: float | None = None

    def begin(self) -> None:
        self.start = time.perf_counter()
        self.startup = self.start - self.made - self.excluded
        self.excluded = 0.0

    def stop(self) -> float:
        """Freeze the clock (training is over); returns its reading."""
        self.frozen = self()
        return self.frozen

    def __call__(self) -> float:
        if self.frozen is not None:
            return self.frozen
        return 0.0 if self.start is None else time.perf_counter() - self.start - self.excluded


def devices_in_use(device, threads: int, processes: int = 1) -> int:
    """What a trial occupies, the basis of its `device_seconds`: on a CPU its threads (`threads` in each of its
    `processes`), on an accelerator its processes (one device each)."""
    return processes * threads if getattr(device, "type", str(device).split(":")[0]) == "cpu" else processes


def working_seconds(wall: WallClock) -> dict[str, float]:
    """`final/*` of the working clock, on equal bases in both modes: its wall seconds (evaluations and start-up
    excluded), device-seconds (x the devices in use) and the start-up before it began."""
    return {
        "final/working_seconds": wall(),
        "final/device_seconds": wall() * wall.devices,
        "final/devices": wall.devices,
        "final/startup_seconds": wall.startup,
    }


@dataclass
class StepRecord:
    """What one optimizer step did; handed to an observer (tests check invariants on what was really trained)."""

    step: int
    fresh: list[Rollout]
    batch: list[Rollout]
    loss: float
    metrics: dict[str, float]


@dataclass
class TrialResult:
    run_id: str
    metrics: dict[str, float]
    """The `final/*` metrics."""
    evals: list[dict[str, float]] = field(default_factory=list)
    """One row per evaluation: step, compute units, accuracy, pass@k, cumulative generated and trained rollouts,
    cumulative generation + training seconds (so compute can be re-accounted at another mu)."""


def budget_left(cfg: TrialConfig, step: int, meter: ComputeMeter, evals: Sequence[dict[str, float]] = ()) -> bool:
    """Whether the trial trains another step: neither budget spent, or, with `budget.until_target_units`, the
    compute budget spent but the target not yet read on the curve so far (`evals`, the rows so far: `reached_at`),
    or read less than `until_target_margin` ago, and the cap not hit."""
    if cfg.budget.steps is not None and step >= cfg.budget.steps:
        return False
    if cfg.budget.compute_units is None or meter.units < cfg.budget.compute_units:
        return True
    cap = cfg.budget.until_target_units
    if cap is None or meter.units >= cap:
        return False
    crossed = reached_at(evals, cfg.eval.metric, cfg.eval.target_accuracy)
    return crossed is None or meter.units < crossed * (1.0 + cfg.budget.until_target_margin)


def reached_at(evals: Sequence[dict[str, float]], metric: str, target: float) -> float | None:
    """Where the curve so far reads the target both ways a study may read it: its first evaluation at or above the
    target, and the crossing of the sigmoid fitted to it (`estimators.fitted`, the default estimator), the later of
    the two; None while either does not (no evaluation reached it yet, or the fitted curve crosses beyond the last
    evaluation or never: a run stopped there would be censored by the fitted reading though its curve touched the
    target once)."""
    first = next((row["compute_units"] for row in evals if row.get(metric, -math.inf) >= target), None)
    if first is None:
        return None
    rows = [row for row in evals if row.get(metric) is not None]
    fit = _fitted(tuple(row["compute_units"] for row in rows), tuple(row[metric] for row in rows), target)
    return None if fit.censored else max(first, fit.value)


@functools.lru_cache(maxsize=4)
def _fitted(units: tuple[float, ...], values: tuple[float, ...], target: float):
    """`estimators.fitted` once per curve: `budget_left` asks at every step (~25 ms a fit), the curve changes only at
    an evaluation."""
    return fitted(units, values, target)


def budget_bar(cfg: TrialConfig, enabled: bool):
    """A bar over the budget that ends first: compute units when set, else steps."""
    if cfg.budget.compute_units is not None:
        return progress.bar(cfg.budget.compute_units, "trial", "units", enabled)
    return progress.bar(cfg.budget.steps, "trial", "steps", enabled)


class EvalSchedule:
    """When to evaluate: every `every` optimizer steps, or, with `every_units`, at the first step at or past each
    multiple of `every_units` compute units (several multiples crossed in one step give one evaluation)."""

    def __init__(self, every: int, every_units: float | None):
        self.every, self.every_units = every, every_units
        self.next_units = every_units

    def due(self, step: int, units: float) -> bool:
        if self.every_units is None:
            return step % self.every == 0
        if units + 1e-9 < self.next_units:
            return False
        self.next_units = (int((units + 1e-9) // self.every_units) + 1) * self.every_units
        return True


class Evaluations:
    """A trial's held-out evaluations: run on `eval.*`'s schedule, logged to the run, kept as the curve's rows."""

    def __init__(
        self,
        cfg: TrialConfig,
        policy: Policy,
        task,
        run: tracking.RunLogger,
        meter: ComputeMeter,
        bar,
        on_eval=None,
        t_start: float | None = None,
        wall: WallClock | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.cfg, self.policy, self.run, self.meter, self.bar, self.on_eval = cfg, policy, run, meter, bar, on_eval
        self.wall = wall or WallClock()
        """The trial's working wall clock; evaluations are excluded from it here."""
        self.clock = clock or (lambda: meter.seconds["gen"] + meter.seconds["train"])
        """A curve row's `seconds`: synchronous, generation + training (what re-accounting at another mu reads);
        asynchronous, the pipeline's wall time."""
        self.t_start = time.perf_counter() if t_start is None else t_start
        self.evaluate = Evaluator(
            task,
            policy.tokenizer,
            k=cfg.eval.k,
            pass_k_prompts=cfg.eval.pass_k_prompts,
            max_new_tokens=policy.max_new_tokens,
            temperature=policy.temperature,
            seed=cfg.seed,
            device=policy.device,
            sampler=policy.sample,
            chat=policy.chat,
            batch_size=cfg.eval.batch_size,
            temperatures=cfg.eval.temperatures,
            scoring_mib=cfg.train.scoring_mib,
        )
        self.schedule = EvalSchedule(cfg.eval.every, cfg.eval.every_units)
        self.rows: list[dict[str, float]] = []
        self.seconds = 0.0
        """Wall seconds spent evaluating: neither generation nor training compute."""

    def due(self, step: int, last: bool) -> bool:
        return last or self.schedule.due(step, self.meter.units)

    def __call__(self, step: int, last: bool = False) -> None:
        t_eval = time.perf_counter()
        progress.ACTIVITY.begin(f"evaluation at step {step}: decoding", "tokens")
        with_k, with_demo = self.cfg.eval.samples_at(len(self.rows), last)
        with self.policy.precision():
            res = self.evaluate(self.policy.model, pass_k=with_k, demo_prob=with_demo)
        self.seconds += time.perf_counter() - t_eval
        self.wall.excluded += time.perf_counter() - t_eval
        meter = self.meter
        row = {
            "step": step,
            "compute_units": meter.units,
            "accuracy": res.accuracy,
            "pass_at_k": res.pass_at_k,
            "mean_at_k": res.mean_at_k,
            "demo_prob": res.demo_prob,
            tracking.CURVE_SAMPLE_ENTROPY: res.sample_entropy,
            **at_temperature_row(res, self.cfg.eval.temperatures),
            "gen_rollouts": meter.gen_rollouts,
            "train_rollouts": meter.train_rollouts,
            "seconds": self.clock(),
            "wall_seconds": self.wall(),
            "device_seconds": self.wall() * self.wall.devices,
        }
        self.rows.append(row)
        logged = {tracking.EVAL_ACCURACY: res.accuracy, tracking.COMPUTE_UNITS: meter.units}
        if res.demo_prob is not None:
            logged[tracking.EVAL_DEMO_PROB] = res.demo_prob
        if res.pass_at_k is not None:
            logged[tracking.EVAL_PASS_AT_K] = res.pass_at_k
            logged[tracking.EVAL_MEAN_AT_K] = res.mean_at_k
            logged[tracking.EVAL_SAMPLE_ENTROPY] = res.sample_entropy
            for t, at_t in res.at_temperature.items():
                logged[tracking.EVAL_MEAN_AT_K_AT_T.format(t)] = at_t.mean_at_k
                logged[tracking.EVAL_DEMO_PROB_AT_T.format(t)] = at_t.demo_prob
        self.run.log_metrics(logged, step)
        pass_k = "  -  " if res.pass_at_k is None else f"{res.pass_at_k:.3f}"
        demo = "  -  " if res.demo_prob is None else f"{res.demo_prob:.3f}"
        log.info(
            f"step {step:5d}  units {meter.units:8.1f}  acc {res.accuracy:.3f}  pass@{res.k} {pass_k}  demo {demo}"
            f"  mu {meter.mu:.2f}  {time.perf_counter() - self.t_start:6.1f}s"
        )
        self.bar.set_postfix(acc=f"{res.accuracy:.3f}", refresh=False)
        if self.on_eval:
            self.on_eval(row)


def at_temperature_row(res: EvalResult, temperatures: list[float]) -> dict[str, float | None]:
    """An evaluation's curve-row entries at each decoding temperature (`eval.temperatures`): None where it did not
    sample, so every row of a run has the same keys."""
    row = {}
    for t in temperatures:
        at_t = res.at_temperature.get(t)
        row[tracking.CURVE_MEAN_AT_K_AT_T.format(t)] = at_t.mean_at_k if at_t else None
        row[tracking.CURVE_DEMO_PROB_AT_T.format(t)] = at_t.demo_prob if at_t else None
    return row


def train_metrics(obj, grad_norm: float, batch: list[Rollout], step: int, lr: float) -> dict[str, float]:
    """The metrics of one optimizer step's loss and batch (`train/*`, `replay/age_*`, `offpolicy/*`)."""
    stats = batch_stats(batch, step)
    return {
        "train/lr": lr,
        "train/loss": float(obj.loss.detach()),
        "train/grad_norm": grad_norm,
        "train/batch_size": len(batch),
        "replay/age_mean": stats.age_mean,
        "replay/age_max": stats.age_max,
        "replay/uses_mean": stats.uses_mean,
        "offpolicy/ratio_mean": obj.ratio_mean,
        "offpolicy/clip_frac": obj.clip_frac,
        **{f"offpolicy/{k}": v for k, v in (obj.stats or {}).items()},
    }


def ledger_metrics(generated: int, trained_once: int, held: int) -> dict[str, float]:
    """The rollout ledger (summed over a pipeline's trainers): of the `generated` rollouts, `trained_once` have been
    trained at least once, `held` wait untrained in the buffers, and the rest were discarded untrained (evicted,
    dropped by a strategy's filter): generated = trained + held + discarded."""
    return {
        tracking.TRAINED_ONCE_ROLLOUTS: trained_once,
        tracking.HELD_ROLLOUTS: held,
        tracking.DISCARDED_ROLLOUTS: generated - trained_once - held,
    }


def compute_metrics(meter: ComputeMeter, updates: int) -> dict[str, float]:
    """The running compute account (`compute/*`) after a step."""
    return {
        "train/updates": updates,
        tracking.COMPUTE_UNITS: meter.units,
        "compute/gen_tokens": meter.gen_tokens,
        "compute/train_tokens": meter.train_tokens,
        tracking.GEN_ROLLOUTS: meter.gen_rollouts,
        tracking.TRAIN_ROLLOUTS: meter.train_rollouts,
        tracking.GEN_SECONDS: meter.seconds["gen"],
        tracking.TRAIN_SECONDS: meter.seconds["train"],
        "compute/flops": meter.flops["total"],
        "compute/mu": meter.mu,
    }


def mismatch_metrics(fresh: list[Rollout]) -> dict[str, float]:
    """How far a generation engine's log-probs of its sampled tokens are from the trainer's (rollouts sampled by an
    engine carry both); empty when no rollout was."""
    scored = [r for r in fresh if r.trainer_logprobs is not None]
    if not scored:
        return {}
    diff = torch.cat([(r.behaviour_logprobs - r.trainer_logprobs).abs() for r in scored])
    return {"mismatch/logprob_abs_mean": float(diff.mean()), "mismatch/logprob_abs_max": float(diff.max())}


def fresh_metrics(fresh: list[Rollout], entropy_mean: float, generated_tokens: int) -> dict[str, float]:
    """What the step's fresh rollouts say of the policy that sampled them."""
    return {
        "train/reward_mean": float(np.mean([r.reward for r in fresh])),
        tracking.POLICY_ENTROPY: entropy_mean,
        "train/completion_length": generated_tokens / len(fresh),
    }


def final_metrics(
    cfg: TrialConfig, evals, meter: ComputeMeter, steps: int, updates: int, wall: float
) -> dict[str, float]:
    accuracy = [e["accuracy"] for e in evals]
    reading = readings(evals, cfg.eval.metric)  # what compute-to-target reads (greedy accuracy by default)
    spent = [e["compute_units"] for e in evals]
    target = cfg.eval.target_accuracy
    reached = to_target(spent, reading, target)
    final = {
        tracking.FINAL_ACCURACY: accuracy[-1],
        tracking.FINAL_BEST_ACCURACY: max(accuracy),
        tracking.FINAL_INITIAL_ACCURACY: accuracy[0],
        "final/pass_at_k": next((e["pass_at_k"] for e in reversed(evals) if e["pass_at_k"] is not None), float("nan")),
        tracking.FINAL_COMPUTE_UNITS: meter.units,
        tracking.FINAL_CENSORED: float(reached.censored),
        "final/steps": steps,
        "final/updates": updates,
        tracking.FINAL_MU: meter.mu,
        "final/gen_seconds": meter.seconds["gen"],
        "final/train_seconds": meter.seconds["train"],
        tracking.FINAL_WALL_SECONDS: wall,
        "final/gen_rollouts": meter.gen_rollouts,
        "final/train_rollouts": meter.train_rollouts,
        "final/replay_ratio": meter.train_rollouts / max(meter.gen_rollouts, 1),
    }
    # Every estimator of compute-to-target and the curve's summaries (accuracy at budget fractions, normalised AUC,
    # the fitted sigmoid), against the budget in units when there is one; a censored estimate is logged with its flag.
    summary = curve_summary(spent, reading, target, cfg.budget.compute_units)
    final.update({f"final/{k}": v for k, v in summary.items()})
    if meter.measured_mu is not None:
        final[tracking.FINAL_MU_MEASURED] = meter.measured_mu
    if not reached.censored:
        final[tracking.FINAL_COMPUTE_TO_TARGET] = reached.value
        final["final/steps_to_target"] = to_target([e["step"] for e in evals], reading, target).value
    return final
