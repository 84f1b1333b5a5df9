"""The paper's laws as tests against a study's measurements (docs/theory.md, "The paper's laws as tests"), each with
a verdict.

- **F1, the sqrt(mu) law.** In the synchronous setting a run's learning curve does not depend on mu, only its
  accounting does, so one grid re-accounted at several mu (`analysis.data.reaccount`) shows where the compute-optimal
  replay ratio goes when generation gets dearer. Theorem 4.5 predicts y* ∝ sqrt(mu) (when rho·x ≫ 1); the paper's
  criterion: falsified if the optimal y does not move with mu. F1 also reads the exponent e of y_opt ∝ mu^e (the
  exponents whose law, on this grid, has a slope inside the observed interval) and says **cannot separate** where
  that interval admits a linear law (e = 1) as well as the sqrt law, with a y grid that would separate them.
- **F2, the U-shape.** At fixed x, compute-to-target against y is U-shaped, its minimum near
  y*(x) = sqrt(mu / (rho + 1/x)) (with rho fitted on the other points); falsified if it is monotone or the minimum
  is 2x or more away. Tested at every mu of F1, since the re-accounting moves the predicted minimum.

- **F3, the learning-rate prescription.** The best learning rate scales with b / (sigma_bar²(x)[1 + y(rho + 1/x)]):
  it falls as y rises; falsified if it is independent of y. Needs a study that varies lr.

F6 (noise non-decreasing with age) needs the probe's sigma²(tau).

Every verdict comes from a bootstrap over seeds (the same seeds drawn for every configuration, so the comparison
stays paired), with the expanded percentiles of `workbench.stats`: **holds**, **falsified** or **unresolved**
(the data cannot tell), **cannot separate** (F1: the sqrt law and a linear law both fit), or **not testable** where
the study's grid cannot decide the law whatever the data (F1 with one replay ratio besides on-policy, F2 without
three ratios at one x, F3 with one learning rate). Slopes are compared with a tolerance (`TOL`): a slope computed as
0 comes out of the arithmetic as +-1e-17, never as 0.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.data import StudyData, reaccount
from analysis.theory import y_star
from workbench import progress, stats

log = logging.getLogger(__name__)

MUS = (0.5, 1.0, 2.0, 5.28, 10.0)
"""The mu values F1 re-accounts at: the paper's measured 5.28 (Qwen 7B on their cluster) and a decade around it."""
N_BOOT = 2000
TOL = 1e-9
"""Two slopes (or a slope and 0, or two mean log computes) closer than this are equal: float noise, not a difference."""


@dataclass
class Verdict:
    law: str
    claim: str
    verdict: str
    """`holds`, `falsified`, `unresolved`, `cannot separate` (F1) or `not testable`."""
    reason: str
    rows: list[dict] = field(default_factory=list)
    numbers: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.law} ({self.claim}): {self.verdict}: {self.reason.rstrip('.')}."


class Reaccounted:
    """A study's uniform-replay selection runs and baseline, re-accounted at each mu asked for, each mu once: a
    re-accounting reads every run's curve again (the fitted estimator refits each one: ~1-2 min for 800 runs), and
    F1, F2 and F3 share theirs (the reference mu and 5.28 twice) when the caller passes one `Reaccounted` to all."""

    def __init__(self, data: StudyData):
        self.source = data
        runs = data.runs[(data.runs["arm"] == "sampler") & (data.runs["strategy"] == "uniform")]
        self.data = dataclasses.replace(data, runs=runs)
        self._runs: dict[float, pd.DataFrame] = {}

    def runs_at(self, mu: float) -> pd.DataFrame:
        """The runs with compute-to-target at `mu` (logged when it is computed, not when it is reused)."""
        if mu not in self._runs:
            what = f"re-accounting {len(self.data.runs)} runs at mu {mu:g}"
            with progress.heartbeat(what, log):
                self._runs[mu] = reaccount(self.data, mu).runs
        return self._runs[mu]


