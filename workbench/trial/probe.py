"""The probe: one short replay run that measures the model's parameters instead of fitting them to a sweep
(docs/theory.md, "The probe").

A uniform replay trial with a large buffer (default x 16, y 2, filled at B per step) runs for a few dozen steps.
From the step after which the buffer holds every age up to x, every `every` steps the probe takes the whole buffer
(R rollouts of each age) and computes each rollout's gradient of the trial's own objective at the current
parameters (`rollout_gradients`: 64 at a time in one vectorised backward, on one thread; CountSketch-compressed,
`workbench.noise.count_sketch`, so the memory does not depend on the model's size), then `lag` steps later the
gradients of that step's batch again. `ProbePlan` counts them (6,656 at the defaults) and is logged first. From
these:

- sigma²(tau): the per-rollout gradient noise by age (`noise_by_age`, pooled over probe steps), and the shifted
  power law fitted to it (alpha, tau0; F6: non-decreasing with age);
- kappa(tau): the staleness bias, |mean gradient at age tau - at age 0| / |mean at age 0|, and per horizon x the
  terms the prediction needs (`noise.horizon_terms`: the mean gradient over ages 0..x-1, its norm and its
  projection on the fresh one, averaged over probes);
- group_correlation: the within-group correlation of centred gradients (not the paper's compute ratio gamma,
  `workbench.compute.split_compute_ratio`);
- rho: the correlation of a rollout's centred gradient with itself `lag` steps later (how much of a reuse's noise
  is the same noise again: the coupling of Theorem 4.4, 1 when reuse adds nothing new); by default at the mean gap
  between two uses of a rollout in the probe's buffer, x/y steps;
- mu: the run's own measured generation/training cost ratio.

The gradients are computed in eval mode outside the compute meter and the trial's random streams are not touched,
so the probed run trains exactly as an unprobed run of the same configuration would.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from workbench import knobs, noise, progress, seeds, tracking
from workbench.config import TrialConfig, build_config
from workbench.prediction import ProbePrediction
from workbench.trial import rollout_gradients
from workbench.trial.loop import TrialResult, run_trial
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"x": 16, "ratio": 2, "steps": 48, "every": 4, "lag": None, "sketch": 2048}
"""x 16, y 2: a buffer of 16 ages, 64 rollouts of each at B 128; 48 steps: 8 to fill the buffer, 16 for the ages to
spread, then probes at 24, 28, ..., 44 (6 probes, ~380 rollouts of each age; rho from those whose batch is seen
again before the run ends); lag None: x/y steps, the mean gap between two uses of a rollout."""


PROBE_THREADS = 1
"""torch threads of the probe's trial unless its config sets `threads`. Its steps and its gradients are small
operations: beside one other busy process on a 2-core machine, two threads wait at every operation's OpenMP barrier
for the descheduled one (the default probe took 452 s on two threads there, 110 s on one; on the idle machine 108 s
on two); docs/performance.md, "The probe's time"."""


def probe_config(
    overrides: dict[str, Any] | None = None,
    x: float = DEFAULTS["x"],
    ratio: float = DEFAULTS["ratio"],
    steps: int = DEFAULTS["steps"],
) -> TrialConfig:
    """The probe's trial: uniform replay at (x, y) with the buffer filled at B per step, a step budget, one thread
    (`PROBE_THREADS`) and whatever else `overrides` sets (a nested config dict, validated as any trial's)."""
    base = build_config(overrides or {})
    data = {"threads": PROBE_THREADS, **(overrides or {})}
    data["replay"] = {
        **data.get("replay", {}),
        "strategy": "uniform",
        "ratio": ratio,
        "capacity": knobs.capacity(x, ratio, base.batch_size),
        "warmup": "fill",
        "horizon": None,
    }
    data["budget"] = {"compute_units": None, "steps": steps}
    return build_config(data)


@dataclass
class ProbeResult:
    run_id: str
    mu: float
    x: float
    y: float
    steps: int
    compute_units: float
    probes: int
    noise: list[dict] = field(default_factory=list)
    """Per age: n, sigma2 (pooled over probes), se."""
    growth: dict = field(default_factory=dict)
    """sigma0_sq, tau0, alpha, non_decreasing (F6)."""
    kappa: dict[int, float] = field(default_factory=dict)
    horizon: list[dict] = field(default_factory=list)
    """Per horizon x: sigma2_bar, signal, mixed, cross (`noise.HorizonTerms`), averaged over probes."""
    horizon_draws: list[list[dict]] = field(default_factory=list)
    """The same from bootstrap resamples of each probe's GRPO groups (a group's rollouts are correlated, so groups,
    not rollouts, are the units), for the prediction's stability."""
    group_correlation: float = math.nan
    rho: float = math.nan
    rho_lag: int = 1

    def summary(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProbePlan:
    """When the probe measures, and how many gradients of one rollout that takes: its cost, on any machine, in
    backward passes of one rollout (see docs/performance.md for seconds)."""

    steps: int
    start: int
    every: int
    lag: int
    buffer: int
    """Rollouts the probe differentiates at each probe step (the whole buffer)."""
    batch: int

    @property
    def probe_steps(self) -> list[int]:
        return list(range(self.start, self.steps, self.every))

    @property
    def rho_steps(self) -> list[int]:
        """Probe steps whose batch is differentiated again `lag` steps later, within the run."""
        return [s for s in self.probe_steps if s + self.lag < self.steps]

    @property
    def gradients(self) -> int:
        return len(self.probe_steps) * self.buffer + len(self.rho_steps) * self.batch

    def describe(self) -> str:
        probes = self.probe_steps
        at = (
            f"steps {probes[0]}, {probes[1]}, ..., {probes[-1]}"
            if len(probes) > 2
            else "step " + " and ".join(map(str, probes))
        )
        return (
            f"probe: {self.steps} steps; every age in the buffer from step {self.start}; {len(probes)} probes ({at}) of"
            f" {self.buffer} rollout gradients each, and rho on {len(self.rho_steps)} batches of {self.batch}"
            f" {self.lag} steps later: {self.gradients} gradients of one rollout in all"
        )


class _Probe:
    """The `inspect` hook of `run_trial`: per-rollout gradients at the probe steps, and again `lag` steps later.
    Progress: a bar per probe on a terminal (`show_progress`), else a line at most every `progress.LINE_EVERY_S`."""

    def __init__(self, cfg: TrialConfig, plan: ProbePlan, sketch: int, show_progress: bool = False):
        self.cfg, self.plan, self.k, self.show_progress = cfg, plan, sketch, show_progress
        self.start, self.every, self.lag = plan.start, plan.every, plan.lag
        self.sketch: rollout_gradients.Sketch | None = None
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending: dict[int, tuple[list[Rollout], np.ndarray]] = {}
        self.reuse: list[float] = []
        self.last_line = time.monotonic()

    def gradients(self, policy: Policy, rollouts: list[Rollout], what: str) -> np.ndarray:
        if self.sketch is None:
            params = [p for p in policy.model.parameters() if p.requires_grad]
            idx, sign = noise.count_sketch(
                sum(p.numel() for p in params), self.k, seed=seeds.probe_sketch(self.cfg.seed)
            )
            device = params[0].device
            self.sketch = torch.from_numpy(idx).to(device), torch.from_numpy(sign).to(device), self.k
        with progress.Ticker(len(rollouts), what, "rollout gradients", self.show_progress, log) as ticker:
            out = rollout_gradients.sketched_gradients(policy, rollouts, self.cfg, self.sketch, ticker.update)
        self.last_line = time.monotonic()
        return out

    def __call__(self, step: int, batch: list[Rollout], held: list[Rollout], policy: Policy) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if step in self.pending:
            rollouts, before = self.pending.pop(step)
            again = self.gradients(policy, rollouts, f"probe: step {step}, rho (the batch of step {step - self.lag})")
            self.reuse.append(noise.reuse_correlation(before, again))
            metrics["probe/reuse_correlation"] = self.reuse[-1]
        if step >= self.start and (step - self.start) % self.every == 0:
            # The whole buffer (every age x R times) when the strategy exposes it: a batch holds only B/x of each.
            rollouts = held or batch
            which = f"probe {len(self.samples) + 1}/{len(self.plan.probe_steps)} (step {step})"
            g = self.gradients(policy, rollouts, f"{which}, the whole buffer")
            ages = np.array([r.age(step) for r in rollouts])
            self.samples.append((g, ages, np.array([r.group for r in rollouts])))
            in_batch = {r.uid for r in batch}
            rows = [
                i for i, r in enumerate(rollouts) if r.uid in in_batch
            ]  # rho on the batch: the rollouts being reused
            self.pending[step + self.lag] = ([rollouts[i] for i in rows], g[rows])
            fresh = [a for a in noise.noise_by_age(g, ages, min_count=2) if a.age == 0]
            if fresh:
                metrics["probe/sigma2_age0"] = fresh[0].sigma2
        elif not self.show_progress and time.monotonic() - self.last_line >= progress.LINE_EVERY_S:
            self.last_line = time.monotonic()
            log.info(
                f"probe: step {step}/{self.plan.steps}"
                + (f", first probe at step {self.start}" if step < self.start else "")
            )
        return metrics


def _pooled(samples) -> tuple[list[noise.AgeNoise], dict[int, float], list[dict]]:
    """sigma²(tau) pooled over probe steps (each step centred on its own means: the mean gradient moves), kappa and
    the horizon terms averaged over them."""
    by_age: dict[int, list[noise.AgeNoise]] = {}
    kappas: dict[int, list[float]] = {}
    for g, ages, _ in samples:
        per = noise.noise_by_age(g, ages, min_count=2)
        for a in per:
            by_age.setdefault(a.age, []).append(a)
        for age, k in noise.staleness_bias(per).items():
            kappas.setdefault(age, []).append(k)
    pooled = []
    for age, parts in sorted(by_age.items()):
        n = sum(p.n for p in parts)
        sigma2 = sum(p.n * p.sigma2 for p in parts) / n
        se = math.sqrt(sum((p.n * p.se) ** 2 for p in parts)) / n
        pooled.append(noise.AgeNoise(age, n, sigma2, se, np.zeros(0)))
    return pooled, {age: float(np.mean(v)) for age, v in sorted(kappas.items())}, _horizon(samples)


def record(res: ProbeResult, uri: str, predicted: ProbePrediction) -> dict:
    """Log a probe's measurements and prediction to its MLflow run (`probe/*` metrics and `probe/probe.json`);
    returns what was logged (the summary without the bootstrap draws, with `predicted` as its JSON)."""
    out = res.summary()
    out.pop("horizon_draws")
    out.update(predicted=predicted.to_json())  # as JSON: the log and `workbench probe --json` print it
    client = tracking.client(uri)
    for key in ("mu", "group_correlation", "rho"):
        client.log_metric(res.run_id, f"probe/{key}", float(out[key]))
    for key in ("alpha", "tau0", "sigma0_sq"):
        if res.growth:
            client.log_metric(res.run_id, f"probe/{key}", float(res.growth[key]))
    client.log_dict(res.run_id, json.loads(json.dumps(out, default=float)), "probe/probe.json")
    return out


def _horizon(samples, resample=None) -> list[dict]:
    """The horizon terms averaged over probes; `resample(ages, groups)` picks the rows of each probe to use."""
    horizon: dict[int, list[noise.HorizonTerms]] = {}
    for g, ages, groups in samples:
        rows = resample(ages, groups) if resample else slice(None)
        for t in noise.horizon_terms(noise.noise_by_age(g[rows], ages[rows], min_count=2)):
            horizon.setdefault(t.x, []).append(t)
    return [
        {"x": x, **{k: float(np.mean([getattr(t, k) for t in ts])) for k in ("sigma2_bar", "signal", "mixed", "cross")}}
        for x, ts in sorted(horizon.items())
        if len(ts) == len(samples)
    ]


def _horizon_draws(samples, draws: int, seed: int) -> list[list[dict]]:
    """`draws` bootstrap replicates of the horizon terms: per probe and age, the groups resampled with replacement."""
    rng = np.random.default_rng(seed)

    def resample(ages, groups):
        rows = []
        for age in np.unique(ages):
            members = {gid: np.flatnonzero((ages == age) & (groups == gid)) for gid in np.unique(groups[ages == age])}
            keys = list(members)
            rows += [members[keys[i]] for i in rng.integers(0, len(keys), len(keys))]
        return np.concatenate(rows)

    return [_horizon(samples, resample) for _ in range(draws)]


def probe_plan(
    cfg: TrialConfig, every: int = DEFAULTS["every"], lag: int | None = DEFAULTS["lag"], start: int | None = None
) -> ProbePlan:
    """The probe steps of `cfg`'s run: from when the buffer holds every age (filled, then x steps of ages), every
    `every` steps; rho `lag` steps later (default x/y, the mean gap between two uses of a rollout)."""
    fill_steps = math.ceil(cfg.replay.capacity / cfg.batch_size)
    horizon = knobs.age_limit(_staleness(cfg))
    start = fill_steps + horizon if start is None else start
    lag = max(1, round(cfg.replay.capacity / cfg.batch_size)) if lag is None else lag  # x/y: N/R · R/B = N/B
    return ProbePlan(cfg.budget.steps, start, every, lag, cfg.replay.capacity, cfg.batch_size)


def _staleness(cfg: TrialConfig) -> float:
    """The probe trial's x = N/R (`workbench.knobs`)."""
    return knobs.staleness(cfg.replay.capacity, cfg.replay.ratio, cfg.batch_size)


def run_probe(
    cfg: TrialConfig,
    every: int = DEFAULTS["every"],
    lag: int | None = DEFAULTS["lag"],
    sketch: int = DEFAULTS["sketch"],
    start: int | None = None,
    draws: int = 50,
    show_progress: bool = False,
    **run_kwargs,
) -> tuple[ProbeResult, TrialResult]:
    """Run the probe's trial (`probe_config`) and read the model's parameters from it (`draws` bootstrap replicates
    of the horizon terms). Progress on the log (and bars with `show_progress`), phase by phase."""
    plan = probe_plan(cfg, every, lag, start)
    start, lag = plan.start, plan.lag
    if plan.probe_steps:
        log.info(plan.describe())
    hook = _Probe(cfg, plan, sketch, show_progress)
    result = run_trial(cfg, inspect=hook, show_progress=show_progress, **run_kwargs)
    if not hook.samples:
        raise ValueError(
            f"steps: the probe needs more than {start} steps to see every age of its buffer (got {cfg.budget.steps})"
        )
    t0 = time.monotonic()
    log.info(
        f"probe: reading sigma²(tau), kappa, the within-group correlation, rho and {draws} bootstrap resamples of the horizon terms from"
        f" {len(hook.samples)} probes"
    )
    pooled, kappa, terms = _pooled(hook.samples)
    try:
        growth = noise.fit_noise_growth(pooled)
    except ValueError as err:
        log.warning(f"probe: no noise-growth fit ({err})")
        growth = None
    group_correlation = float(np.nanmean([noise.within_group_correlation(g, groups) for g, _, groups in hook.samples]))
    m = result.metrics
    out = ProbeResult(
        run_id=result.run_id,
        mu=float(m.get(tracking.FINAL_MU_MEASURED, math.nan)),
        x=_staleness(cfg),
        y=cfg.replay.ratio,
        steps=int(m.get("final/steps", 0)),
        compute_units=float(m.get(tracking.FINAL_COMPUTE_UNITS, math.nan)),
        probes=len(hook.samples),
        noise=[{"age": a.age, "n": a.n, "sigma2": a.sigma2, "se": a.se} for a in pooled],
        growth=asdict(growth) if growth else {},
        kappa=kappa,
        horizon=terms,
        horizon_draws=_horizon_draws(hook.samples, draws, seeds.probe_bootstrap(cfg.seed)),
        group_correlation=group_correlation,
        rho=float(np.mean(hook.reuse)) if hook.reuse else math.nan,
        rho_lag=lag,
    )
    log.info(
        f"probe: read in {time.monotonic() - t0:.1f} s: {out.probes} probes, ages {pooled[0].age}-{pooled[-1].age}, rho {out.rho:.3f},"
        f" within-group correlation {group_correlation:.3f}, mu {out.mu:.3f}"
    )
    return out, result
