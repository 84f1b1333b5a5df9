"""Intervals over seeds: how sure a comparison is (the standard every reported number is held to).

Compute-to-target is compared on a log scale (savings are ratios): a configuration's estimate is the geometric mean
over its seeds, and its savings against the baseline is the geometric mean of per-seed ratios over the seeds both
ran (seed s gives every arm the same prompt order, held-out set and initial model, so the ratio is paired).

Intervals are bootstrap intervals over seeds, made honest for the 4-8 seeds a study can afford. The plain
percentile bootstrap is too narrow there (it ignores that the spread is itself estimated from a handful of values),
so this module takes the expanded percentile bootstrap (Hesterberg 2015: percentiles widened to match Student's t
for normal data) and, because n values can never give a bootstrap interval wider than their range (at n = 4 the
range covers the mean only 1 - 2/2^4 = 87.5% of the time), never reports less than Student's t interval. Coverage
on synthetic data is checked in tests/test_stats.py.

Torch-free; the study summary, `study confirm` and the analysis report all use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as sps

LEVEL = 0.95
N_BOOT = 4000


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int
    """Seeds (or pairs) behind it."""

    @property
    def width(self) -> float:
        return self.high - self.low

    def excludes(self, value: float) -> bool:
        return value < self.low or value > self.high

    def fmt(self, digits: int = 3) -> str:
        if self.n < 2:
            return f"{self.estimate:.{digits}g} (1 seed: no interval)"
        return f"{self.estimate:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def expanded_quantiles(n: int, level: float = LEVEL) -> tuple[float, float]:
    """The bootstrap percentiles that give a `level` interval for n values: alpha/2 = Phi(-sqrt(n/(n-1)) t_{n-1})."""
    alpha = 1.0 - level
    t = sps.t.ppf(1.0 - alpha / 2.0, n - 1)
    q = float(sps.norm.cdf(-math.sqrt(n / (n - 1)) * t))
    return q, 1.0 - q


def mean_interval(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """The mean of `values` with its expanded-percentile bootstrap interval (no interval from one value)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    lo_q, hi_q = expanded_quantiles(len(x), level)
    half_t = float(sps.t.ppf(0.5 + level / 2.0, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    low = min(float(np.quantile(boot, lo_q)), mean - half_t)
    high = max(float(np.quantile(boot, hi_q)), mean + half_t)
    return Interval(mean, low, high, len(x))


def geometric_interval(values: Sequence[float], level: float = LEVEL, seed: int = 0) -> Interval:
    """The geometric mean of positive `values` with its interval (the mean of logs, exponentiated)."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    iv = mean_interval(logs, level, seed=seed)
    return Interval(
        math.exp(iv.estimate) if iv.n else math.nan,
        math.exp(iv.low) if iv.n > 1 else math.nan,
        math.exp(iv.high) if iv.n > 1 else math.nan,
        iv.n,
    )


def paired_ratio(arm: dict[int, float], baseline: dict[int, float], level: float = LEVEL, seed: int = 0) -> Interval:
    """Geometric mean over the seeds both ran of arm[s] / baseline[s], with its interval: the savings of `arm`
    (ratio < 1: it needs less compute). Seeds only one side ran are left out."""
    common = sorted(set(arm) & set(baseline))
    return geometric_interval([arm[s] / baseline[s] for s in common if arm[s] > 0 and baseline[s] > 0], level, seed)


def finite_or_inf(value: float) -> float:
    """A sort key: an estimate that could not be made (nan: too few seeds reached the target) ranks last."""
    return value if math.isfinite(value) else math.inf


def log_sd(values: Sequence[float]) -> float:
    """Sample standard deviation of log(values): the per-run noise of a compute-to-target estimator."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(np.std(logs, ddof=1)) if len(logs) > 1 else math.nan


def direction(ratio: Interval) -> int:
    """The rule every comparison is held to: -1 when the ratio's interval lies below 1 (resolved, less), +1 when it
    lies above (resolved, more), 0 otherwise (unresolved: the interval contains 1, or one seed gave no interval)."""
    if ratio.n < 2 or not math.isfinite(ratio.low):
        return 0
    return -1 if ratio.high < 1.0 else 1 if ratio.low > 1.0 else 0


def verdict(ratio: Interval, what: str = "compute", brief: bool = False) -> str:
    """A ratio's interval in words: whether the difference against 1 is resolved at this level (`brief`: without
    repeating the interval, for a line that already shows it)."""
    side = direction(ratio)
    if ratio.n < 2 or not math.isfinite(ratio.low):
        return "unresolved (one seed: no interval)"
    if side < 0:
        saved = f"{100 * (1 - ratio.estimate):.0f}% saved"
        return (
            f"resolved: less {what} ({saved})"
            if brief
            else f"resolved: less {what} ({saved}, 95% CI {100 * (1 - ratio.high):.0f}% to {100 * (1 - ratio.low):.0f}%)"
        )
    if side > 0:
        return (
            f"resolved: more {what} (x{ratio.estimate:.2f})"
            if brief
            else f"resolved: more {what} (x{ratio.estimate:.2f}, 95% CI x{ratio.low:.2f} to x{ratio.high:.2f})"
        )
    return (
        "unresolved (the interval contains 1)"
        if brief
        else f"unresolved: the 95% CI x{ratio.low:.2f} to x{ratio.high:.2f} contains 1"
    )
