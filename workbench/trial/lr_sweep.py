"""The probe's learning-rate sweep: short on-policy runs at a few learning rates, each read as compute to a target.

The probe's gradients say how replay changes the noise and bias of a step *relative* to on-policy at a re-tuned
learning rate; they cannot say what on-policy's best learning rate is. A trial's learning rate sets the scale of
every prediction (docs/theory.md, "The probe"; regime B: at a fixed learning rate the compute to target grows without bound as
the effective noise nears its floor), so the probe measures it directly: on-policy runs at lr x 1, 2, 4 (the trial's
lr), extended by doubling or halving while the cheapest run is at an edge of the sweep, each stopped at a budget
just above the best so far (a run that needs more than that is not the optimum, and is recorded censored).
Each run is a `workbench.prediction.SweepPoint`, the type the probe's prediction holds its sweep as;
`analysis.models.lr_optimum` locates the best learning rate from these points.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from workbench.compute import units
from workbench.config import TrialConfig, build_config
from workbench.estimators import DEFAULT_ESTIMATOR, curve_summary, readings
from workbench.prediction import SweepPoint
from workbench.trial.loop import run_trial

log = logging.getLogger(__name__)

FACTORS = (1.0, 2.0, 4.0)
MAX_POINTS = 6
HEADROOM = 1.5
"""A later run's budget: HEADROOM x the cheapest compute to target so far (the first run's: the trial's budget)."""


def on_policy_config(overrides: dict[str, Any], lr: float, budget: float) -> TrialConfig:
    """`overrides` (a nested config dict) as an on-policy trial (uniform, y 1, a buffer of one batch) at `lr`,
    stopped after `budget` compute units."""
    base = build_config(overrides)
    data = {**overrides, "lr": lr, "budget": {"compute_units": budget, "steps": None}}
    data["replay"] = {
        **overrides.get("replay", {}),
        "strategy": "uniform",
        "ratio": 1,
        "capacity": base.batch_size,
        "horizon": None,
    }
    return build_config(data)


def _next_lr(points: list[SweepPoint]) -> float | None:
    """The next learning rate to try: double the largest (halve the smallest) while the cheapest run to the target
    is the sweep's largest (smallest) learning rate; None once the cheapest is inside the sweep or none reached it."""
    if len(points) >= MAX_POINTS:
        return None
    reached = [p for p in points if not p.censored]
    if not reached:
        return None
    lrs = sorted(p.lr for p in points)
    best = min(reached, key=lambda p: p.compute_to_target).lr
    if best == lrs[-1]:
        return lrs[-1] * 2.0
    if best == lrs[0]:
        return lrs[0] / 2.0
    return None


def run_lr_sweep(
    overrides: dict[str, Any],
    target: float,
    mu: float,
    budget: float,
    factors=FACTORS,
    estimator: str = DEFAULT_ESTIMATOR,
    **run_kwargs,
) -> list[SweepPoint]:
    """On-policy runs of the trial `overrides` describes at its lr x `factors`, then extended (`_next_lr`); each
    read as compute to `target` on the trial's `eval.metric`, accounted at `mu`. The first run gets `budget`
    compute units, later ones HEADROOM x the cheapest so far (at most `budget`)."""
    lr0 = build_config(overrides).lr
    queue = [lr0 * f for f in factors]
    points: list[SweepPoint] = []
    while queue:
        lr = queue.pop(0)
        reached = [p.compute_to_target for p in points if not p.censored]
        cap = min(budget, math.ceil(HEADROOM * min(reached))) if reached else budget
        cfg = on_policy_config(overrides, lr, cap)
        result = run_trial(cfg, **run_kwargs)
        spent = [units(e["train_rollouts"], e["gen_rollouts"], cfg.batch_size, mu) for e in result.evals]
        curve = curve_summary(spent, readings(result.evals, cfg.eval.metric), target, cap)
        point = SweepPoint(
            lr,
            float(curve[f"compute_to_target_{estimator}"]),
            bool(curve[f"censored_{estimator}"]),
            float(cap),
            result.run_id,
        )
        points.append(point)
        log.info(
            f"lr sweep: lr {lr:.3g}: {'more than' if point.censored else ''} {point.compute_to_target:.3g} units to {target:g}"
            f" (budget {cap:g})"
        )
        if not queue and (nxt := _next_lr(points)) is not None:
            queue.append(nxt)
    return sorted(points, key=lambda p: p.lr)