def _log_table(data: StudyData, mus, keys=None, reaccounted: Reaccounted | None = None) -> tuple[pd.DataFrame, list]:
    """log compute-to-target per (mu, *keys) row and seed column, uniform replay's selection runs and the baseline
    (censored runs at their total: a bound), restricted to the seeds every configuration ran. Keys: (x, y), and lr
    when the study varies it (the laws then take each configuration at its best learning rate, as the paper does).
    `reaccounted`: re-accountings of `data` already made (and kept for the next law)."""
    if reaccounted is None or reaccounted.source is not data:
        reaccounted = Reaccounted(data)
    runs = reaccounted.data.runs
    if keys is None:
        keys = ("x", "y", "lr") if "lr" in runs and runs["lr"].nunique() > 1 else ("x", "y")
    frames = []
    for mu in mus:
        r = reaccounted.runs_at(mu)
        value = np.where(r["censored"] > 0, r["total_units"], r["compute_to_target"])
        frames.append(r.assign(mu=mu, log_c=np.log(value.astype(float)))[["mu", *keys, "seed", "log_c"]])
    table = pd.concat(frames).pivot_table(index=["mu", *keys], columns="seed", values="log_c", aggfunc="mean")
    seeds = [s for s in table.columns if table[s].notna().all()]
    return table[seeds], seeds


def _boot_means(table: pd.DataFrame, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, rows) mean log compute with the seeds resampled together: row 0 is the estimate itself."""
    values = table.to_numpy(float)
    n = values.shape[1]
    rng = np.random.default_rng(seed)
    idx = np.vstack([np.arange(n), rng.integers(0, n, size=(n_boot, n))])
    return values[:, idx].mean(axis=2).T


def _interval(draws: np.ndarray, n_seeds: int) -> tuple[float, float]:
    lo_q, hi_q = stats.expanded_quantiles(max(n_seeds, 2))
    return float(np.quantile(draws, lo_q)), float(np.quantile(draws, hi_q))


def _optimum_share(keys: list, cols: list[int], best: np.ndarray, floor: float = 0.05) -> dict[str, float]:
    """The share of bootstrap draws in which each (x, y) is optimal, summed over its learning rates (the compared
    keys are (mu, x, y[, lr]): keyed by (x, y) alone, the shares at different lr overwrote each other); (x, y)s
    optimal in fewer than `floor` of the draws are left out."""
    share: dict[str, float] = {}
    for i in cols:
        label = f"{keys[i][1]:g},{keys[i][2]:g}"
        share[label] = share.get(label, 0.0) + float(np.mean(best == i))
    return {k: v for k, v in share.items() if v >= floor}


def _optima_by_mu(table, mus, n_boot: int, seed: int, n_seeds: int) -> tuple[list[dict], list[np.ndarray]]:
    """At each mu: the compute-optimal configuration of the re-accounted grid with its bootstrap spread of y, and
    the bootstrap draws of y_opt (the first draw is the point estimate)."""
    boot = _boot_means(table, n_boot, seed)
    keys = list(table.index)
    rows, y_opt = [], []
    for mu in mus:
        cols = [i for i, k in enumerate(keys) if k[0] == mu]
        best = np.array(cols)[boot[:, cols].argmin(axis=1)]
        y_opt.append(np.array([keys[i][2] for i in best]))
        rows.append(
            {
                "mu": mu,
                "x": keys[best[0]][1],
                "y": keys[best[0]][2],
                **({"lr": keys[best[0]][3]} if len(keys[best[0]]) > 3 else {}),
                "compute_to_target": float(math.exp(boot[0, best[0]])),
                "y_low": _interval(y_opt[-1][1:], n_seeds)[0],
                "y_high": _interval(y_opt[-1][1:], n_seeds)[1],
                "optimum_share": _optimum_share(keys, cols, best),
            }
        )
    return rows, y_opt


def _f1_verdict(
    rows: list[dict], mus, slope: float, low: float, high: float, law: float, exponent: dict
) -> tuple[str, str]:
    """F1's verdict and why, from the measured slope's interval against the law's slope on this grid."""
    moved = f"y_opt {rows[0]['y']:g} at mu {mus[0]:g} -> {rows[-1]['y']:g} at mu {mus[-1]:g}"
    what = f"slope of log y_opt on log mu {slope:.2f} [{low:.2f}, {high:.2f}]; the sqrt law on this grid: {law:.2f}"
    if law == 0 and slope == 0:
        verdict, why = (
            "not testable",
            (
                f"the optimum stays at y {rows[0]['y']:g} from mu {mus[0]:g} to {mus[-1]:g}, and so"
                " does the sqrt law on this grid (its y* snaps to the same ratio): a grid of larger"
                " ratios would tell"
            ),
        )
    elif law < low - TOL or law > high + TOL:
        how = "does not move" if high <= 0 else ("moves more slowly" if high < law else "moves faster")
        verdict, why = (
            "falsified",
            f"the optimum {how} than sqrt(mu) would on this grid: {moved}; {what}; {exponent['words']}",
        )
    elif not exponent["separates"]:
        verdict, why = "cannot separate", f"{moved}; {what}; {exponent['words']}"
    elif low > 0:
        verdict, why = "holds", f"{moved}; {what}; {exponent['words']}"
    else:
        verdict, why = "unresolved", f"{moved}; {what}, and the interval contains 0; {exponent['words']}"
    return verdict, why


