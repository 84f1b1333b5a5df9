"""Gradient noise by rollout age, measured from per-rollout gradients (the probe's estimators; docs/theory.md, "The probe").

The model of Arnal et al. needs sigma²(tau), the variance of a single rollout's gradient at age tau (Assumption
4.3), and the coupling of rollouts through the iterate path. Measured directly: take the per-rollout gradients of
the training objective at the current parameters (or a random projection of them: a Gaussian matrix with
variance 1/k keeps squared norms and inner products in expectation, Johnson-Lindenstrauss), group them by age and
read the spread within each group. Torch-free: the probe hands in arrays.

- `noise_by_age`: sigma²(tau) = the unbiased trace of the per-rollout gradient covariance at age tau, with its
  standard error; the mean gradient per age (for the staleness bias).
- `staleness_bias`: kappa(tau) = |mean gradient at tau - mean at age 0| / |mean at age 0|.
- `fit_noise_growth`: sigma²(tau) = sigma0²(1 + tau/tau0)^(2 alpha) (docs/theory.md, "The probe") by weighted least squares
  on the log, for the models' alpha and tau0.
- `within_group_correlation`: the mean correlation of centred gradients of rollouts from one prompt's group.
- `horizon_terms`: per horizon x, what a batch drawn from ages 0..x-1 gives the descent: its mean gradient's
  squared norm, its projection on the fresh gradient, and the mean noise (the staleness bias in the form the
  probe's prediction uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AgeNoise:
    age: int
    n: int
    sigma2: float
    """Unbiased trace of the per-rollout gradient covariance: E|g - E g|²."""
    se: float
    """Its standard error (from the spread of the squared deviations)."""
    mean: np.ndarray
    """The mean gradient of this age."""


def noise_by_age(grads, ages, min_count: int = 3) -> list[AgeNoise]:
    """sigma²(tau) per age with at least `min_count` rollouts: (n / (n - 1)) · mean |g_i - mean|², i.e. the
    unbiased trace of the covariance of one rollout's gradient. `grads`: (n, d) per-rollout gradients (or
    projections), `ages`: (n,) ints."""
    grads, ages = np.asarray(grads, float), np.asarray(ages)
    out = []
    for age in np.unique(ages):
        g = grads[ages == age]
        n = len(g)
        if n < min_count:
            continue
        mean = g.mean(axis=0)
        sq = np.sum((g - mean) ** 2, axis=1) * n / (n - 1)
        out.append(AgeNoise(int(age), n, float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(n)), mean))
    return out


def staleness_bias(noise: list[AgeNoise]) -> dict[int, float]:
    """kappa(tau) = |mean gradient at age tau - at the youngest age| / |mean at the youngest age|, both squared norms
    corrected for the sampling noise of the means (E|mean|² = |E g|² + sigma²/n): a handful of rollouts per age
    would otherwise read a large bias where there is none. NaN where the youngest mean is not resolved from 0."""
    if not noise:
        return {}
    ref = min(noise, key=lambda a: a.age)
    signal = float(ref.mean @ ref.mean) - ref.sigma2 / ref.n
    if signal <= 0:
        return {a.age: math.nan for a in noise}
    out = {}
    for a in noise:
        d = a.mean - ref.mean
        gap = float(d @ d) - (0.0 if a is ref else a.sigma2 / a.n + ref.sigma2 / ref.n)
        out[a.age] = math.sqrt(max(gap, 0.0) / signal)
    return out


@dataclass(frozen=True)
class HorizonTerms:
    x: int
    """Ages 0..x-1, equally represented (a FIFO buffer whose rollouts live x steps)."""
    sigma2_bar: float
    """Mean per-rollout noise over those ages."""
    signal: float
    """|E g_0|²: the fresh mean gradient's squared norm."""
    mixed: float
    """|E g_bar_x|²: the squared norm of the mean gradient over ages 0..x-1."""
    cross: float
    """E g_0 · E g_bar_x: how much of the mixed gradient points where the fresh one does."""


def horizon_terms(noise: list[AgeNoise]) -> list[HorizonTerms]:
    """For x = 1, 2, ... while ages 0..x-1 are all measured: the terms of the tuned-step descent lemma for a batch
    whose rollouts are spread evenly over those ages. Each is unbiased for its expectation: a mean over n rollouts
    carries sampling noise of squared norm sigma²/n, subtracted from |m_0|², from |mean of the m_tau|² (sum over
    ages of sigma²_tau/n_tau, over x²) and from m_0 · (mean of the m_tau) (sigma²_0/n_0, over x). Sums of these over
    several probes stay unbiased."""
    by_age = {a.age: a for a in noise}
    if 0 not in by_age:
        return []
    ref = by_age[0]
    out, total, spread, s2 = [], np.zeros_like(ref.mean), 0.0, 0.0
    x = 0
    while x in by_age:
        a = by_age[x]
        total, spread, s2, x = total + a.mean, spread + a.sigma2 / a.n, s2 + a.sigma2, x + 1
        bar = total / x
        out.append(
            HorizonTerms(
                x,
                s2 / x,
                float(ref.mean @ ref.mean) - ref.sigma2 / ref.n,
                float(bar @ bar) - spread / x**2,
                float(ref.mean @ bar) - ref.sigma2 / (ref.n * x),
            )
        )
    return out


