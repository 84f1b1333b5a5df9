"""Models of compute-to-target, as a registry: fitted to a study's runs, compared, and asked for an optimum.

Every model predicts log C(x, y) (and, for `extended_lr`, of the learning rate) up to a fitted scale; the runs
scatter around it with a log-normal residual of fitted width sigma. Censored runs (target never reached) say only
C > U and runs read by an estimator that brackets the crossing say low < C <= high: `log_likelihood` is the one
home of that likelihood (Tobit with interval censoring), which `analysis.fit` uses too. Equations and their
sources: docs/theory.md, "Models of compute-to-target".

Models (the issue-13 set):

- `thm45`: Theorem 4.5's objective with the distinct-draw variance of the `uniform` strategy,
  C = s·sigma_bar²(x)·(1 + y/mu)·(1/y + rho) (`analysis.fit` fits this one for the report's optimum);
- `with_replacement`: the same with the duplicate-draw term, (1/y + 1/x + rho);
- `extended`: a fixed learning rate with a noise floor (docs/theory.md, regime B made explicit),
  C = s·(1 + mu/y)/(1 + mu) / (1 - V_eff/V*), V_eff = sigma_bar²(x)·(1 + c·y/x + rho·y): c·y/x is the lost local
  diversity of reusing rollouts within a short window, rho·y the coupling, V* the noise the learning rate tolerates;
- `extended_lr`: `extended` with the learning rate as an input (lam = lr / lr_ref): C = s·cost(y) / (lam·(1 -
  lam·V_eff/V*)), for studies that search the learning rate; with one learning rate it is `extended`.

`fit_model` fits one model (multi-start L-BFGS-B), `fit_model_runs` adds bootstrap intervals over configurations,
the **unidentified** flags (a parameter whose 95% profile-likelihood interval runs into a bound) and the
leave-one-configuration-out error; `compare` fits every registered model and ranks them; `optimum` minimises a fitted model over the knobs
and refuses, with the reason, when the minimum lies on a flat ridge or at the edge of the searched range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from workbench import knobs
from workbench.prediction import LrOptimum, ProbePrediction, ProbeStability, SweepPoint

from analysis import phases
from analysis.theory import objective_J, shifted_power_law_sigma_bar_sq


# ---------------------------------------------------------------- the likelihood


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_likelihood(pred_log, logc, censored, sigma: float, bracket=None) -> np.ndarray:
    """Per run: log density of a measured log compute `logc` under N(pred_log, sigma²); for a censored run the log
    probability of exceeding its bound (`logc` is then log of its total compute); for a run with a `bracket`
    (log low, log high) and low < high, the log probability of the interval."""
    # scipy.special's ndtr and log_ndtr, not scipy.stats.norm: the same numbers, without the distribution
    # machinery's per-call overhead (this runs some hundred thousand times in a report's bootstrap refits)
    z = (logc - pred_log) / sigma
    ll = np.where(censored, special.log_ndtr(-z), -0.5 * z * z - LOG_SQRT_2PI - math.log(sigma))
    if bracket is not None:
        loglow, loghigh = bracket
        bracketed = ~censored & (loglow < loghigh - 1e-9)
        if bracketed.any():
            mass = special.ndtr((loghigh - pred_log) / sigma) - special.ndtr((loglow - pred_log) / sigma)
            ll = np.where(bracketed, np.log(np.maximum(mass, 1e-300)), ll)
    return ll


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Param:
    name: str
    """As fitted; a `log_` prefix means the parameter is reported as exp(value) under the rest of the name."""
    low: float
    high: float
    start: float

    @property
    def reported(self) -> str:
        return self.name[4:] if self.name.startswith("log_") else self.name

    def natural(self, value: float) -> float:
        return math.exp(value) if self.name.startswith("log_") else value


@dataclass(frozen=True)
class Model:
    name: str
    title: str
    params: tuple[Param, ...]
    log_compute: Callable[[dict[str, float], np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]
    """(params, x, y, lam = lr / lr_ref, mu) -> predicted log compute-to-target."""
    uses_lr: bool = False
    """Only informative when the study's runs use more than one learning rate."""


MODELS: dict[str, Model] = {}
SIGMA = Param("log_sigma", math.log(1e-3), math.log(5.0), math.log(0.3))
"""The residual's width, fitted with every model."""