def f1_sqrt_mu(
    data: StudyData, mus=MUS, n_boot: int = N_BOOT, seed: int = 0, reaccounted: Reaccounted | None = None
) -> Verdict:
    """F1: the compute-optimal (x, y) at every mu of `mus` from one grid re-accounted, and the slope of log y_opt
    against log mu with its interval, against the slope the law itself has on this grid (`_law_on_grid`)."""
    claim = "the compute-optimal replay ratio rises like sqrt(mu)"
    table, seeds = _log_table(data, mus, reaccounted=reaccounted)
    ys = sorted(table.index.get_level_values("y").unique())
    uniform = data.runs[(data.runs["arm"] == "sampler") & (data.runs["strategy"] == "uniform")]
    replay_ys = sorted(set(uniform.loc[~uniform["baseline"].astype(bool), "y"]))
    if len(replay_ys) < 2:
        # With one ratio beside on-policy the optimum can only switch once, from on-policy to it, and re-accounting
        # at a dearer generation favours the ratio that generates less whatever the law says.
        return Verdict(
            "F1",
            claim,
            "not testable",
            f"the grid runs uniform replay at {f'one ratio (y {replay_ys[0]:g})' if replay_ys else 'no ratio'}"
            " besides on-policy; how fast the optimal ratio rises with mu needs two or more",
        )
    if len(seeds) < 2:
        return Verdict(
            "F1", claim, "not testable", f"needs 2 or more seeds common to every configuration ({len(seeds)})"
        )
    rows, y_opt = _optima_by_mu(table, mus, n_boot, seed, len(seeds))
    log_mu = np.log(np.asarray(mus, float))
    log_mu -= log_mu.mean()
    slopes = (np.log(np.vstack(y_opt)).T @ log_mu) / float(log_mu @ log_mu)
    low, high = _interval(slopes[1:], len(seeds))
    slope = float(slopes[0])
    y_observed = [r["y"] for r in rows]
    law_y = _law_on_grid(y_observed, mus, ys)
    law = _slope(law_y, mus)
    slope, low, high, law = (0.0 if abs(v) < TOL else v for v in (slope, low, high, law))  # float noise is no slope
    exponent = exponent_reading(y_observed, mus, ys, low, high)
    numbers = {
        "slope": slope,
        "slope_low": low,
        "slope_high": high,
        "law": law,
        "law_y": law_y,
        "seeds": seeds,
        "grid_y": ys,
        "exponent": exponent,
    }
    verdict, why = _f1_verdict(rows, mus, slope, low, high, law, exponent)
    return Verdict("F1", claim, verdict, f"{why}; {len(seeds)} paired seeds.", rows, numbers)


LAW_C_MIN = 1 / math.sqrt(2)
"""The sqrt law's y* = c·sqrt(mu) with c = 1/sqrt(rho + 1/x) >= 1/sqrt(2) for rho <= 1 (Assumption 4.3) and x >= 1."""


EXPONENTS = tuple(round(0.05 * k, 2) for k in range(41))
"""The exponents e of y* = c·mu^e F1 tries on the grid (0 to 2): 0.5 is the sqrt law, 1 a linear law."""


def _slope(path, mus) -> float:
    """Least-squares slope of log y on log mu."""
    log_mu = np.log(np.asarray(mus, float))
    log_mu -= log_mu.mean()
    return float(np.log(np.asarray(path, float)) @ log_mu / float(log_mu @ log_mu))


def _snap(raw_y, ys) -> np.ndarray:
    """y values floored at 1 (on-policy), capped at the grid's largest ratio, snapped to the nearest grid ratio in log."""
    grid = np.log(np.asarray(ys, float))
    raw = np.log(np.clip(np.asarray(raw_y, float), 1.0, max(ys)))
    return np.exp(grid[np.abs(raw[:, None] - grid[None, :]).argmin(axis=1)])


