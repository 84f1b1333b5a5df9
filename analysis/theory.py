"""The closed-form bias-variance-compute model of Arnal et al. (arXiv 2604.08706), §4 and App. C.

Symbols as in the paper (docs/theory.md): B batch, R fresh rollouts per step, N buffer capacity,
x = N/R the staleness horizon, y = B/R the replay ratio, mu = generation cost / training cost of a rollout,
rho the coupling of samples through the iterate path, sigma²(tau) the gradient-noise variance at age tau.

Two variance forms are implemented (docs/theory.md):
- `with_replacement=True`: Theorem 4.4's V = sigma_bar²(x)·(1/B + 1/N + rho/R); the 1/N term is the chance of
  drawing one rollout twice in a batch (App. C.2.3).
- `with_replacement=False`: the `uniform` strategy's distinct draws, V = sigma_bar²(x)·(1/B + rho/R).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import optimize

from workbench import knobs
from workbench.knobs import BufferSettings, to_knobs  # noqa: F401  (x*, y*) as knobs: the engine's rule, re-exported beside the theorem

NoiseFn = Callable[[np.ndarray], np.ndarray]


# ---------------------------------------------------------------- noise growth with age (Assumption 4.3)


def power_law_sigma_bar_sq(alpha: float, tau0: float = 1.0) -> NoiseFn:
    """App. C.3.2: sigma(tau) = (tau/tau0)^alpha gives sigma_bar²(x) ≈ (x/tau0)^(2 alpha) / (2 alpha + 1)."""
    return lambda x: (np.asarray(x, dtype=float) / tau0) ** (2 * alpha) / (2 * alpha + 1)


def shifted_power_law_sigma_bar_sq(alpha: float, tau0: float, sigma0_sq: float = 1.0) -> NoiseFn:
    """The shifted power law (docs/theory.md): sigma²(tau) = sigma0²·(1 + tau/tau0)^(2 alpha), averaged over ages [0, x] (continuous).

    Unlike the pure power law, sigma²(0) = sigma0² > 0, so fresh samples are not noise-free.
    """

    def f(x):
        x = np.asarray(x, dtype=float)
        a = 2 * alpha + 1
        return sigma0_sq * tau0 * ((1 + x / tau0) ** a - 1) / (a * x)

    return f


def sigma_bar_sq_discrete(sigma_sq: Callable[[int], float], horizon: int) -> float:
    """Theorem 4.4's definition: sigma_bar²(H) = (1/H)·sum_{s=0}^{H-1} sigma²(s)."""
    return sum(sigma_sq(s) for s in range(horizon)) / horizon


# ---------------------------------------------------------------- Theorem 4.4 and 4.5


def variance_term(
    x: float, y: float, rho: float, sigma_bar_sq: NoiseFn, batch_size: float = 1.0, with_replacement: bool = True
) -> float:
    """Theorem 4.4's V = sigma_bar²(N/R)·(1/B + 1/N + rho/R), written with x = N/R, y = B/R and B."""
    R, N = knobs.fresh_per_step(batch_size, y), knobs.exact_capacity(x, y, batch_size)
    dup = 1.0 / N if with_replacement else 0.0
    return float(sigma_bar_sq(x)) * (1.0 / batch_size + dup + rho / R)


def theorem_4_4_bound(F0: float, eta: float, T: int, L: float, kappa: float, N: float, R: float, V: float) -> float:
    """Theorem 4.4: (1/T)·sum E||grad F||² <= 12 F0/(eta T) + 8 eta (L + 4 N² kappa² eta / R²) V.

    Valid for eta <= min(R / (2 sqrt(2) kappa N), 1/(2L)) (the proof needs L·eta < 1/2).
    """
    if eta > min(R / (2 * math.sqrt(2) * kappa * N) if kappa > 0 else math.inf, 1 / (2 * L)):
        raise ValueError("eta outside the theorem's step-size condition")
    return 12 * F0 / (eta * T) + 8 * eta * (L + 4 * N**2 * kappa**2 * eta / R**2) * V


