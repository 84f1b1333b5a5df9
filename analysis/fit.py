"""Fit the bias-variance-compute model to measured compute-to-target (docs/theory.md, "Models of
compute-to-target").

This is the `thm45` model of `analysis.models` with the fields the report and `study verify` read (alpha, tau0,
rho); `analysis.models` fits and compares every registered model with the same likelihood.

Model: the compute a configuration needs to reach the target is proportional to Theorem 4.5's objective,

    log C(x, y) = log s + log J(x, y; mu, rho, alpha, tau0) + eps,     eps ~ N(0, sigma²),

with the shifted power-law noise sigma²(tau) = (1 + tau/tau0)^(2 alpha) (the scale sigma0² is absorbed in s) and, by
default, the distinct-draw variance form of the `uniform` strategy (no 1/x duplicate term). mu is the study's
reference mu (measured), not fitted. Free: log s, alpha, log tau0, log rho, log sigma.

Censored runs (target never reached) only say C > U, U the compute they spent: they enter the likelihood as
log P(log C > log U) = log Phi((log J_pred - log U) / sigma) (a Tobit model), never as measurements. A run read with
an estimator that only brackets the crossing (`first`, `interpolated`: between two evaluations) enters as
interval-censored, log P(low < C <= high).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize

from workbench import knobs

from analysis import phases
from analysis.models import log_likelihood
from analysis.theory import objective_J, shifted_power_law_sigma_bar_sq

PARAMS = ("log_scale", "alpha", "log_tau0", "log_rho", "log_sigma")
BOUNDS = [
    (-20, 20),
    (0.0, 3.0),
    (math.log(0.05), math.log(1e3)),
    (math.log(1e-4), math.log(1e2)),
    (math.log(1e-3), math.log(5)),
]


@dataclass
class Fit:
    params: dict[str, float]
    mu: float
    with_replacement: bool
    n_points: int
    n_censored: int
    log_likelihood: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95% bootstrap percentile intervals (alpha, tau0, rho, scale, sigma)."""
    loco: dict[str, float] = field(default_factory=dict)
    """Leave-one-configuration-out error of the log compute-to-target (uncensored configurations)."""
    r2_log: float = float("nan")
    median_abs_log_error: float = float("nan")

    @property
    def alpha(self) -> float:
        return self.params["alpha"]

    @property
    def rho(self) -> float:
        return math.exp(self.params["log_rho"])

    @property
    def tau0(self) -> float:
        return math.exp(self.params["log_tau0"])

    def predict(self, x, y):
        """Predicted compute-to-target at (x, y)."""
        return predict(self.params, np.asarray(x, float), np.asarray(y, float), self.mu, self.with_replacement)

    def summary(self) -> dict:
        return {
            "alpha": self.alpha,
            "tau0": self.tau0,
            "rho": self.rho,
            "scale": math.exp(self.params["log_scale"]),
            "sigma": math.exp(self.params["log_sigma"]),
            "mu": self.mu,
            "with_replacement": self.with_replacement,
            "n_points": self.n_points,
            "n_censored": self.n_censored,
            "log_likelihood": self.log_likelihood,
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "loco": self.loco,
            "r2_log": self.r2_log,
            "median_abs_log_error": self.median_abs_log_error,
        }


def predict(params: dict[str, float], x, y, mu: float, with_replacement: bool = False):
    sbar = shifted_power_law_sigma_bar_sq(params["alpha"], math.exp(params["log_tau0"]))
    return math.exp(params["log_scale"]) * objective_J(x, y, mu, math.exp(params["log_rho"]), sbar, with_replacement)


def _neg_log_lik(theta, x, y, logc, censored, mu, with_replacement, bracket=None):
    p = dict(zip(PARAMS, theta))
    pred = np.log(predict(p, x, y, mu, with_replacement))
    return -float(np.sum(log_likelihood(pred, logc, censored, math.exp(p["log_sigma"]), bracket)))


def fit_points(
    x,
    y,
    compute,
    censored,
    mu: float,
    with_replacement: bool = False,
    starts: int = 12,
    seed: int = 0,
    init: dict | None = None,
    bracket=None,
) -> Fit:
    """Maximum-likelihood fit to per-run points (x, y, compute-to-target or the censoring bound, censored flag;
    `bracket`: (low, high) per run, the compute between which its crossing lies, low = high for a point value).

    Multi-start L-BFGS-B; `init` (a previous fit's params) is tried first, as bootstrap and LOCO refits do.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    logc, censored = np.log(np.asarray(compute, float)), np.asarray(censored, bool)
    logb = None if bracket is None else tuple(np.log(np.maximum(np.asarray(b, float), 1e-12)) for b in bracket)
    rng = np.random.default_rng(seed)
    best = None
    for i in range(starts):
        if i == 0 and init is not None:
            res = optimize.minimize(
                _neg_log_lik,
                np.array([init[k] for k in PARAMS]),
                args=(x, y, logc, censored, mu, with_replacement, logb),
                method="L-BFGS-B",
                bounds=BOUNDS,
            )
            best = res
            continue
        theta0 = np.array(
            [
                float(np.median(logc)) if i == 0 else rng.uniform(np.min(logc) - 2, np.max(logc) + 2),
                0.3 if i == 0 else rng.uniform(0.02, 1.5),
                0.0 if i == 0 else rng.uniform(math.log(0.1), math.log(100)),
                math.log(0.3) if i == 0 else rng.uniform(math.log(1e-3), math.log(10)),
                math.log(0.3),
            ]
        )
        res = optimize.minimize(
            _neg_log_lik,
            theta0,
            args=(x, y, logc, censored, mu, with_replacement, logb),
            method="L-BFGS-B",
            bounds=BOUNDS,
        )
        if best is None or res.fun < best.fun:
            best = res
    params = dict(zip(PARAMS, map(float, best.x)))
    fit = Fit(params, mu, with_replacement, len(x), int(censored.sum()), -float(best.fun))
    ok = ~censored
    if ok.sum() >= 2:
        resid = logc[ok] - np.log(fit.predict(x[ok], y[ok]))
        fit.median_abs_log_error = float(np.median(np.abs(resid)))
        ss_tot = float(np.sum((logc[ok] - logc[ok].mean()) ** 2))
        fit.r2_log = 1 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else float("nan")
    return fit


def points(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series, np.ndarray, np.ndarray]:
    """(x, y, value, censored) of per-seed runs for the likelihood: a run that reached the target is a measurement
    (its compute-to-target); a censored run only says C > U, U the compute it spent (`total_units`), not the
    penalised value the study ranks it by (`workbench.compute.to_target`)."""
    censored = runs["censored"].astype(bool).to_numpy()
    value = np.where(censored, runs["total_units"].to_numpy(float), runs["compute_to_target"].to_numpy(float))
    return runs["x"], runs["y"], value, censored


def brackets(runs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Per run, the compute between which its crossing lies (`low_units`, `high_units`), for interval censoring."""
    if "low_units" not in runs:
        return None
    return runs["low_units"].to_numpy(float), runs["high_units"].to_numpy(float)