def _fit_law(y_observed, mus, ys, exponent: float = 0.5) -> tuple[float, list[float]]:
    """The law y*(mu) = c·mu^exponent on this grid (`_snap`), with c >= LAW_C_MIN chosen to match the observed optimum
    best (least squares in log; the smallest such c): (c, the law's y at each mu)."""
    cs = np.exp(np.linspace(math.log(LAW_C_MIN), math.log(100.0), 600))
    pred = _snap(np.outer(cs, np.asarray(mus, float) ** exponent).ravel(), ys).reshape(len(cs), len(mus))
    err = np.sum((np.log(pred) - np.log(np.asarray(y_observed, float))) ** 2, axis=1)
    i = int(np.flatnonzero(err <= err.min() + 1e-12)[0])
    return float(cs[i]), [float(v) for v in pred[i]]


def _law_on_grid(y_observed, mus, ys, exponent: float = 0.5) -> list[float]:
    """What the law y* ∝ mu^exponent (the sqrt law by default) predicts on this grid: y*(mu) = c·mu^exponent, at
    least 1 (on-policy), at most the grid's largest y, snapped to the nearest grid y in log; c >= LAW_C_MIN chosen
    to match the observed optimum best (least squares in log). A grid of few ratios, and on-policy as the floor,
    bound how far the optimum can move, so the observed motion is compared with the law's motion on the same grid,
    not with 0.5."""
    return _fit_law(y_observed, mus, ys, exponent)[1]


def exponent_reading(y_observed, mus, ys, low: float, high: float) -> dict:
    """The exponent e of y_opt ∝ mu^e, read on this grid: every e of `EXPONENTS` whose law, fitted to the observed
    optimum and snapped to the grid, has a slope inside the observed slope's interval [low, high] (the test
    inverted); the exponents whose law reproduces the observed optimum best; and whether the grid separates the
    sqrt law (0.5) from a linear one (1): the interval contains the grid slope of one and not of the other. Where
    it does not, `grid_needed`: a y grid (ratio sqrt(2) steps, up to what the two laws reach at the largest mu)
    on which the two laws' slopes differ, with those slopes."""
    paths = {e: _law_on_grid(y_observed, mus, ys, e) for e in EXPONENTS}
    law_slopes = {e: _slope(p, mus) for e, p in paths.items()}
    inside = [e for e, s in law_slopes.items() if low - TOL <= s <= high + TOL]
    target = np.log(np.asarray(y_observed, float))
    misfit = {e: float(np.sum((np.log(p) - target) ** 2)) for e, p in paths.items()}
    best = [e for e in EXPONENTS if misfit[e] <= min(misfit.values()) + 1e-9]
    sqrt_in, linear_in = 0.5 in inside, 1.0 in inside
    out = {
        "low": min(inside) if inside else math.nan,
        "high": max(inside) if inside else math.nan,
        "consistent": inside,
        "at_edge": bool(inside) and max(inside) == EXPONENTS[-1],
        "best_fit": [min(best), max(best)],
        "sqrt_slope": law_slopes[0.5],
        "linear_slope": law_slopes[1.0],
        "separates": sqrt_in != linear_in,
    }
    if not inside:
        span = "no exponent from 0 to 2"
    else:
        span = f"exponents {out['low']:.2f} to {out['high']:.2f}" + (" or more" if out["at_edge"] else "")
        if len(inside) != round((out["high"] - out["low"]) / 0.05) + 1:
            span += " (not all between)"
    fit = (
        (f"fits exactly for e {best[0]:.2f} to {best[-1]:.2f}" + (" or more" if best[-1] == EXPONENTS[-1] else ""))
        if min(misfit.values()) < 1e-9
        else f"fits best for e {best[0]:.2f} to {best[-1]:.2f}"
    )
    head = (
        f"the exponent of y_opt in mu: {span} give a slope on this grid inside the interval; the observed y_opt"
        f" {', '.join(f'{v:g}' for v in y_observed)} {fit}; the sqrt law's slope here {law_slopes[0.5]:.2f}, a linear"
        f" law's {law_slopes[1.0]:.2f}"
    )
    if out["separates"]:
        out["words"] = head + f": the interval {'excludes the linear law' if sqrt_in else 'excludes the sqrt law'}"
        return out
    out["grid_needed"] = need = _grid_that_separates(y_observed, mus, ys)
    out["words"] = (
        head
        + ": this grid cannot separate exponent 0.5 from 1 (the interval contains both). A grid of y in {"
        + ", ".join(f"{v:.3g}" for v in need["y"])
        + f"}} (x >= y) re-accounted at mu {mus[0]:g} to {mus[-1]:g}"
        f" would: there the sqrt law goes y {' -> '.join(f'{v:.3g}' for v in need['sqrt_path'])} (slope"
        f" {need['sqrt_slope']:.2f}) and a linear law y {' -> '.join(f'{v:.3g}' for v in need['linear_path'])} (slope"
        f" {need['linear_slope']:.2f}), so an interval narrower than {need['gap']:.2f} tells them apart (this one is"
        f" {high - low:.2f} wide)"
    )
    return out


