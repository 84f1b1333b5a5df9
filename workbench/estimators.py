"""Compute-to-target estimators and curve summaries: one run's accuracy-versus-compute curve in, numbers out.

A run is a curve of held-out evaluations (compute spent, accuracy). "When did it reach the target?" has several
answers, and they differ in how much the evaluation-to-evaluation jitter of greedy accuracy moves them:

- `first`: compute at the first evaluation at or above the target (a first-passage time: biased early, and an arm
  evaluated more often per unit of compute gets more chances to cross);
- `interpolated`: the linear crossing between that evaluation and the one before it; the true crossing lies between
  the two evaluations, so fits treat it (and `first`) as interval-censored (`ToTarget.low` .. `ToTarget.high`);
- `sustained`: the crossing of a moving average (`SMOOTH_WINDOW` evaluations) after which the moving average stays
  at or above the target to the end of the run;
- `fitted`: the crossing of a saturating curve fitted to the whole run, acc(C) = R0 + (A - R0) / (1 + (C_mid/C)^b)
  (the sigmoid ScaleRL fits to pass rate against compute, Khatri et al. 2025), R0 the accuracy at C = 0; censored
  when the fitted asymptote A stays below the target or the crossing lies beyond the compute the run spent.

A run that never reaches the target is censored: its value is `censored_value` (the penalised total the study's
samplers rank by) and `total` is the bound fits use. Torch-free; the trial logs every estimator (`final/*`), a
study selects one as its objective, the analysis reads them back.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from workbench.compute import ToTarget, censored_value, to_target

SMOOTH_WINDOW = 5
"""Evaluations in the centred moving average of `sustained` (and of the accuracy read at budget fractions)."""
BUDGET_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
"""Where along the budget accuracy is read (`final/accuracy_at_50pct`, ...)."""
MIN_GAIN = 0.02
"""`auto_target` needs the baseline to gain at least this much accuracy over its budget."""


@dataclass(frozen=True)
class Sigmoid:
    """acc(C) = r0 + (asymptote - r0) / (1 + (midpoint / C)^slope): a saturating curve in log compute."""

    r0: float
    asymptote: float
    midpoint: float
    slope: float
    rmse: float
    """Root-mean-square residual of the fit (accuracy)."""

    def __call__(self, compute):
        c = np.maximum(np.asarray(compute, dtype=float), 1e-12)
        return self.r0 + (self.asymptote - self.r0) / (1.0 + (self.midpoint / c) ** self.slope)

    def inverse(self, accuracy: float) -> float:
        """Compute at which the curve reaches `accuracy`: 0 at or below r0, inf at or above the asymptote."""
        if accuracy <= self.r0:
            return 0.0
        if accuracy >= self.asymptote:
            return math.inf
        return self.midpoint * ((self.asymptote - self.r0) / (accuracy - self.r0) - 1.0) ** (-1.0 / self.slope)


METRICS = {
    "accuracy": "held-out accuracy (greedy pass@1)",
    "demo_prob": "probability of the held-out demonstrations",
    "mean_at_k": "held-out mean@k (sampled accuracy)",
}
"""The held-out curves an evaluation logs that compute-to-target can read (`eval.metric`), with their labels."""


def readings(evals: Sequence[dict], metric: str = "accuracy") -> list[float]:
    """The values of `metric` along a run's evaluations (rows of `eval/curve.json`)."""
    if metric not in METRICS:
        raise ValueError(f"metric: must be one of {', '.join(METRICS)}, got {metric!r}")
    values = [e.get(metric) for e in evals]
    if any(v is None for v in values):
        raise ValueError(f"metric: {metric} is missing at some evaluations of this run")
    return [float(v) for v in values]