def register(model: Model) -> Model:
    if model.name in MODELS:
        raise ValueError(f"model {model.name!r} is already registered")
    MODELS[model.name] = model
    return model


SCALE = Param("log_scale", -20.0, 20.0, 0.0)  # started at the median log compute
ALPHA = Param("alpha", 0.0, 3.0, 0.3)
TAU0 = Param("log_tau0", math.log(0.05), math.log(1e3), 0.0)
RHO = Param("log_rho", math.log(1e-4), math.log(1e2), math.log(0.3))
DIVERSITY = Param("log_c", math.log(1e-3), math.log(1e2), 0.0)
FLOOR = Param("log_vstar", math.log(0.1), math.log(1e4), math.log(10.0))
SHARPNESS = 50.0
"""How sharply `extended` approaches its noise floor: 1 - V/V* is replaced by softplus(50 (1 - V/V*))/50, equal to it
above ~0.05 and positive below, so the likelihood stays finite where a configuration cannot reach the target."""


def _sigma_bar(p: dict[str, float], x):
    return shifted_power_law_sigma_bar_sq(p["alpha"], math.exp(p["log_tau0"]))(x)


def _thm45(with_replacement: bool):
    def log_compute(p, x, y, lam, mu):
        sbar = shifted_power_law_sigma_bar_sq(p["alpha"], math.exp(p["log_tau0"]))
        return p["log_scale"] + np.log(objective_J(x, y, mu, math.exp(p["log_rho"]), sbar, with_replacement))

    return log_compute


def _v_eff(p, x, y):
    """The extended model's effective noise: sigma_bar²(x)(1 + c·y/x + rho·y)."""
    return _sigma_bar(p, x) * (1.0 + math.exp(p["log_c"]) * y / x + math.exp(p["log_rho"]) * y)


@np.errstate(divide="ignore", over="ignore")
def _extended(p, x, y, lam, mu):
    v_eff = _v_eff(p, x, y)
    room = np.logaddexp(0.0, SHARPNESS * (1.0 - lam * v_eff / math.exp(p["log_vstar"]))) / SHARPNESS
    return p["log_scale"] + np.log((1.0 + mu / y) / (1.0 + mu)) - np.log(lam) - np.log(room)


register(
    Model(
        "thm45",
        "Theorem 4.5, distinct draws: s·sigma_bar²(x)(1 + y/mu)(1/y + rho)",
        (SCALE, ALPHA, TAU0, RHO),
        _thm45(False),
    )
)
register(
    Model(
        "with_replacement",
        "Theorem 4.5, with replacement: s·sigma_bar²(x)(1 + y/mu)(1/y + 1/x + rho)",
        (SCALE, ALPHA, TAU0, RHO),
        _thm45(True),
    )
)
register(
    Model(
        "extended",
        "fixed lr with a noise floor: s·cost(y)/(1 - V_eff/V*), V_eff = sigma_bar²(x)(1 + c·y/x + rho·y)",
        (SCALE, ALPHA, TAU0, DIVERSITY, RHO, FLOOR),
        lambda p, x, y, lam, mu: _extended(p, x, y, np.ones_like(x), mu),
    )
)
register(
    Model(
        "extended_lr",
        "extended with the learning rate: s·cost(y)/(lam(1 - lam·V_eff/V*)), lam = lr/lr_ref",
        (SCALE, ALPHA, TAU0, DIVERSITY, RHO, FLOOR),
        _extended,
        uses_lr=True,
    )
)


# ---------------------------------------------------------------- fitting