def _grid_that_separates(y_observed, mus, ys) -> dict:
    """A y grid on which the sqrt law and a linear law, each with the c it takes on the observed optimum, go to
    different ratios: sqrt(2) steps from 1 to what the larger of them reaches at the largest mu (at least twice the
    current grid's top), with both laws' paths and slopes there."""
    c_sqrt, _ = _fit_law(y_observed, mus, ys, 0.5)
    c_linear, _ = _fit_law(y_observed, mus, ys, 1.0)
    top = max(c_sqrt * max(mus) ** 0.5, c_linear * max(mus), 2 * max(ys))
    grid = [float(2 ** (k / 2)) for k in range(int(math.ceil(2 * math.log2(top))) + 1)]
    sqrt_path = [float(v) for v in _snap(c_sqrt * np.asarray(mus, float) ** 0.5, grid)]
    linear_path = [float(v) for v in _snap(c_linear * np.asarray(mus, float), grid)]
    s_sqrt, s_linear = _slope(sqrt_path, mus), _slope(linear_path, mus)
    return {
        "y": grid,
        "sqrt_path": sqrt_path,
        "linear_path": linear_path,
        "sqrt_slope": s_sqrt,
        "linear_slope": s_linear,
        "gap": abs(s_linear - s_sqrt),
        "c_sqrt": c_sqrt,
        "c_linear": c_linear,
    }


def f2_u_shape(
    data: StudyData,
    rho: float | None = None,
    mus=None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    reaccounted: Reaccounted | None = None,
) -> Verdict:
    """F2 at every x with three or more replay ratios: where the minimum over y lies (its bootstrap share at an
    interior y), against Theorem 4.5's y*(x) = sqrt(mu / (rho + 1/x)) when `rho` is given (fitted elsewhere)."""
    mus = tuple(mus or (data.reference_mu, 5.28))
    claim = "at fixed x, compute against y is U-shaped with its minimum near sqrt(mu / (rho + 1/x))"
    table, seeds = _log_table(data, mus, reaccounted=reaccounted)
    if len(seeds) < 2:
        return Verdict(
            "F2", claim, "not testable", f"needs 2 or more seeds common to every configuration ({len(seeds)})"
        )
    boot = _boot_means(table, n_boot, seed)
    keys = list(table.index)
    rows = []
    for mu in mus:
        for x in sorted({k[1] for k in keys if k[0] == mu}):
            ys = sorted({k[2] for k in keys if k[0] == mu and k[1] == x})
            if len(ys) < 3:
                continue
            y = np.array(ys)
            # each y at its best learning rate (when the study varies it), in every draw
            at_y = np.column_stack(
                [boot[:, [i for i, k in enumerate(keys) if k[:3] == (mu, x, yy)]].min(axis=1) for yy in ys]
            )
            arg = at_y.argmin(axis=1)
            interior = (y[arg] > y.min()) & (y[arg] < y.max())
            # Monotone, resolved: each step along y worse than the one before in >= 97.5% of draws (or better).
            steps = np.diff(at_y, axis=1)
            up, down = float(np.mean((steps > TOL).all(axis=1))), float(np.mean((steps < -TOL).all(axis=1)))
            pred = float(y_star(x, mu, rho, with_replacement=False)) if rho is not None else math.nan
            y_best = float(y[arg[0]])
            rows.append(
                {
                    "mu": mu,
                    "x": x,
                    "y_best": y_best,
                    "interior_share": float(np.mean(interior[1:])),
                    "increasing_share": up,
                    "decreasing_share": down,
                    "y_predicted": pred,
                    "curve": {f"{yy:g}": float(math.exp(at_y[0, j])) for j, yy in enumerate(ys)},
                }
            )
    if not rows:
        return Verdict("F2", claim, "not testable", "needs three or more replay ratios at one x")
    _, hi_q = stats.expanded_quantiles(len(seeds))
    falsified, holds = [], []
    for r in rows:
        tag = f"x {r['x']:g} at mu {r['mu']:g}"
        in_grid = not math.isfinite(r["y_predicted"]) or min(map(float, r["curve"])) < r["y_predicted"] < max(
            map(float, r["curve"])
        )
        if max(r["increasing_share"], r["decreasing_share"]) >= hi_q and in_grid:
            falsified.append(
                f"{tag}: monotone in y (in {100 * max(r['increasing_share'], r['decreasing_share']):.0f}% of draws)"
            )
        elif r["interior_share"] >= hi_q:
            far = (
                math.isfinite(r["y_predicted"])
                and max(r["y_best"] / r["y_predicted"], r["y_predicted"] / r["y_best"]) >= 2
            )
            (falsified if far else holds).append(
                f"{tag}: minimum at y {r['y_best']:g}" + (f", predicted {r['y_predicted']:.2f}" if far else "")
            )
    if falsified:
        verdict, why = "falsified", "; ".join(falsified)
    elif holds:
        verdict, why = "holds", "; ".join(holds)
    else:
        verdict = "unresolved"
        why = "no x has a minimum over y resolved as interior or a resolved monotone trend where the law puts its minimum inside the grid"
    return Verdict("F2", claim, verdict, f"{why}; {len(seeds)} paired seeds.", rows, {"seeds": seeds, "rho": rho})