def fit_runs(
    runs: pd.DataFrame,
    mu: float,
    with_replacement: bool = False,
    bootstrap: int = 200,
    seed: int = 0,
    bar: bool = False,
) -> Fit:
    """Fit the per-seed runs of a study, then bootstrap (resampling configurations) and leave-one-configuration-out;
    the refits counted on stderr (`analysis.phases`: a bar when `bar`, else a line every few seconds)."""
    fit = fit_points(*points(runs), mu, with_replacement, seed=seed, bracket=brackets(runs))
    configs = [g for _, g in runs.groupby(["x", "y"])]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in phases.counted(range(bootstrap), bootstrap, "bootstrap refits", bar):
        sample = pd.concat([configs[i] for i in rng.integers(0, len(configs), len(configs))])
        if sample["censored"].all():
            continue
        b = fit_points(
            *points(sample),
            mu,
            with_replacement,
            starts=2,
            seed=int(rng.integers(1 << 30)),
            init=fit.params,
            bracket=brackets(sample),
        )
        draws.append(b)
    if draws:
        table = {
            "alpha": [d.alpha for d in draws],
            "tau0": [d.tau0 for d in draws],
            "rho": [d.rho for d in draws],
            "scale": [math.exp(d.params["log_scale"]) for d in draws],
            "sigma": [math.exp(d.params["log_sigma"]) for d in draws],
        }
        fit.intervals = {k: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for k, v in table.items()}
    fit.loco = leave_one_configuration_out(runs, mu, with_replacement, seed, init=fit.params)
    return fit


def leave_one_configuration_out(
    runs: pd.DataFrame, mu: float, with_replacement: bool = False, seed: int = 0, init: dict | None = None
) -> dict[str, float]:
    """Refit without each configuration and predict its median compute-to-target (uncensored configurations only)."""
    errors = []
    for (x, y), held in runs.groupby(["x", "y"]):
        rest = runs[~((runs["x"] == x) & (runs["y"] == y))]
        if held["censored"].mean() >= 0.5 or rest["censored"].all() or len(rest) < 3:
            continue
        f = fit_points(*points(rest), mu, with_replacement, starts=3, seed=seed, init=init, bracket=brackets(rest))
        errors.append(float(np.log(f.predict(x, y)) - np.log(held["compute_to_target"].median())))
    if not errors:
        return {"n": 0}
    e = np.asarray(errors)
    return {
        "n": len(e),
        "median_abs_log_error": float(np.median(np.abs(e))),
        "rmse_log": float(np.sqrt(np.mean(e**2))),
        "bias_log": float(np.mean(e)),
    }


def predicted_optimum(
    fit: Fit, x_bounds=(1.0, 64.0), y_bounds=(1.0, 16.0), distinct: bool = True
) -> tuple[float, float, float]:
    """argmin of the fitted compute over the knobs' feasible region (y >= 1; x >= y for distinct draws).

    Returns (x*, y*, predicted compute). A grid in log space refined by Nelder-Mead.
    """
    xs = np.exp(np.linspace(math.log(x_bounds[0]), math.log(x_bounds[1]), 121))
    ys = np.exp(np.linspace(math.log(y_bounds[0]), math.log(y_bounds[1]), 121))
    X, Y = np.meshgrid(xs, ys)
    C = fit.predict(X, Y)
    if distinct:
        C = np.where(knobs.feasible(X, Y), C, np.inf)
    i = np.unravel_index(np.argmin(C), C.shape)
    x0, y0 = X[i], Y[i]

    def f(t):
        x, y = math.exp(t[0]), math.exp(t[1])
        if not (x_bounds[0] <= x <= x_bounds[1] and y_bounds[0] <= y <= y_bounds[1]) or (
            distinct and not knobs.feasible(x, y)
        ):
            return float("inf")
        return float(np.log(fit.predict(x, y)))

    res = optimize.minimize(
        f, [math.log(x0), math.log(y0)], method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-12}
    )
    x, y = (math.exp(res.x[0]), math.exp(res.x[1])) if math.isfinite(res.fun) else (x0, y0)
    return x, y, float(fit.predict(x, y))