@dataclass
class ModelFit:
    model: str
    params: dict[str, float]
    """As fitted (log-scale where the name says so), including log_sigma."""
    mu: float
    lr_ref: float
    n_points: int
    n_censored: int
    log_likelihood: float
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95% bootstrap percentile intervals over configurations, on the reported (natural) scale."""
    unidentified: list[str] = field(default_factory=list)
    """Reported names of parameters whose 95% profile-likelihood interval runs into a bound (held at the bound, the
    others refitted, the fit is not significantly worse): the data do not pin them down."""
    loco: dict = field(default_factory=dict)
    """`leave_one_configuration_out`: n, median_abs_log_error, rmse_log, bias_log and the per-configuration errors."""
    r2_log: float = float("nan")
    median_abs_log_error: float = float("nan")

    @property
    def k(self) -> int:
        return len(self.params)

    @property
    def aic(self) -> float:
        return 2 * self.k - 2 * self.log_likelihood

    @property
    def sigma(self) -> float:
        return math.exp(self.params["log_sigma"])

    def predict(self, x, y, lr=None):
        """Predicted compute-to-target at (x, y) (and lr, for a model that uses it; default lr_ref)."""
        x, y = np.asarray(x, float), np.asarray(y, float)
        lam = np.ones(np.broadcast(x, y).shape) if lr is None else np.asarray(lr, float) / self.lr_ref
        with np.errstate(over="ignore"):  # a configuration beyond the noise floor: infinite compute
            return np.exp(MODELS[self.model].log_compute(self.params, x, y, lam, self.mu))

    @classmethod
    def from_summary(cls, summary: dict) -> "ModelFit":
        """The fit a `summary()` describes, able to predict again (the report's JSON holds summaries)."""
        params = {}
        for p in _all_params(MODELS[summary["model"]]):
            value = float(summary["params"][p.reported])
            params[p.name] = math.log(value) if p.name.startswith("log_") else value
        return cls(
            summary["model"],
            params,
            float(summary["mu"]),
            float(summary["lr_ref"]),
            int(summary["n_points"]),
            int(summary["n_censored"]),
            float(summary["log_likelihood"]),
        )

    def reported(self) -> dict[str, float]:
        spec = {p.name: p for p in (*MODELS[self.model].params, SIGMA)}
        return {spec[k].reported: spec[k].natural(v) for k, v in self.params.items()}

    def summary(self) -> dict:
        return {
            "model": self.model,
            "title": MODELS[self.model].title,
            "params": self.reported(),
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "unidentified": self.unidentified,
            "n_points": self.n_points,
            "n_censored": self.n_censored,
            "log_likelihood": self.log_likelihood,
            "aic": self.aic,
            "loco": self.loco,
            "r2_log": self.r2_log,
            "median_abs_log_error": self.median_abs_log_error,
            "mu": self.mu,
            "lr_ref": self.lr_ref,
        }


def _all_params(model: Model) -> tuple[Param, ...]:
    return (*model.params, SIGMA)


def fit_model(
    model: Model | str,
    x,
    y,
    compute,
    censored,
    mu: float,
    lr=None,
    bracket=None,
    starts: int = 12,
    seed: int = 0,
    init: dict[str, float] | None = None,
    lr_ref: float | None = None,
    fixed: dict[str, float] | None = None,
) -> ModelFit:
    """Maximum likelihood of `model` on per-run points: (x, y, compute-to-target or the censoring bound, censored
    flag), the learning rate of each run (`lr`; None: one learning rate) and `bracket` = (low, high) per run.
    `fixed`: parameters held at a value (the profile likelihood)."""
    model = MODELS[model] if isinstance(model, str) else model
    x, y = np.asarray(x, float), np.asarray(y, float)
    logc, censored = np.log(np.asarray(compute, float)), np.asarray(censored, bool)
    lrs = np.ones_like(x) if lr is None else np.asarray(lr, float)
    ref = lr_ref if lr_ref is not None else float(np.median(lrs))
    lam = lrs / ref
    logb = None if bracket is None else tuple(np.log(np.maximum(np.asarray(b, float), 1e-12)) for b in bracket)
    spec = _all_params(model)
    names = [p.name for p in spec]
    fixed = fixed or {}
    bounds = [(fixed[p.name], fixed[p.name]) if p.name in fixed else (p.low, p.high) for p in spec]

    def nll(theta):
        p = dict(zip(names, theta))
        pred = model.log_compute(p, x, y, lam, mu)
        if not np.all(np.isfinite(pred)):
            return 1e12
        return -float(np.sum(log_likelihood(pred, logc, censored, math.exp(p["log_sigma"]), logb)))

    rng = np.random.default_rng(seed)
    best = None
    for i in range(starts):
        if i == 0 and init is not None:
            theta0 = np.array([init[n] for n in names])
        elif i == 0:
            theta0 = np.array([float(np.median(logc)) if p is SCALE else p.start for p in spec])
        else:
            theta0 = np.array(
                [
                    rng.uniform(np.min(logc) - 2, np.max(logc) + 2)
                    if p is SCALE
                    else rng.uniform(p.low + 0.1 * (p.high - p.low), p.high - 0.1 * (p.high - p.low))
                    for p in spec
                ]
            )
        theta0 = np.clip(theta0, [b[0] for b in bounds], [b[1] for b in bounds])
        res = optimize.minimize(nll, theta0, method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    params = dict(zip(names, map(float, best.x)))
    fit = ModelFit(model.name, params, mu, ref, len(x), int(censored.sum()), -float(best.fun))
    ok = ~censored
    if ok.sum() >= 2:
        resid = logc[ok] - np.log(fit.predict(x[ok], y[ok], lrs[ok]))
        fit.median_abs_log_error = float(np.median(np.abs(resid)))
        ss_tot = float(np.sum((logc[ok] - logc[ok].mean()) ** 2))
        fit.r2_log = 1 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else float("nan")
    return fit


def _points(runs: pd.DataFrame):
    censored = runs["censored"].astype(bool).to_numpy()
    value = np.where(censored, runs["total_units"].to_numpy(float), runs["compute_to_target"].to_numpy(float))
    lr = runs["lr"].to_numpy(float) if "lr" in runs else None
    bracket = (runs["low_units"].to_numpy(float), runs["high_units"].to_numpy(float)) if "low_units" in runs else None
    return runs["x"].to_numpy(float), runs["y"].to_numpy(float), value, censored, lr, bracket


def _config_keys(runs: pd.DataFrame) -> list[str]:
    return ["x", "y", "lr"] if "lr" in runs else ["x", "y"]


PROFILE_DROP = 0.5 * stats.chi2.ppf(0.95, 1)
"""1.92: a parameter value whose profile log-likelihood is within this of the maximum lies in its 95% interval."""


def _runs_into_a_bound(model: Model, runs: pd.DataFrame, mu: float, fit: ModelFit, p: Param) -> bool:
    """Whether the 95% profile-likelihood interval of `p` reaches one of its bounds: the parameter held at the
    bound, every other one refitted, and the log-likelihood falls by less than `PROFILE_DROP`."""
    x, y, value, censored, lr, bracket = _points(runs)
    for bound in (p.low, p.high):
        if abs(fit.params[p.name] - bound) <= 1e-3 * (p.high - p.low):
            return True
        held = fit_model(
            model,
            x,
            y,
            value,
            censored,
            mu,
            lr,
            bracket,
            starts=3,
            seed=1,
            init=fit.params,
            lr_ref=fit.lr_ref,
            fixed={p.name: bound},
        )
        if fit.log_likelihood - held.log_likelihood < PROFILE_DROP:
            return True
    return False


def fit_model_runs(
    model: Model | str, runs: pd.DataFrame, mu: float, bootstrap: int = 100, seed: int = 0, bar: bool = False
) -> ModelFit:
    """`fit_model` on a study's per-seed runs, then bootstrap intervals (resampling configurations; counted on
    stderr, `analysis.phases`), the unidentified flags and the leave-one-configuration-out error."""
    model = MODELS[model] if isinstance(model, str) else model
    x, y, value, censored, lr, bracket = _points(runs)
    fit = fit_model(model, x, y, value, censored, mu, lr, bracket, seed=seed)
    configs = [g for _, g in runs.groupby(_config_keys(runs))]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in phases.counted(range(bootstrap), bootstrap, f"{model.name} bootstrap refits", bar):
        sample = pd.concat([configs[i] for i in rng.integers(0, len(configs), len(configs))])
        if sample["censored"].all():
            continue
        sx, sy, sv, sc, slr, sb = _points(sample)
        draws.append(
            fit_model(
                model,
                sx,
                sy,
                sv,
                sc,
                mu,
                slr,
                sb,
                starts=2,
                seed=int(rng.integers(1 << 30)),
                init=fit.params,
                lr_ref=fit.lr_ref,
            ).params
        )
    spec = {p.name: p for p in _all_params(model)}
    for name, p in spec.items():
        if draws:
            values = [d[name] for d in draws]
            fit.intervals[p.reported] = (
                p.natural(float(np.percentile(values, 2.5))),
                p.natural(float(np.percentile(values, 97.5))),
            )
        if name not in ("log_scale", "log_sigma") and _runs_into_a_bound(model, runs, mu, fit, p):
            fit.unidentified.append(p.reported)
    fit.loco = leave_one_configuration_out(model, runs, mu, seed, init=fit.params, lr_ref=fit.lr_ref)
    return fit


def leave_one_configuration_out(
    model: Model | str,
    runs: pd.DataFrame,
    mu: float,
    seed: int = 0,
    init: dict | None = None,
    lr_ref: float | None = None,
) -> dict:
    """Refit without each configuration and predict its median compute-to-target (configurations with most seeds
    censored are skipped: their median is not a measurement). `errors`: each configuration's log predicted - log
    measured, keyed by x, y and lr, which `analysis.null_models.skill` pairs with the null predictors'."""
    model = MODELS[model] if isinstance(model, str) else model
    keys = _config_keys(runs)
    errors = []
    for key, held in runs.groupby(keys):
        mask = np.ones(len(runs), bool)
        for k, v in zip(keys, key):
            mask &= runs[k].to_numpy() == v
        rest = runs[~mask]
        if held["censored"].mean() >= 0.5 or rest["censored"].all() or len(rest) < 3:
            continue
        rx, ry, rv, rc, rlr, rb = _points(rest)
        f = fit_model(model, rx, ry, rv, rc, mu, rlr, rb, starts=3, seed=seed, init=init, lr_ref=lr_ref)
        held_lr = held["lr"].iloc[0] if "lr" in held else None
        errors.append(
            {
                "x": float(key[0]),
                "y": float(key[1]),
                "lr": None if held_lr is None else float(held_lr),
                "error": float(np.log(f.predict(key[0], key[1], held_lr)) - np.log(held["compute_to_target"].median())),
            }
        )
    if not errors:
        return {"n": 0, "errors": []}
    e = np.asarray([r["error"] for r in errors])
    return {
        "n": len(e),
        "median_abs_log_error": float(np.median(np.abs(e))),
        "rmse_log": float(np.sqrt(np.mean(e**2))),
        "bias_log": float(np.mean(e)),
        "errors": errors,
    }


def compare(
    runs: pd.DataFrame,
    mu: float,
    models: list[str] | None = None,
    bootstrap: int = 100,
    seed: int = 0,
    bar: bool = False,
) -> list[ModelFit]:
    """Every registered model (those that use the learning rate only when the runs vary it) fitted to `runs`,
    best first: by leave-one-configuration-out median |log error|, then AIC."""
    varies_lr = "lr" in runs and runs["lr"].nunique() > 1
    names = models or [n for n, m in MODELS.items() if varies_lr or not m.uses_lr]
    fits = [fit_model_runs(n, runs, mu, bootstrap, seed, bar) for n in names]
    return sorted(fits, key=lambda f: (f.loco.get("median_abs_log_error", math.inf), f.aic))


# ---------------------------------------------------------------- the optimum


RIDGE_TOLERANCE = 0.05
"""Configurations predicted within this fraction of the minimum compute count as equally good."""
RIDGE_SPAN_X, RIDGE_SPAN_Y = 4.0, 2.0
"""A prediction is refused when the near-optimal set spans more than these factors in x or in y."""


def optimum(
    fit: ModelFit, x_bounds=(1.0, 64.0), y_bounds=(1.0, 16.0), distinct: bool = True, lr=None, lr_bounds=None
) -> dict:
    """The fitted model's argmin over the knobs (y >= 1; x >= y for distinct draws) as {x, y, compute}, or
    {refused: reason} when the minimum lies on a flat ridge (every configuration within 5% of the minimum, spanning
    more than 4x in x or 2x in y) or at the searched range's upper edge in x or y (the model does not bound it).
    A model that uses the learning rate is minimised over lr in `lr_bounds` too (default: lr_ref/4 to 4 lr_ref)
    unless `lr` fixes it, and the optimum carries `lr`."""
    xs = np.exp(np.linspace(math.log(x_bounds[0]), math.log(x_bounds[1]), 161))
    ys = np.exp(np.linspace(math.log(y_bounds[0]), math.log(y_bounds[1]), 161))
    search_lr = MODELS[fit.model].uses_lr and lr is None
    if search_lr:
        lo, hi = lr_bounds or (fit.lr_ref / 4, fit.lr_ref * 4)
        lrs = np.exp(np.linspace(math.log(lo), math.log(hi), 41))
        L, Y, X = np.meshgrid(lrs, ys, xs, indexing="ij")
        C = fit.predict(X, Y, L)
    else:
        X, Y = np.meshgrid(xs, ys)
        C = fit.predict(X, Y, lr)
    feasible = np.isfinite(C) & (knobs.feasible(X, Y) if distinct else True)
    C = np.where(feasible, C, np.inf)
    i = np.unravel_index(np.argmin(C), C.shape)
    x, y, c = float(X[i]), float(Y[i]), float(C[i])
    near = C <= c * (1 + RIDGE_TOLERANCE)
    x_span, y_span = X[near].max() / X[near].min(), Y[near].max() / Y[near].min()
    out = {
        "x": x,
        "y": y,
        "compute": c,
        "near_x": [float(X[near].min()), float(X[near].max())],
        "near_y": [float(Y[near].min()), float(Y[near].max())],
    }
    if search_lr:
        out |= {"lr": float(L[i]), "near_lr": [float(L[near].min()), float(L[near].max())]}
        if out["lr"] in (float(lrs[0]), float(lrs[-1])):
            out["refused"] = (
                f"the best learning rate is at the edge of the searched range ({out['lr']:.3g}; searched"
                f" {lrs[0]:.3g} to {lrs[-1]:.3g}): the model does not bound it"
            )
            return out
    if x >= x_bounds[1] * 0.999 or y >= y_bounds[1] * 0.999:
        out["refused"] = (
            f"the minimum is at the edge of the searched range (x {x:.3g}, y {y:.3g}; searched x <= {x_bounds[1]:g},"
            f" y <= {y_bounds[1]:g}): the model does not bound the optimum"
        )
    elif x_span > RIDGE_SPAN_X or y_span > RIDGE_SPAN_Y:
        out["refused"] = (
            f"the minimum lies on a flat ridge: predicted compute within {RIDGE_TOLERANCE:.0%} of it for x in"
            f" [{X[near].min():.3g}, {X[near].max():.3g}] and y in [{Y[near].min():.3g}, {Y[near].max():.3g}]"
        )
        out["ridge_point"] = _ridge_point(X, Y, C, near, L if search_lr else None)
    return out


def _ridge_point(X, Y, C, near, L=None) -> dict:
    """The simplest configuration of a flat ridge: the smallest horizon on it (least memory, least staleness), then
    the least reuse, then (when the model uses it) the learning rate it predicts cheapest there. The model says
    every point of the ridge costs within `RIDGE_TOLERANCE` of its minimum; running this one tests that claim."""
    at = near & np.isclose(X, X[near].min())
    at &= np.isclose(Y, Y[at].min())
    i = np.unravel_index(np.argmin(np.where(at, C, np.inf)), C.shape)
    point = {"x": float(X[i]), "y": float(Y[i]), "compute": float(C[i])}
    return point | ({"lr": float(L[i])} if L is not None else {})


def probe_optimum(terms: list[dict], c: float, rho: float, mu: float, batch_size: int, y_max: float = 16.0) -> dict:
    """The optimum a probe's measurements predict, at a learning rate re-tuned per configuration (what Theorem 4.5
    assumes). By the descent lemma a step along a batch mean g_bar with noise V improves the objective by at most
    (g_0·g_bar)²/(2L(|g_bar|² + V)) at the best step size, where g_0 is the fresh gradient; so

        compute to target ∝ cost(y) · (|g_bar_x|² + V(x, y)/B) / (g_0·g_bar_x)²,
        V(x, y) = sigma_bar²(x) · (1 + c·y/x) · (1 + (y - 1)·rho),   cost(y) = (1 + mu/y)/(1 + mu),

    with g_bar_x the mean gradient over ages 0..x-1 (`workbench.noise.horizon_terms`: the staleness bias enters
    through its projection on g_0 and its norm), c·y/x the within-group correlation a batch keeps when it holds
    y/x of each group (1 + c at on-policy, where a batch is whole groups), and (y - 1)·rho the noise a rollout
    repeats over its y uses (none on-policy; the paper writes rho·y, which charges on-policy a coupling it
    does not have). L cancels against on-policy (x 1, y 1). `terms`: dicts with x, sigma2_bar, signal, mixed, cross.

    Returns {x, y, relative_compute, lr_factor, near_x, near_y} (lr_factor: the best lr relative to on-policy's), with
    `refused` and the reason when the fresh gradient is not resolved from its noise, when the minimum is at the
    largest measured horizon (the probe's buffer does not bound it) or when every point within 5% of the minimum
    spans more than 4x in x or 2x in y (a flat ridge)."""
    rows = sorted(terms, key=lambda t: t["x"])
    if not rows or rows[0]["x"] != 1 or rows[0]["signal"] <= 0:
        return {
            "refused": "the fresh mean gradient is not resolved from its sampling noise (|g_0|² <= 0 after the correction)"
        }
    on = rows[0]
    v_on = on["sigma2_bar"] * (1.0 + c) / batch_size
    base = (on["signal"] + v_on) / on["signal"] ** 2
    ys = np.exp(np.linspace(0.0, math.log(y_max), 121))
    best, grid = None, []
    for t in rows:
        if t["cross"] <= 0:
            continue  # the stale mean gradient does not descend along the fresh one
        y = ys[ys <= t["x"] + 1e-9]
        v = t["sigma2_bar"] * (1.0 + c * y / t["x"]) * (1.0 + (y - 1.0) * rho) / batch_size
        rel = (1.0 + mu / y) / (1.0 + mu) * (max(t["mixed"], 0.0) + v) / t["cross"] ** 2 / base
        lr = t["cross"] / (max(t["mixed"], 0.0) + v) / (on["signal"] / (on["signal"] + v_on))
        for yy, r, f in zip(y, rel, lr):
            grid.append((float(r), t["x"], float(yy), float(f)))
    best = min(grid)
    rel, x, y, lr = best
    near = [g for g in grid if g[0] <= rel * (1 + RIDGE_TOLERANCE)]
    nx, ny = [g[1] for g in near], [g[2] for g in near]
    out = {
        "x": float(x),
        "y": y,
        "relative_compute": rel,
        "lr_factor": lr,
        "near_x": [float(min(nx)), float(max(nx))],
        "near_y": [min(ny), max(ny)],
        "at_edge": x >= rows[-1]["x"] and x > 1,
    }
    if out["at_edge"]:
        out["refused"] = (
            f"the minimum is at the largest horizon the probe measured (x {x:g}): a longer buffer might"
            f" be better still; probe with a larger --x"
        )
    elif max(nx) / min(nx) > RIDGE_SPAN_X or max(ny) / min(ny) > RIDGE_SPAN_Y:
        out["refused"] = (
            f"the minimum lies on a flat ridge: predicted compute within {RIDGE_TOLERANCE:.0%} of it for x in"
            f" [{min(nx):g}, {max(nx):g}] and y in [{min(ny):.3g}, {max(ny):.3g}]"
        )
    return out


def probe_prediction(
    horizon: list[dict],
    draws: list[list[dict]],
    group_correlation: float,
    rho: float,
    mu: float,
    group_size: int,
    batch_size: int,
) -> ProbePrediction:
    """A probe's measurements (`workbench.trial.probe.ProbeResult`: horizon terms and their bootstrap draws, the
    within-group correlation, rho) turned into `probe_optimum` at accounting ratio `mu`, with c =
    group_correlation·(G - 1), rho clipped to [0, 1], and the prediction's stability over the draws
    (`ProbeStability`: the share of draws at the same point, the 95% range of x and y over the draws). Refused when
    the point lies outside that range (on the split task, 96 probe steps put it at x 12, y 1 while all 50 draws put
    it at on-policy: the fresh signal barely above its noise correction)."""
    if not (math.isfinite(rho) and math.isfinite(mu) and mu > 0):
        return ProbePrediction(refused=f"rho ({rho:.3g}) or mu ({mu:.3g}) not measured")
    c = max(group_correlation, 0.0) * (group_size - 1) if math.isfinite(group_correlation) else 0.0
    rho = min(max(rho, 0.0), 1.0)
    out = ProbePrediction.from_json({**probe_optimum(horizon, c, rho, mu, batch_size), "c": c, "rho": rho, "mu": mu})
    points = [(d["x"], round(d["y"], 2)) for d in (probe_optimum(h, c, rho, mu, batch_size) for h in draws) if "x" in d]
    if not (out.has_point and points):
        return out
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    st = ProbeStability(
        draws=len(draws),
        same_point=sum(p == (out.x, round(out.y, 2)) for p in points) / len(draws),
        x_95=(float(np.quantile(xs, 0.025)), float(np.quantile(xs, 0.975))),
        y_95=(float(np.quantile(ys, 0.025)), float(np.quantile(ys, 0.975))),
    )
    out = replace(out, stability=st)
    if not st.covers(out.x, out.y) and out.refused is None:
        out = replace(
            out,
            refused=f"unstable: the point (x {out.x:g}, y {out.y:.3g}) lies outside its own replicates' 95% range"
            f" (x {st.x_95[0]:g} to {st.x_95[1]:g}, y {st.y_95[0]:.3g} to {st.y_95[1]:.3g};"
            f" {st.same_point:.0%} of {len(draws)} at the point): the measurements do not pin the optimum",
        )
    return out


def lr_optimum(points: Sequence[SweepPoint]) -> LrOptimum:
    """The best learning rate from the probe's on-policy sweep (`workbench.trial.lr_sweep`'s `SweepPoint`s): the
    vertex of the parabola in log lr through the cheapest run and its two neighbours, with the compute there. A
    censored neighbour enters at its budget, a lower bound on its compute, so the vertex is then an upper bound on
    lr* (`bounded_by_censored`). Refused, with the reason, when no run reached the target, when the cheapest run is
    at an edge of the sweep, or when the three points do not curve upward.

    Why not `extended_lr`'s form, C ∝ 1/(lam(1 - lam/lam_max))? On the default task's on-policy runs (lr 2.5e-5,
    5e-5, 1e-4: 1, 0.65, 0.56 of the first's compute) the first two points put lam_max at 5.4x the first lr, which
    predicts 1e-4 1.24x worse than 5e-5; it is 0.86x. The return of a larger learning rate fades more gently than
    that form's wall (Adam's step does not scale with the gradient's size), so the sweep interpolates locally."""
    rows = sorted(points, key=lambda p: p.lr)
    reached = [p for p in rows if not p.censored]
    if not reached:
        return LrOptimum(refused="no run of the learning-rate sweep reached the target")
    cheapest = min(reached, key=lambda p: p.compute_to_target)
    i = rows.index(cheapest)
    if i in (0, len(rows) - 1):
        edge = "largest" if i == len(rows) - 1 else "smallest"
        return LrOptimum(
            lr=cheapest.lr,
            compute=cheapest.compute_to_target,
            refused=f"the cheapest run is at the sweep's {edge} learning rate ({cheapest.lr:.3g}): the sweep does not"
            " bound lr*",
        )
    three = rows[i - 1 : i + 2]
    u = np.log([p.lr for p in three])
    v = np.log([p.budget if p.censored else p.compute_to_target for p in three])
    c2, c1, c0 = np.polyfit(u - u[1], v, 2)
    if c2 <= 0:
        return LrOptimum(
            lr=cheapest.lr,
            compute=cheapest.compute_to_target,
            refused="the sweep's three cheapest points do not curve upward",
        )
    vertex = float(np.clip(-c1 / (2 * c2), u[0] - u[1], u[2] - u[1]))
    return LrOptimum(
        lr=float(math.exp(u[1] + vertex)),
        compute=float(math.exp(c0 + c1 * vertex + c2 * vertex**2)),
        bounded_by_censored=any(p.censored for p in three),
        points=len(rows),
    )


def probe_lr(predicted: ProbePrediction, sweep: Sequence[SweepPoint] | None, lr: float) -> ProbePrediction:
    """A probe's predicted point (`probe_prediction`) with its learning rate and compute. With the on-policy sweep
    (`workbench.trial.lr_sweep`), lr = on-policy's lr* (`lr_optimum`) x the point's lr_factor and the compute is
    relative_compute x the sweep's compute at lr* (the sweep and its lr* are kept even when the probe refused a point);
    without one, the trial's `lr` stands in for on-policy's lr*, which
    is right only if it was tuned (the probe cannot tell). An unbounded sweep falls back to its cheapest run's lr."""
    out = predicted
    best = lr_optimum(sweep) if sweep else None
    if sweep:
        out = replace(out, lr_sweep=tuple(sweep), lr_optimum=best)
    if not predicted.has_point:
        return out
    if not sweep:
        return replace(out, lr=lr * predicted.lr_factor, lr_source="the trial's lr (no sweep)")
    if best.lr is None:
        return replace(out, lr=lr * predicted.lr_factor, lr_source=f"the trial's lr ({best.refused})")
    source = "the sweep's cheapest run (" + best.refused + ")" if best.refused else "the sweep's lr*"
    return replace(
        out,
        lr=best.lr * predicted.lr_factor,
        lr_source=source,
        compute=predicted.relative_compute * best.compute,
    )