def f3_lr_falls_with_y(
    data: StudyData, n_boot: int = N_BOOT, seed: int = 0, reaccounted: Reaccounted | None = None
) -> Verdict:
    """F3: at every (x, y) run at two or more learning rates, the best one; the slope of log lr_opt on log y over
    those cells (pooled) with its interval. Holds when it is below 0, falsified when it is resolved at or above 0
    (the best lr does not fall as y rises: the paper's criterion is "independent of y")."""
    claim = "the best learning rate falls as the replay ratio rises"
    runs = data.runs
    if "lr" not in runs or runs["lr"].nunique() < 2:
        return Verdict("F3", claim, "not testable", "needs a study that runs two or more learning rates")
    table, seeds = _log_table(data, (data.reference_mu,), keys=("x", "y", "lr"), reaccounted=reaccounted)
    keys = list(table.index)
    cells: dict[tuple, list[int]] = {}
    for i, (_, x, y, lr) in enumerate(keys):
        cells.setdefault((x, y), []).append(i)
    cells = {c: idx for c, idx in cells.items() if len(idx) >= 2}
    if len({c[1] for c in cells}) < 2 or len(seeds) < 2:
        return Verdict(
            "F3",
            claim,
            "not testable",
            f"needs two or more learning rates at two or more replay ratios and 2 or more common seeds ({len(seeds)})",
        )
    boot = _boot_means(table, n_boot, seed)
    log_y = np.log(np.array([c[1] for c in cells], float))
    log_y -= log_y.mean()
    lr_opt = np.column_stack(
        [np.log(np.array([keys[i][3] for i in idx])[boot[:, idx].argmin(axis=1)]) for idx in cells.values()]
    )
    slopes = (lr_opt - lr_opt.mean(axis=1, keepdims=True)) @ log_y / float(log_y @ log_y)
    low, high = _interval(slopes[1:], len(seeds))
    slope = float(slopes[0])
    rows = [
        {
            "x": c[0],
            "y": c[1],
            "lr_best": float(math.exp(lr_opt[0, j])),
            "by_lr": {f"{keys[i][3]:g}": float(math.exp(boot[0, i])) for i in idx},
        }
        for j, (c, idx) in enumerate(cells.items())
    ]
    what = f"slope of log lr_opt on log y {slope:.2f} [{low:.2f}, {high:.2f}] over {len(cells)} (x, y) cells"
    if high < -TOL:
        verdict, why = "holds", what
    elif low >= -TOL:
        verdict, why = "falsified", f"the best lr does not fall as y rises: {what}"
    else:
        verdict, why = "unresolved", f"{what} contains 0"
    return Verdict(
        "F3",
        claim,
        verdict,
        f"{why}; {len(seeds)} paired seeds.",
        rows,
        {"slope": slope, "slope_low": low, "slope_high": high, "seeds": seeds},
    )
