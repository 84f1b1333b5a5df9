"""Probe: one short replay run measured (`workbench.trial.probe`), the optimum its measurements predict
(`analysis.models.probe_prediction`), and the on-policy learning-rate sweep that prices it (`workbench.trial.lr_sweep`,
`analysis.models.probe_lr`). `workbench probe` runs it on any trial config; `study verify --probe` on a study's
(`workbench.workflow.verify.probe_study`).

The probe's cost is its gradient phase and its sweep together; its prediction is held against the null it
contains (`analysis.null_models.probe_against_sweep`: sweep on-policy's lr and stay on-policy, at equal compute), and
where its point is the sweep's own answer or does not beat it, it claims nothing beyond its lr sweep (`claim_line`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from workbench import knobs
from workbench.config import TrialConfig
from workbench.prediction import AgainstSweep, ProbePrediction, SweepPoint
from workbench.trial.lr_sweep import run_lr_sweep
from workbench.trial.probe import ProbeResult, probe_config, record, run_probe

from analysis.models import probe_lr, probe_prediction
from analysis.null_models import probe_against_sweep

log = logging.getLogger(__name__)


@dataclass
class Probed:
    """A probe run and what it predicts."""

    config: TrialConfig
    """The probe trial's config (`probe_config`)."""
    measured: ProbeResult
    """What the run measured (mu, sigma²(tau), kappa, the within-group correlation, rho, the horizon terms and their bootstrap draws)."""
    run_id: str
    """The probe trial's MLflow run."""
    predicted: ProbePrediction
    """The predicted optimum (`analysis.models.probe_lr`: x, y, relative compute, lr and its source, the sweep), with
    the capacity it runs at and how it fares against its sweep alone; or `refused` and why."""
    recorded: dict[str, Any]
    """What was logged to the probe's MLflow run (`workbench.trial.probe.record`), as JSON."""

    @property
    def against_sweep(self) -> AgainstSweep | None:
        """The prediction against its sweep alone at equal compute (`analysis.null_models.probe_against_sweep`)."""
        return self.predicted.against_sweep

    @property
    def units(self) -> float:
        """The probe's cost in compute units: its gradient phase and its lr sweep's runs."""
        return self.measured.compute_units + sweep_units(self.predicted.lr_sweep)

    def alignment(self, horizons=(1, 2, 4, 8, 16, 32, 64)) -> list[tuple[int, float, tuple[float, float] | None]]:
        """At each of `horizons` the probe measured, g_0·g_bar_x / |g_0|² (how much of a horizon-x batch's mean
        gradient points along the fresh one) with its 95% interval over the resampled groups (None from fewer than
        two draws); empty when the fresh gradient's signal is not positive."""
        terms, draws = self.measured.horizon, self.measured.horizon_draws
        if not terms or terms[0]["signal"] <= 0:
            return []
        out = []
        for t in (t for t in terms if t["x"] in horizons):
            x = t["x"]
            shares = [d[x - 1]["cross"] / d[0]["signal"] for d in draws if len(d) >= x and d[0]["signal"] > 0]
            iv = (float(np.quantile(shares, 0.025)), float(np.quantile(shares, 0.975))) if len(shares) > 1 else None
            out.append((x, t["cross"] / terms[0]["signal"], iv))
        return out


def sweep_units(sweep: Sequence[SweepPoint] | None) -> float:
    """The compute units an on-policy lr sweep's runs were given (each run's budget)."""
    return float(sum(p.budget for p in sweep or []))


def against_sweep(predicted: ProbePrediction, gradient_units: float) -> ProbePrediction:
    """`predicted` (`analysis.models.probe_lr`'s, with its sweep where one ran) with `against_sweep`: whether its point
    beats on-policy at the sweep's lr* once the probe's gradient phase (`gradient_units`) is paid
    (`analysis.null_models.probe_against_sweep`, which reads the prediction's JSON)."""
    against = probe_against_sweep(predicted.to_json(), gradient_units)
    return replace(predicted, against_sweep=AgainstSweep.from_json(against))


def cost_words(gradient_units: float, sweep: Sequence[SweepPoint] | None) -> str:
    """The probe's cost in words: its gradient phase's compute units, and with a sweep the sweep's and the sum (a
    prediction priced by the sweep costs both)."""
    if not sweep:
        return f"{gradient_units:.1f} compute units"
    s = sweep_units(sweep)
    return (
        f"{gradient_units:.1f} compute units of gradient phase + {s:.1f} of its {len(sweep)}-run on-policy lr sweep"
        f" = {gradient_units + s:.1f} in all"
    )


def claim_line(against: AgainstSweep) -> str:
    """One line: what the probe claims against its null (`against_sweep`'s verdict, `AgainstSweep.lines`)."""
    return against.lines()[0]


def lr_sweep(
    overrides: dict[str, Any], target: float, mu: float, budget: float, threads: int | None = None
) -> list[SweepPoint]:
    """The on-policy learning-rate sweep of the trial `overrides` describes (`workbench.trial.lr_sweep`), each run read
    to `target` at `mu`."""
    data = {**overrides, **({"threads": threads} if threads else {})}
    return run_lr_sweep(data, target, mu, budget, show_progress=False)


def probe(
    overrides: dict[str, Any],
    *,
    x: float,
    ratio: float,
    steps: int,
    every: int,
    lag: int | None,
    sketch: int,
    sweep_target: float | None = None,
    sweep_units: float,
    threads: int | None = None,
    show_progress: bool = False,
) -> Probed:
    """Run the probe's trial on `overrides` (a nested config dict) at (x, ratio) for `steps` steps and predict the
    optimum at the mu it measured; with `sweep_target`, the on-policy learning-rate sweep (its first run `sweep_units`
    compute units) sets the prediction's learning rate and compute."""
    cfg = probe_config(overrides, x=x, ratio=ratio, steps=steps)
    res, result = run_probe(cfg, every=every, lag=lag, sketch=sketch, show_progress=show_progress)
    predicted = probe_prediction(
        res.horizon, res.horizon_draws, res.group_correlation, res.rho, res.mu, cfg.group_size, cfg.batch_size
    )
    sweep = None
    if sweep_target is not None:
        log.info(
            f"probe: the on-policy learning-rate sweep: runs at lr x 1, 2, 4 (up to 6), the first for {sweep_units:g}"
            " compute units, each reported as it ends"
        )
        sweep = lr_sweep(overrides, sweep_target, res.mu, sweep_units, threads)
    predicted = probe_lr(predicted, sweep, cfg.lr)
    if predicted.has_point:
        capacity = knobs.capacity(predicted.x, predicted.y, cfg.batch_size)
        predicted = replace(predicted, capacity=capacity, ratio=predicted.y)
    predicted = against_sweep(predicted, res.compute_units)
    return Probed(cfg, res, result.run_id, predicted, record(res, cfg.tracking.uri, predicted))
