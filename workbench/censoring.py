"""Censored compute-to-target: the one rule for runs that never reached the target (docs/measurement.md,
"Censored runs").

A run that never reached the target has an unknown compute-to-target above what it spent (right-censored). Valuing it
at that total, as if it had reached the target there, turns a pair of such runs into a tie (ratio about 1) and pulls
every comparison towards "no difference" with a narrower interval. Here instead:

- a pair of runs (two arms on one seed) where **both** never reached the target carries no information about their
  ratio and is left out (counted as `both_censored`);
- a pair where **one** never reached it is a bound on the ratio, used as one (counted as `one_censored`);
- a pair where both reached it is an exact ratio.

The model is the log-normal accelerated-failure-time model with the arm as covariate and a random effect per seed
(the seed is what pairs two runs): log T[seed, arm] = m + delta * arm + s[seed] + e, s ~ N(0, tau^2), e ~ N(0,
sigma^2), fitted by maximum likelihood over the informative pairs (s integrated out in closed form), censored runs
entering through the normal survival function. The interval is the profile-likelihood interval of delta, its cut-off
calibrated to Student's t: with no censored pair it is exactly the paired t interval on the log ratios. lifelines'
AFT fitters have no random effect, and with a fixed effect per seed a pair's one exact run fixes its seed's effect
(the incidental-parameter problem halves sigma), so the likelihood is written here with scipy. Coverage on synthetic
censored pairs is checked in tests/test_censoring.py.

Torch-free: the study summary, the report, `regime`, `recommend` and the what-if re-accounting all compare with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from workbench import stats
from workbench.stats import LEVEL, Interval

_LOG_SD_FLOOR = math.log(1e-3)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SEARCH = 8.0
"""How far (in log ratio, a factor of e^8 ~ 3000) the interval's ends are searched for before one is called open."""


@dataclass(frozen=True)
class Outcome:
    """One run's compute-to-target: the value where it reached the target, else (censored) what it spent in all."""

    value: float
    censored: bool = False


@dataclass(frozen=True)
class Comparison(Interval):
    """A paired ratio (arm over other) with how its pairs were counted. `n` is the informative pairs (both reached
    the target, or one did); an end of the interval is infinite where the censored pairs leave it open."""

    one_censored: int = 0
    """Informative pairs where one run never reached the target: a bound on the ratio, not a value."""
    both_censored: int = 0
    """Pairs where neither run reached the target: no information about the ratio, left out."""
    unit: str = "pair"
    """`run` for one arm's level over its seeds (`level_interval`): `n` runs, `one_censored` of them censored."""
    orders: Orders | None = None
    """For a paired ratio with no estimate: the seeds' orders (`paired_orders`), what its readers go by instead."""

    @property
    def exact(self) -> int:
        return self.n - self.one_censored

    def counts(self) -> str:
        """The pair counts in words, for every comparison line."""
        if self.unit == "run":
            return f"{self.n} run{'s' if self.n != 1 else ''}" + (
                f", {self.one_censored} of them censored" if self.one_censored else ""
            )
        head = f"{self.n} informative pair{'s' if self.n != 1 else ''}"
        cens = f", {self.one_censored} of them censored on one side" if self.one_censored else ""
        both = f"; {self.both_censored} both-censored left out" if self.both_censored else ""
        return head + cens + both

    def fmt(self, digits: int = 3) -> str:
        if not math.isfinite(self.estimate):
            return f"no estimate ({self.counts()})"
        if not (math.isfinite(self.low) or math.isfinite(self.high)) and self.n < 2:
            return f"{self.estimate:.{digits}g}, no interval ({self.counts()})"
        ends = [
            f"{v:.{digits}g}" if math.isfinite(v) else ("0" if v < 0 or v == 0 else "inf")
            for v in (self.low, self.high)
        ]
        return f"{self.estimate:.{digits}g} [{ends[0]}, {ends[1]}] ({self.counts()})"


def outcomes(values: Mapping[int, float], censored: set[int] | Sequence[int] = ()) -> dict[int, Outcome]:
    """Per seed: `values[seed]` (compute-to-target, or the run's total where the seed is in `censored`)."""
    cens = set(censored)
    return {int(s): Outcome(float(v), int(s) in cens) for s, v in values.items()}


def from_frame(runs) -> dict[int, Outcome]:
    """Per seed from a table of runs (`analysis.data` columns `seed`, `compute_to_target`, `censored`,
    `total_units`): a censored run at what it spent in all."""
    return {
        int(r.seed): Outcome(float(r.total_units), True) if r.censored else Outcome(float(r.compute_to_target))
        for r in runs.itertuples()
    }