@dataclass(frozen=True)
class NoiseGrowth:
    sigma0_sq: float
    tau0: float
    alpha: float
    non_decreasing: bool
    """F6: the trend of log sigma²(tau) against tau is not resolvably negative (its 95% upper bound >= 0)."""
    log_slope: float = math.nan
    """Weighted least-squares slope of log sigma²(tau) on tau, per step of age ..."""
    log_slope_se: float = math.nan
    """... and its standard error (from each point's relative standard error)."""


def fit_noise_growth(noise: list[AgeNoise]) -> NoiseGrowth:
    """sigma²(tau) = sigma0²(1 + tau/tau0)^(2 alpha) fitted to the measured points by least squares on log sigma²
    weighted by each point's relative precision (a grid over tau0, closed form for the rest). Ages whose rollouts
    all had the same gradient (sigma² 0: e.g. every group of that age had one reward, so no advantage) are left
    out; fewer than three ages left: ValueError."""
    from scipy import optimize

    noise = [a for a in noise if a.sigma2 > 0 and a.se > 0]
    if len(noise) < 3:
        raise ValueError(f"fit_noise_growth: needs three or more ages with a non-zero spread (got {len(noise)})")

    tau = np.array([a.age for a in noise], float)
    s2 = np.array([a.sigma2 for a in noise], float)
    w = np.array([(a.sigma2 / a.se) ** 2 for a in noise], float)
    y = np.log(s2)

    def solve(log_tau0: float):
        X = np.column_stack([np.ones_like(tau), np.log1p(tau / math.exp(log_tau0))])
        coef, *_ = np.linalg.lstsq(X * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)
        return coef, float(np.sum(w * (y - X @ coef) ** 2))

    res = optimize.minimize_scalar(lambda lt: solve(lt)[1], bounds=(math.log(0.05), math.log(1e3)), method="bounded")
    coef, _ = solve(res.x)
    # F6 as one trend test (pairwise comparisons of 16 ages would find a "drop" by chance): the weighted slope of
    # log sigma² on tau, var(log sigma²) ≈ (se / sigma²)², falsified when its 95% interval lies below 0.
    X = np.column_stack([np.ones_like(tau), tau])
    cov = np.linalg.inv(X.T @ (X * w[:, None]))
    slope = float((cov @ X.T @ (w * y))[1])
    slope_se = math.sqrt(float(cov[1, 1]))
    return NoiseGrowth(
        float(math.exp(coef[0])),
        float(math.exp(res.x)),
        float(coef[1] / 2),
        slope + 1.96 * slope_se >= 0,
        slope,
        slope_se,
    )


def within_group_correlation(grads, groups) -> float:
    """The within-group correlation: the mean cosine between the centred gradients of two different rollouts of the same group (the
    GRPO group's shared prompt and baseline correlate them); 0 for independent rollouts."""
    grads, groups = np.asarray(grads, float), np.asarray(groups)
    centred = grads - grads.mean(axis=0)
    unit = centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-30)
    cos = []
    for g in np.unique(groups):
        u = unit[groups == g]
        if len(u) < 2:
            continue
        c = u @ u.T
        cos.append((c.sum() - np.trace(c)) / (len(u) * (len(u) - 1)))
    return float(np.mean(cos)) if cos else math.nan


def count_sketch(d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A CountSketch of R^d into R^k: coordinate i goes to bucket h(i) with sign s(i). Inner products and squared
    norms are kept without bias (variance ~ |a|²|b|²/k), at the memory of two length-d index arrays, so the probe
    can sketch the gradient of a model of any size."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, k, size=d), rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=d)


def reuse_correlation(before, after) -> float:
    """The mean correlation between the centred gradients of the same rollouts at two parameter versions (rows
    aligned): how much of a replayed rollout's noise is the same noise again (rho of the model, docs/theory.md:
    1 when each reuse repeats it, 0 when reuse were as good as a fresh draw)."""
    a, b = np.asarray(before, float), np.asarray(after, float)
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-30)))


def projection(d: int, k: int, seed: int = 0) -> np.ndarray:
    """A (d, k) Gaussian random projection with variance 1/k: |g P|² estimates |g|² without bias."""
    return np.random.default_rng(seed).normal(0.0, 1.0 / math.sqrt(k), size=(d, k)).astype(np.float32)
