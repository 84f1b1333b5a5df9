import math

import numpy as np
import pytest
from scipy import optimize

from analysis.theory import (
    closed_form_optimum,
    objective_J,
    power_law_sigma_bar_sq,
    reduced_objective_I,
    shifted_power_law_sigma_bar_sq,
    sigma_bar_sq_discrete,
    theorem_4_4_bound,
    to_knobs,
    variance_term,
    x_star_numeric,
    x_star_quadratic,
    y_star,
)

GRID = [
    (mu, rho, alpha)
    for mu in (0.8, 2.0, 5.28, 6.84)
    for rho in (0.05, 0.1, 1.0)
    for alpha in (0.05, 0.1, 0.2, 0.3, 0.45)
]


def argmin_log(f, lo=-12.0, hi=14.0, n=53) -> float:
    """Minimise f(t) over t in [lo, hi]: a coarse grid, then bounded Brent around the best grid point."""
    grid = np.linspace(lo, hi, n)
    k = int(np.argmin([f(t) for t in grid]))
    r = optimize.minimize_scalar(
        f, bounds=(grid[max(k - 1, 0)], grid[min(k + 1, n - 1)]), method="bounded", options={"xatol": 1e-13}
    )
    return r.x


def numeric_argmin_J(mu, rho, alpha):
    """Minimise J(x, y) numerically, in log x and log y, without using the closed forms."""
    s = power_law_sigma_bar_sq(alpha, tau0=3.0)
    J = lambda lx, ly: float(objective_J(math.exp(lx), math.exp(ly), mu, rho, s))  # noqa: E731
    best_ly = lambda lx: argmin_log(lambda ly: J(lx, ly), -10, 10)  # noqa: E731
    lx = argmin_log(lambda lx: J(lx, best_ly(lx)))
    return math.exp(lx), math.exp(best_ly(lx))


@pytest.mark.parametrize("mu, rho, alpha", GRID)
def test_closed_forms_match_numeric_minimisation_of_J(mu, rho, alpha):
    x_c, y_c = closed_form_optimum(mu, rho, alpha)
    x_n, y_n = numeric_argmin_J(mu, rho, alpha)
    assert x_n == pytest.approx(x_c, rel=1e-6)
    assert y_n == pytest.approx(y_c, rel=1e-6)
    assert x_star_quadratic(mu, rho, alpha) == pytest.approx(x_c, rel=1e-9)
    # the two printed links between x* and y* hold
    assert x_c == pytest.approx(y_c**2 / (mu - rho * y_c**2), rel=1e-9)
    # and the general argmin of I(x) agrees for the power law
    assert x_star_numeric(mu, rho, power_law_sigma_bar_sq(alpha)) == pytest.approx(x_c, rel=1e-6)


@pytest.mark.parametrize("mu, rho, alpha", GRID[::4])
def test_J_is_minimised_at_y_star_for_fixed_x(mu, rho, alpha):
    s = power_law_sigma_bar_sq(alpha)
    for x in (0.5, 2.0, 8.0, 64.0):
        ys = float(y_star(x, mu, rho))
        j = float(objective_J(x, ys, mu, rho, s))
        for f in (0.9, 0.99, 1.01, 1.1):
            assert objective_J(x, ys * f, mu, rho, s) > j
        assert j == pytest.approx(float(reduced_objective_I(x, mu, rho, s)), rel=1e-12)
        assert math.exp(argmin_log(lambda ly: float(objective_J(x, math.exp(ly), mu, rho, s)), -8, 8)) == pytest.approx(
            ys, rel=1e-6
        )


def test_limits_of_the_closed_form():
    mu, alpha = 5.28, 0.2
    x0, y0 = closed_form_optimum(mu, 1e-10, alpha)
    assert y0 == pytest.approx(mu * (1 - 2 * alpha) / (2 * alpha), rel=1e-6)
    assert x0 == pytest.approx(mu * (1 - 2 * alpha) ** 2 / (4 * alpha**2), rel=1e-6)
    assert closed_form_optimum(mu, 0.0, alpha) == pytest.approx((x0, y0), rel=1e-6)
    # alpha -> 1/2: stay on-policy
    assert closed_form_optimum(mu, 0.1, 0.5 - 1e-9)[1] < 1e-6
    with pytest.raises(ValueError, match="alpha"):
        closed_form_optimum(mu, 0.1, 0.5)
    # x* and y* increase with mu, decrease with alpha and rho
    base = closed_form_optimum(5.28, 0.1, 0.2)
    assert all(a > b for a, b in zip(closed_form_optimum(6.84, 0.1, 0.2), base))
    assert all(a < b for a, b in zip(closed_form_optimum(5.28, 0.1, 0.3), base))
    assert all(a < b for a, b in zip(closed_form_optimum(5.28, 1.0, 0.2), base))


@pytest.mark.parametrize(
    "mu, rho, alpha, y, x",
    [
        (5.28, 0.1, 0.1, 5.58, 14.3),
        (5.28, 0.1, 0.2, 3.97, 4.27),
        (5.28, 1.0, 0.1, 1.96, 2.65),
        (5.28, 1.0, 0.2, 1.59, 0.92),
        (6.84, 0.1, 0.2, 4.71, 4.80),
        (2.0, 0.1, 0.2, 2.00, 2.50),
    ],
)
def test_reference_table_of_replay_papers(mu, rho, alpha, y, x):
    xc, yc = closed_form_optimum(mu, rho, alpha)
    assert (round(yc, 2), round(xc, 2 if xc < 10 else 1)) == (y, x)


def test_distinct_draws_drop_the_duplicate_term():
    s = power_law_sigma_bar_sq(0.2)
    assert float(y_star(4.0, 5.28, 0.1, with_replacement=False)) == pytest.approx(math.sqrt(5.28 / 0.1))
    assert variance_term(4, 2, 0.1, s, batch_size=128, with_replacement=True) - variance_term(
        4, 2, 0.1, s, 128, with_replacement=False
    ) == pytest.approx(float(s(4)) / (4 * 64))


def test_noise_averages_and_theorem_4_4():
    assert sigma_bar_sq_discrete(lambda s: s, 4) == pytest.approx(1.5)
    # the continuous shifted law tends to sigma0² as the horizon shrinks, and grows with it
    f = shifted_power_law_sigma_bar_sq(0.3, tau0=2.0, sigma0_sq=0.5)
    assert float(f(1e-9)) == pytest.approx(0.5, rel=1e-6) and float(f(10.0)) > float(f(1.0)) > 0.5
    b = theorem_4_4_bound(F0=1.0, eta=0.01, T=1000, L=1.0, kappa=0.1, N=64, R=16, V=2.0)
    assert b == pytest.approx(12 / 10 + 8 * 0.01 * (1 + 4 * 64**2 * 0.01 * 0.01 / 256) * 2.0)
    with pytest.raises(ValueError):
        theorem_4_4_bound(F0=1.0, eta=1.0, T=10, L=1.0, kappa=0.1, N=64, R=16, V=1.0)


def test_knob_mapping_for_a_batch_size():
    k = to_knobs(x=8.0, y=2.0, batch_size=128, mu=5.28)
    assert (k.fresh_per_step, k.capacity, k.ratio, k.horizon) == (64.0, 512, 2.0, 8)
    assert k.workers_per_trainer == pytest.approx(2.64)
    assert to_knobs(x=0.5, y=2.0, batch_size=128, mu=1.0).capacity == 128  # distinct draws need N >= B
    assert to_knobs(x=0.5, y=2.0, batch_size=128, mu=1.0, distinct=False).capacity == 32