def verdict(c: Interval, brief: bool = False) -> str:
    """A comparison in words (`workbench.stats.verdict`), or why there is none."""
    if isinstance(c, Comparison) and not math.isfinite(c.estimate):
        return "no verdict: fewer than two seeds reached the target on both sides"
    return stats.verdict(c, brief=brief)


def counts_of(c: Interval | None) -> dict[str, int]:
    """A comparison's pair counts as columns (zeros where it had no censoring)."""
    if c is None:
        return {"informative_pairs": 0, "one_censored_pairs": 0, "both_censored_pairs": 0}
    return {
        "informative_pairs": c.n,
        "one_censored_pairs": getattr(c, "one_censored", 0),
        "both_censored_pairs": getattr(c, "both_censored", 0),
    }


def _row_counts(row: Mapping, suffix: str) -> dict[str, int] | None:
    """A table row's `counts_of` columns (named with `suffix`) as `Comparison` fields; None for a row written before
    pairs were counted."""
    if f"informative_pairs{suffix}" not in row:
        return None
    return {
        "n": int(row[f"informative_pairs{suffix}"]),
        "one_censored": int(row.get(f"one_censored_pairs{suffix}", 0)),
        "both_censored": int(row.get(f"both_censored_pairs{suffix}", 0)),
    }


def from_row(row: Mapping, estimate: str, low: str, high: str, n: str = "seeds", suffix: str = "") -> Interval:
    """A comparison read back from a table row (analysis.json): a `Comparison` where the row has pair counts, else a
    plain interval."""
    counts = _row_counts(row, suffix)
    if counts is None:
        return Interval(row[estimate], row[low], row[high], row[n])
    return Comparison(row[estimate], row[low], row[high], **counts)


def counts_text(row: Mapping, suffix: str = "") -> str:
    """` (4 informative pairs, ...)` from a table row's pair counts, empty where the row has none."""
    counts = _row_counts(row, suffix)
    return "" if counts is None else f" ({Comparison(math.nan, math.nan, math.nan, **counts).counts()})"


def _log_terms(y: np.ndarray, cens: np.ndarray, loc: np.ndarray, sd: float) -> np.ndarray:
    """log density (observed) or log survival (censored) of N(loc, sd^2) at y, elementwise."""
    z = (y - loc) / sd
    return np.where(cens, special.log_ndtr(-z), -0.5 * z * z - _LOG_SQRT_2PI - math.log(sd))


def _neg_loglik(delta: float, m: float, log_tau: float, log_sigma: float, y: np.ndarray, c: np.ndarray) -> float:
    """-log likelihood of pairs y[i] = (log T_arm, log T_other) with censoring flags c[i] (at most one per pair), the
    seed effect integrated out in closed form; the arm at m + delta/2, the other at m - delta/2.

    Given its seed effect s ~ N(0, tau^2) a pair's two runs are independent N(mean + s, sigma^2). A pair's exact run
    (the first, if both are) has the marginal N(mean, tau^2 + sigma^2); given it, s is N(k (y - mean), k sigma^2)
    with k = tau^2 / (tau^2 + sigma^2), so the other run is N(its mean + k (y - mean), sigma^2 + k sigma^2): its
    density where it reached the target, its survival where it did not. Exact, where quadrature over s fails: the
    seed effect is often far wider than the within-pair noise (warm starts that differ by 5x, pairs within 3%)."""
    tau2, sigma2 = math.exp(2 * log_tau), math.exp(2 * log_sigma)
    k = tau2 / (tau2 + sigma2)
    mean = np.array([m + delta / 2, m - delta / 2])
    first = c[:, 0].astype(int)  # the exact run of each pair: the other arm's where the arm's own is censored
    rows = np.arange(len(y))
    y1, y2, c2 = y[rows, first], y[rows, 1 - first], c[rows, 1 - first]
    m1, m2 = mean[first], mean[1 - first]
    marginal = _log_terms(y1, np.zeros(len(y), bool), m1, math.sqrt(tau2 + sigma2))
    conditional = _log_terms(y2, c2, m2 + k * (y1 - m1), math.sqrt(sigma2 * (1 + k)))
    return -float((marginal + conditional).sum())