def _arrays(spent: Sequence[float], accuracy: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    c, a = np.asarray(spent, dtype=float), np.asarray(accuracy, dtype=float)
    if c.ndim != 1 or c.shape != a.shape or len(c) == 0:
        raise ValueError("spent and accuracy must be 1-d sequences of the same, non-zero length")
    if np.any(np.diff(c) < 0):
        raise ValueError("spent must be non-decreasing (evaluations in order)")
    return c, a


def _censored(c: np.ndarray, a: np.ndarray, target: float) -> ToTarget:
    total = float(c[-1])
    return ToTarget(censored_value(total, float(a.max()), target), True, total, total, total)


def first(spent: Sequence[float], accuracy: Sequence[float], target: float) -> ToTarget:
    """Compute at the first evaluation at or above `target` (`compute.to_target`)."""
    c, a = _arrays(spent, accuracy)
    return to_target(c, a, target)


def _crossing(c: np.ndarray, a: np.ndarray, i: int, target: float) -> float:
    """Linear interpolation of the crossing of `target` between evaluations i - 1 (below) and i (at or above)."""
    if i == 0:
        return float(c[0])
    rise = a[i] - a[i - 1]
    frac = (target - a[i - 1]) / rise if rise > 0 else 1.0
    return float(c[i - 1] + min(max(frac, 0.0), 1.0) * (c[i] - c[i - 1]))


def interpolated(spent: Sequence[float], accuracy: Sequence[float], target: float) -> ToTarget:
    """The linear crossing between the first evaluation at or above `target` and the one before it."""
    c, a = _arrays(spent, accuracy)
    hits = np.flatnonzero(a >= target)
    if not len(hits):
        return _censored(c, a, target)
    i = int(hits[0])
    return ToTarget(_crossing(c, a, i, target), False, float(c[-1]), float(c[i - 1]) if i else float(c[0]), float(c[i]))


def smooth(accuracy: Sequence[float], window: int = SMOOTH_WINDOW) -> np.ndarray:
    """Centred moving average; the window shrinks (stays centred) at the ends, so the first and last points stay."""
    a = np.asarray(accuracy, dtype=float)
    half = window // 2
    out = np.empty_like(a)
    for i in range(len(a)):
        h = min(half, i, len(a) - 1 - i)
        out[i] = a[i - h : i + h + 1].mean()
    return out


def sustained(spent: Sequence[float], accuracy: Sequence[float], target: float) -> ToTarget:
    """The crossing of the moving average after which it stays at or above `target` to the end of the run."""
    c, a = _arrays(spent, accuracy)
    s = smooth(a)
    below = np.flatnonzero(s < target)
    if not len(below):
        return ToTarget(float(c[0]), False, float(c[-1]), float(c[0]), float(c[0]))
    i = int(below[-1]) + 1
    if i >= len(c):
        return _censored(c, a, target)
    value = _crossing(c, s, i, target)
    return ToTarget(value, False, float(c[-1]), value, value)


def fit_sigmoid(spent: Sequence[float], accuracy: Sequence[float]) -> Sigmoid | None:
    """Least-squares fit of `Sigmoid` to one run, r0 fixed at the accuracy at the first evaluation; None if the
    curve has too few points or the fit fails. Several starting midpoints; the best residual wins."""
    from scipy.optimize import OptimizeWarning, curve_fit  # here, not at import: a trial starts without scipy

    c, a = _arrays(spent, accuracy)
    r0 = float(a[0])
    keep = c > 0
    if keep.sum() < 4:
        return None
    x, y = c[keep], a[keep]

    def model(x, asymptote, log_mid, slope):
        return r0 + (asymptote - r0) / (1.0 + np.exp(slope * (log_mid - np.log(x))))

    lo_a = min(r0, float(y.min())) + 1e-6
    bounds = ([lo_a, math.log(x.min()) - 3.0, 0.2], [1.0, math.log(x.max()) + 3.0, 12.0])
    best: tuple[float, np.ndarray] | None = None
    a0 = min(max(float(y[-max(1, len(y) // 4) :].mean()), lo_a + 1e-3), 1.0 - 1e-6)
    for q in (0.1, 0.3, 0.6):
        p0 = [a0, math.log(float(np.quantile(x, q))), 2.0]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, _ = curve_fit(model, x, y, p0=p0, bounds=bounds, maxfev=4000)
        except (RuntimeError, ValueError):
            continue
        sse = float(np.sum((model(x, *popt) - y) ** 2))
        if best is None or sse < best[0]:
            best = (sse, popt)
    if best is None:
        return None
    sse, (asymptote, log_mid, slope) = best
    return Sigmoid(r0, float(asymptote), float(math.exp(log_mid)), float(slope), math.sqrt(sse / len(y)))


def fitted(spent: Sequence[float], accuracy: Sequence[float], target: float, fit: Sigmoid | None = None) -> ToTarget:
    """The fitted curve's crossing of `target`; censored when its asymptote stays below the target or the crossing
    lies beyond the compute the run spent (an extrapolation is not a measurement). Falls back to `interpolated`
    when no curve can be fitted (too few evaluations)."""
    c, a = _arrays(spent, accuracy)
    fit = fit or fit_sigmoid(c, a)
    if fit is None:
        return interpolated(c, a, target)
    value = fit.inverse(target)
    if value > c[-1]:
        return _censored(c, a, target)
    return ToTarget(value, False, float(c[-1]), value, value)


ESTIMATORS: dict[str, Callable[..., ToTarget]] = {
    "first": first,
    "interpolated": interpolated,
    "sustained": sustained,
    "fitted": fitted,
}
"""Every compute-to-target estimator by name (a study's `estimator`)."""
DEFAULT_ESTIMATOR = "fitted"
"""Chosen by measured resolution: see docs/measurement.md."""


def estimate(
    spent: Sequence[float], accuracy: Sequence[float], target: float, fit: Sigmoid | None = None
) -> dict[str, ToTarget]:
    """Every estimator on one curve (the sigmoid fitted once)."""
    fit = fit or fit_sigmoid(spent, accuracy)
    return {
        name: (fitted(spent, accuracy, target, fit) if name == "fitted" else f(spent, accuracy, target))
        for name, f in ESTIMATORS.items()
    }


def accuracy_at(spent: Sequence[float], accuracy: Sequence[float], compute: float) -> float:
    """The moving-average accuracy at `compute` (linear between evaluations; the last value past the end)."""
    c, a = _arrays(spent, accuracy)
    return float(np.interp(compute, c, smooth(a)))


def normalized_auc(spent: Sequence[float], accuracy: Sequence[float], budget: float | None = None) -> float:
    """Area under accuracy against compute over [0, budget], divided by the budget: the run's mean accuracy per unit
    of compute (1.0 = perfect from the start). The curve is held at its last value up to the budget."""
    c, a = _arrays(spent, accuracy)
    budget = float(budget if budget is not None else c[-1])
    if budget <= 0:
        return float(a[-1])
    x = np.concatenate([c[c < budget], [budget]])
    y = np.interp(x, c, a)
    return float(np.trapezoid(y, x) / budget) if len(x) > 1 else float(y[0])


def curve_summary(
    spent: Sequence[float], accuracy: Sequence[float], target: float, budget: float | None = None
) -> dict[str, float]:
    """Every number the workbench reads off one run's curve, as `{name: value}` (logged as `final/<name>`):
    compute-to-target by each estimator (with its censoring flag and interval-censoring lower bound), accuracy at
    fractions of the budget, the normalised area under the curve and the fitted sigmoid's parameters."""
    c, a = _arrays(spent, accuracy)
    budget = float(budget if budget is not None else c[-1])
    fit = fit_sigmoid(c, a)
    out: dict[str, float] = {}
    for name, res in estimate(c, a, target, fit).items():
        out[f"compute_to_target_{name}"] = res.value
        out[f"censored_{name}"] = float(res.censored)
        out[f"compute_to_target_{name}_low"] = res.low
        out[f"compute_to_target_{name}_high"] = res.high
    for f in BUDGET_FRACTIONS:
        out[f"accuracy_at_{round(100 * f)}pct"] = accuracy_at(c, a, f * budget)
    out["auc"] = normalized_auc(c, a, budget)
    if fit is not None:
        out.update(
            {"fit_asymptote": fit.asymptote, "fit_midpoint": fit.midpoint, "fit_slope": fit.slope, "fit_rmse": fit.rmse}
        )
    return out


def mean_curve(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[np.ndarray, np.ndarray]:
    """The mean of several runs' curves on the first run's compute points, up to the shortest run's end."""
    grid, _ = _arrays(*curves[0])
    end = min(float(_arrays(*c)[0][-1]) for c in curves)
    grid = grid[grid <= end + 1e-9]
    return grid, np.mean([np.interp(grid, *_arrays(*c)) for c in curves], axis=0)


def auto_target(curves: Sequence[tuple[Sequence[float], Sequence[float]]], gain_fraction: float) -> float:
    """A target on the rising part of a baseline's curve: the sigmoid fitted to the mean of its seeds' curves,
    `gain_fraction` of the way from its start (r0) to its value at the end of the shortest run, rounded to 0.005."""
    c, a = mean_curve(curves)
    fit = fit_sigmoid(c, a)
    start, end = (fit.r0, float(fit(c[-1]))) if fit is not None else (float(a[0]), float(smooth(a)[-1]))
    if end - start < MIN_GAIN:
        raise ValueError(
            f"the baseline did not improve over its budget (accuracy {start:.3f} -> {end:.3f}): no target on a rising curve"
        )
    return round((start + gain_fraction * (end - start)) * 200) / 200
