"""The probe: one short replay run that measures the model's parameters instead of fitting them to a sweep (issue
13; replay-papers §6.3).

A uniform replay trial with a large buffer (default x 16, y 2, filled at B per step) runs for a few dozen steps.
From the step after which the buffer holds every age up to x, every `every` steps the probe takes the whole buffer
(R rollouts of each age) and computes each rollout's gradient of the trial's own objective at the current
parameters (CountSketch-compressed, `workbench.noise.count_sketch`, so the memory does not depend on the model's
size), then `lag` steps later the gradients of that step's batch again. From these:

- sigma²(tau): the per-rollout gradient noise by age (`noise_by_age`, pooled over probe steps), and the shifted
  power law fitted to it (alpha, tau0; F6: non-decreasing with age);
- kappa(tau): the staleness bias, |mean gradient at age tau - at age 0| / |mean at age 0|, and per horizon x the
  terms the prediction needs (`noise.horizon_terms`: the mean gradient over ages 0..x-1, its norm and its
  projection on the fresh one, averaged over probes);
- gamma: the within-group correlation of centred gradients;
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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from workbench import noise, tracking
from workbench.config import TrialConfig, build_config
from workbench.trial.loop import TrialResult, run_trial
from workbench.trial.objectives import OBJECTIVES
from workbench.trial.policy import Policy
from workbench.trial.replay import Rollout
from workbench.trial.step import objective_input

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"x": 16, "ratio": 2, "steps": 48, "every": 4, "lag": None, "sketch": 2048}
"""x 16, y 2: a buffer of 16 ages, 64 rollouts of each at B 128; 48 steps: 8 to fill the buffer, 16 for the ages to
spread, then probes at 24, 28, ..., 44 (6 probes, ~380 rollouts of each age; rho from those whose batch is seen
again before the run ends); lag None: x/y steps, the mean gap between two uses of a rollout."""


def probe_config(overrides: dict[str, Any] | None = None, x: float = DEFAULTS["x"], ratio: float = DEFAULTS["ratio"],
                 steps: int = DEFAULTS["steps"]) -> TrialConfig:
    """The probe's trial: uniform replay at (x, y) with the buffer filled at B per step, a step budget, and
    whatever else `overrides` sets (a nested config dict, validated as any trial's)."""
    base = build_config(overrides or {})
    fresh = base.batch_size / ratio
    data = {**(overrides or {})}
    data["replay"] = {**data.get("replay", {}), "strategy": "uniform", "ratio": ratio, "capacity": max(base.batch_size, round(x * fresh)),
                      "warmup": "fill", "horizon": None}
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
    gamma: float = math.nan
    rho: float = math.nan
    rho_lag: int = 1

    def summary(self) -> dict:
        return asdict(self)


class _Probe:
    """The `inspect` hook of `run_trial`: per-rollout gradients at the probe steps, and again `lag` steps later."""

    def __init__(self, cfg: TrialConfig, start: int, every: int, lag: int, sketch: int):
        self.cfg, self.start, self.every, self.lag, self.k = cfg, start, every, lag, sketch
        self.sketch: tuple[torch.Tensor, torch.Tensor] | None = None
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending: dict[int, tuple[list[Rollout], np.ndarray]] = {}
        self.reuse: list[float] = []

    def gradients(self, policy: Policy, rollouts: list[Rollout]) -> np.ndarray:
        params = [p for p in policy.model.parameters() if p.requires_grad]
        if self.sketch is None:
            idx, sign = noise.count_sketch(sum(p.numel() for p in params), self.k, seed=self.cfg.seed)
            self.sketch = torch.from_numpy(idx).to(params[0].device), torch.from_numpy(sign).to(params[0].device)
        idx, sign = self.sketch
        cap = self.cfg.generation.mismatch_cap if self.cfg.generation.mismatch_correction == "importance_sampling" else None
        was_training = policy.model.training
        policy.model.eval()  # no dropout draws: the trial's random stream is the unprobed run's
        out = np.empty((len(rollouts), self.k), dtype=np.float64)
        try:
            for i, r in enumerate(rollouts):
                loss = OBJECTIVES[self.cfg.objective.name](objective_input(policy, [r], cap), self.cfg.objective).loss
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
                out[i] = torch.zeros(self.k, dtype=flat.dtype, device=flat.device).index_add_(0, idx, flat * sign).double().cpu().numpy()
        finally:
            policy.model.train(was_training)
        return out

    def __call__(self, step: int, batch: list[Rollout], held: list[Rollout], policy: Policy) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if step in self.pending:
            rollouts, before = self.pending.pop(step)
            self.reuse.append(noise.reuse_correlation(before, self.gradients(policy, rollouts)))
            metrics["probe/reuse_correlation"] = self.reuse[-1]
        if step >= self.start and (step - self.start) % self.every == 0:
            # The whole buffer (every age x R times) when the strategy exposes it: a batch holds only B/x of each.
            rollouts = held or batch
            g = self.gradients(policy, rollouts)
            ages = np.array([r.age(step) for r in rollouts])
            self.samples.append((g, ages, np.array([r.group for r in rollouts])))
            in_batch = {r.uid for r in batch}
            rows = [i for i, r in enumerate(rollouts) if r.uid in in_batch]  # rho on the batch: the rollouts being reused
            self.pending[step + self.lag] = ([rollouts[i] for i in rows], g[rows])
            fresh = [a for a in noise.noise_by_age(g, ages, min_count=2) if a.age == 0]
            if fresh:
                metrics["probe/sigma2_age0"] = fresh[0].sigma2
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


def record(res: ProbeResult, uri: str, predicted: dict) -> dict:
    """Log a probe's measurements and prediction to its MLflow run (`probe/*` metrics and `probe/probe.json`);
    returns what was logged (the summary without the bootstrap draws, with `predicted`)."""
    out = res.summary()
    out.pop("horizon_draws")
    out["predicted"] = predicted
    client = tracking.client(uri)
    for key in ("mu", "gamma", "rho"):
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
    return [{"x": x, **{k: float(np.mean([getattr(t, k) for t in ts])) for k in ("sigma2_bar", "signal", "mixed", "cross")}}
            for x, ts in sorted(horizon.items()) if len(ts) == len(samples)]


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


def run_probe(cfg: TrialConfig, every: int = DEFAULTS["every"], lag: int | None = DEFAULTS["lag"], sketch: int = DEFAULTS["sketch"],
              start: int | None = None, draws: int = 50, **run_kwargs) -> tuple[ProbeResult, TrialResult]:
    """Run the probe's trial (`probe_config`) and read the model's parameters from it (`draws` bootstrap replicates
    of the horizon terms)."""
    fill_steps = math.ceil(cfg.replay.capacity / cfg.batch_size)
    horizon = math.ceil(cfg.replay.capacity / cfg.fresh_per_step)
    start = fill_steps + horizon if start is None else start
    lag = max(1, round(cfg.replay.capacity / cfg.batch_size)) if lag is None else lag  # x/y: N/R · R/B = N/B
    hook = _Probe(cfg, start, every, lag, sketch)
    result = run_trial(cfg, inspect=hook, **run_kwargs)
    if not hook.samples:
        raise ValueError(f"steps: the probe needs more than {start} steps to see every age of its buffer (got {cfg.budget.steps})")
    pooled, kappa, terms = _pooled(hook.samples)
    try:
        growth = noise.fit_noise_growth(pooled)
    except ValueError as err:
        log.warning(f"probe: no noise-growth fit ({err})")
        growth = None
    gamma = float(np.nanmean([noise.within_group_correlation(g, groups) for g, _, groups in hook.samples]))
    m = result.metrics
    out = ProbeResult(
        run_id=result.run_id, mu=float(m.get(tracking.FINAL_MU_MEASURED, math.nan)), x=cfg.replay.capacity / cfg.fresh_per_step,
        y=cfg.replay.ratio, steps=int(m.get("final/steps", 0)), compute_units=float(m.get(tracking.FINAL_COMPUTE_UNITS, math.nan)),
        probes=len(hook.samples), noise=[{"age": a.age, "n": a.n, "sigma2": a.sigma2, "se": a.se} for a in pooled],
        growth=asdict(growth) if growth else {}, kappa=kappa, horizon=terms, horizon_draws=_horizon_draws(hook.samples, draws, cfg.seed),
        gamma=gamma,
        rho=float(np.mean(hook.reuse)) if hook.reuse else math.nan, rho_lag=lag,
    )
    log.info(f"probe: {out.probes} probes, ages {pooled[0].age}-{pooled[-1].age}, rho {out.rho:.3f}, gamma {gamma:.3f}, mu {out.mu:.3f}")
    return out, result