class _Profile:
    """The profile likelihood of delta: -log likelihood minimised over (m, log tau, log sigma), each time from the
    joint optimum's values (so that it is a function of delta alone)."""

    def __init__(self, y: np.ndarray, c: np.ndarray, start: np.ndarray):
        self.y, self.c = y, c
        spread = max(float(np.ptp(y)), 1e-2)
        self.bounds = [
            (float(y.min()) - 10 * spread, float(y.max()) + 10 * spread),
            (_LOG_SD_FLOOR, math.log(10 * spread)),
            (_LOG_SD_FLOOR, math.log(10 * spread)),
        ]
        d = y[:, 0] - y[:, 1]
        joint = optimize.minimize(
            lambda p: _neg_loglik(p[0], *p[1:], y, c),
            np.concatenate([[float(np.median(d))], start]),
            method="L-BFGS-B",
            bounds=[(float(d.min()) - _SEARCH, float(d.max()) + _SEARCH), *self.bounds],
        )
        self.delta, self.x = float(joint.x[0]), joint.x[1:]
        self.minimum = min(float(joint.fun), self(self.delta))

    def __call__(self, delta: float) -> float:
        return float(
            optimize.minimize(
                lambda p: _neg_loglik(delta, *p, self.y, self.c), self.x, method="L-BFGS-B", bounds=self.bounds
            ).fun
        )

    def end(self, sign: int, cut: float) -> float:
        """The delta on `sign`'s side of the optimum where the profile has risen by `cut` (infinite if it does not
        within _SEARCH)."""
        excess = lambda delta: self(delta) - self.minimum - cut  # noqa: E731
        step, prev, prev_excess = 0.05, self.delta, -cut
        while step <= _SEARCH:
            at = self.delta + sign * step
            now = excess(at)
            if now > 0:
                if prev_excess >= 0:
                    return prev
                return float(optimize.brentq(excess, min(prev, at), max(prev, at), xtol=1e-4))
            prev, prev_excess, step = at, now, step * 2.0
        return sign * math.inf


def _t_cutoff(n: int, df: int, level: float) -> float:
    """The likelihood-ratio cut-off n log(1 + t_df^2 / df): with n uncensored pairs and df = n - 1, the profile
    interval is the paired t interval; censored pairs add to n but not to df (they do not measure the spread)."""
    t = float(sps.t.ppf(0.5 + level / 2.0, df))
    return n * math.log1p(t * t / df)


def paired_ratio(arm: Mapping[int, Outcome], other: Mapping[int, Outcome], level: float = LEVEL) -> Comparison:
    """The ratio of `arm`'s compute-to-target to `other`'s over the seeds both ran (< 1: `arm` needs less), with its
    interval, censoring handled as censoring (module docstring). With no censored pair: the geometric mean of the
    per-seed ratios with `workbench.stats`'s interval, as before. With fewer than two exact pairs the censored pairs
    alone bound nothing the likelihood can scale, and there is no interval. Where there is no estimate, the result
    carries the seeds' orders (`Comparison.orders`, a sign test), which every reader of it goes by instead."""
    c = _paired_ratio(arm, other, level)
    return c if math.isfinite(c.estimate) else replace(c, orders=paired_orders(arm, other))


def _paired_ratio(arm: Mapping[int, Outcome], other: Mapping[int, Outcome], level: float) -> Comparison:
    common = sorted(s for s in set(arm) & set(other) if arm[s].value > 0 and other[s].value > 0)
    both = [s for s in common if arm[s].censored and other[s].censored]
    pairs = [s for s in common if s not in both]
    one = [s for s in pairs if arm[s].censored or other[s].censored]
    exact = [s for s in pairs if s not in one]
    counts = dict(one_censored=len(one), both_censored=len(both))
    if not one:
        iv = stats.geometric_interval([arm[s].value / other[s].value for s in exact], level)
        return Comparison(iv.estimate, iv.low, iv.high, iv.n, **counts)
    if len(exact) < 2:
        return Comparison(math.nan, math.nan, math.nan, len(pairs), **counts)
    y = np.log([[arm[s].value, other[s].value] for s in pairs])
    c = np.array([[arm[s].censored, other[s].censored] for s in pairs])
    d = y[:, 0] - y[:, 1]
    ex = ~c.any(axis=1)
    start = np.array(
        [
            float(y.mean()),
            math.log(max(float(np.std(y.mean(axis=1))), 0.05)),
            math.log(max(float(np.std(d[ex], ddof=1)) / math.sqrt(2), 0.02)),
        ]
    )
    profile = _Profile(y, c, start)
    cut = _t_cutoff(len(pairs), len(exact) - 1 + len(one) / 2, level) / 2.0
    low, high = profile.end(-1, cut), profile.end(+1, cut)
    best = profile.delta
    return Comparison(math.exp(best), math.exp(low), math.exp(high), len(pairs), **counts)