def objective_J(x, y, mu: float, rho: float, sigma_bar_sq: NoiseFn, with_replacement: bool = True):
    """Theorem 4.5 (asymptotic budget): J(x, y) ∝ sigma_bar²(x)·(1 + y/mu)·(1/y + 1/x + rho).

    Compute per update (B + mu R) times the variance term, divided by constants; without replacement the 1/x
    term (duplicate draws) is absent.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dup = 1.0 / x if with_replacement else 0.0
    return sigma_bar_sq(x) * (1 + y / mu) * (1 / y + dup + rho)


def y_star(x, mu: float, rho: float, with_replacement: bool = True):
    """Theorem 4.5: for fixed x, J is minimised at y*(x) = sqrt(mu / (rho + 1/x)) (sqrt(mu/rho) without replacement).

    (1 + y/mu)(1/y + a) = 1/y + a + 1/mu + a y/mu is minimised at y = sqrt(mu/a), where it equals
    (1/sqrt(mu) + sqrt(a))².
    """
    a = rho + (1.0 / np.asarray(x, dtype=float) if with_replacement else 0.0)
    return np.sqrt(mu / a)


def reduced_objective_I(x, mu: float, rho: float, sigma_bar_sq: NoiseFn, with_replacement: bool = True):
    """Theorem 4.5: I(x) = J(x, y*(x)) = sigma_bar²(x)·(1/sqrt(mu) + sqrt(rho + 1/x))²."""
    a = rho + (1.0 / np.asarray(x, dtype=float) if with_replacement else 0.0)
    return sigma_bar_sq(x) * (1 / np.sqrt(mu) + np.sqrt(a)) ** 2


def x_star_numeric(
    mu: float, rho: float, sigma_bar_sq: NoiseFn, bounds=(1e-6, 1e8), with_replacement: bool = True
) -> float:
    """Theorem 4.5: x* = argmin_x I(x) for any noise-growth function (bounded search in log x)."""
    f = lambda t: float(reduced_objective_I(math.exp(t), mu, rho, sigma_bar_sq, with_replacement))  # noqa: E731
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    grid = np.linspace(lo, hi, 400)
    k = int(np.argmin([f(t) for t in grid]))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(f, bounds=(a, b), method="bounded", options={"xatol": 1e-12})
    return math.exp(res.x)


# ---------------------------------------------------------------- App. C.3.2: explicit forms under the power law


def closed_form_optimum(mu: float, rho: float, alpha: float) -> tuple[float, float]:
    """(x*, y*) under sigma(tau) = (tau/tau0)^alpha, with replacement (App. C.3.2). Requires 0 < alpha < 1/2.

    y* = (-alpha + sqrt(alpha² + mu rho (1 - 2 alpha))) / rho and x* = y*² / (mu - rho y*²), the root of
    4a²rho(1/mu - rho) x² + 4a(a/mu + rho(1 - 2a)) x - (1 - 2a)² = 0. Limits: rho -> 0 gives
    y* -> mu(1 - 2a)/(2a), x* -> mu(1 - 2a)²/(4a²); alpha -> 1/2 gives y* -> 0 (on-policy). tau0 cancels.
    """
    if not 0 < alpha < 0.5:
        raise ValueError("alpha must be in (0, 1/2): for alpha >= 1/2 staleness noise grows too fast and y* -> 0")
    if mu <= 0 or rho < 0:
        raise ValueError("need mu > 0 and rho >= 0")
    if rho == 0:
        return mu * (1 - 2 * alpha) ** 2 / (4 * alpha**2), mu * (1 - 2 * alpha) / (2 * alpha)
    y = (-alpha + math.sqrt(alpha**2 + mu * rho * (1 - 2 * alpha))) / rho
    x = y**2 / (2 * alpha * (mu + y))  # equal to y²/(mu - rho y²), better conditioned
    return x, y


def x_star_quadratic(mu: float, rho: float, alpha: float) -> float:
    """x* as the positive root of App. C.3.2's quadratic (the form docs/theory.md prints)."""
    a = alpha
    if rho == 0 or abs(1 / mu - rho) < 1e-15:
        return closed_form_optimum(mu, rho, alpha)[0]
    num = -(a / mu + rho * (1 - 2 * a)) + math.sqrt(a**2 / mu**2 + rho * (1 - 2 * a) / mu)
    return num / (2 * a * rho * (1 / mu - rho))