@dataclass(frozen=True)
class Orders:
    """Pairs (two arms on one seed) by which arm needed more compute, where the runs tell: both reached the target
    (unequal values), or one never did after spending at least the other's compute-to-target (its own lies above
    that). Pairs that do not tell (both censored, a censored run stopped below the other's value, a tie): `unknown`."""

    more: int
    less: int
    unknown: int

    @property
    def p_value(self) -> float:
        """The sign test's two-sided p-value over the ordered pairs (1 with none): under no difference either order
        is a fair coin."""
        n = self.more + self.less
        return float(sps.binomtest(self.more, n, 0.5).pvalue) if n else 1.0

    def more_resolved(self, level: float = LEVEL) -> bool:
        """More compute in most ordered pairs, at the test's `level`."""
        return self.more > self.less and self.p_value < 1.0 - level

    def less_resolved(self, level: float = LEVEL) -> bool:
        """Less compute in most ordered pairs, at the test's `level`."""
        return self.less > self.more and self.p_value < 1.0 - level

    def verdict(self) -> str:
        if self.more_resolved():
            return "resolved: more compute"
        return "resolved: less compute" if self.less_resolved() else "unresolved"

    def fmt(self) -> str:
        n = self.more + self.less + self.unknown
        return (
            f"more compute on {self.more} of {n} seeds, less on {self.less}"
            + (f", {self.unknown} unordered" if self.unknown else "")
            + f" (sign test p = {self.p_value:.2g})"
        )


def paired_orders(arm: Mapping[int, Outcome], other: Mapping[int, Outcome]) -> Orders:
    """`arm` against `other` seed by seed: in how many pairs it needed more compute, in how many less (`Orders`).
    Where `paired_ratio` has no estimate (fewer than two pairs both reached the target), this still reads an arm
    whose runs were censored above the other's values: each of those pairs is ordered."""
    more = less = unknown = 0
    for s in sorted(set(arm) & set(other)):
        a, b = arm[s], other[s]
        if a.censored and b.censored:
            order = 0
        elif a.censored:
            order = 1 if a.value >= b.value else 0
        elif b.censored:
            order = -1 if b.value >= a.value else 0
        else:
            order = (a.value > b.value) - (a.value < b.value)
        more, less, unknown = more + (order > 0), less + (order < 0), unknown + (order == 0)
    return Orders(more, less, unknown)


def level_interval(runs: Sequence[Outcome], level: float = LEVEL) -> Comparison:
    """One arm's compute-to-target over its seeds: the median of a log-normal fitted with its censored runs as
    censored (the geometric mean, with `workbench.stats`'s interval, when none is), its profile-likelihood interval
    t-calibrated. `one_censored` counts its censored runs here; with fewer than two that reached the target there is
    no estimate."""
    runs = [r for r in runs if r.value > 0 and math.isfinite(r.value)]
    cens = [r for r in runs if r.censored]
    exact = [r for r in runs if not r.censored]
    if not cens:
        iv = stats.geometric_interval([r.value for r in exact], level)
        return Comparison(iv.estimate, iv.low, iv.high, iv.n, unit="run")
    if len(exact) < 2:
        return Comparison(math.nan, math.nan, math.nan, len(runs), one_censored=len(cens), unit="run")
    y = np.log([r.value for r in runs])
    c = np.array([r.censored for r in runs])

    def nll(m: float, log_sigma: float) -> float:
        return -float(_log_terms(y, c, np.full_like(y, m), math.exp(log_sigma)).sum())

    def prof(m: float) -> float:
        return float(optimize.minimize_scalar(lambda ls: nll(m, ls), bounds=(_LOG_SD_FLOOR, 5.0), method="bounded").fun)

    ye = y[~c]
    m0 = float(optimize.minimize_scalar(prof, bracket=(float(ye.mean()), float(ye.mean()) + 0.2)).x)
    ll0 = prof(m0)
    cut = _t_cutoff(len(runs), len(exact) - 1, level) / 2.0

    def end(sign: int) -> float:
        step, prev = 0.05, m0
        while step <= _SEARCH:
            at = m0 + sign * step
            if prof(at) - ll0 - cut > 0:
                return float(optimize.brentq(lambda m: prof(m) - ll0 - cut, min(prev, at), max(prev, at), xtol=1e-4))
            prev, step = at, step * 1.6
        return sign * math.inf

    return Comparison(math.exp(m0), math.exp(end(-1)), math.exp(end(+1)), len(runs), one_censored=len(cens), unit="run")
