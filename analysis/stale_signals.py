"""Do the staleness diagnostics predict whether replay pays? Each replay configuration's paired saving against
on-policy at the same learning rate, set against its runs' mean effective sample size of the importance weights
(VCPO's collapse predictor), mean cosine between consecutive gradients (GAC's) and mean batch age.

The reading is a rank correlation across configurations (Spearman's rho between the diagnostic and the log of the
configuration's paired ratio; a ratio below 1 is a saving), with a 95% percentile interval from resampling the
configurations. A configuration is one trial: a (strategy, loss, y, x) at one lr, its seeds paired with on-policy's
runs at that lr, so the lr's own effect on the cost is paired out. Configurations of one arm at several lrs are not
independent draws; the interval treats them as if they were, so a link it resolves is a candidate to test (an
adaptive reuse rule), not a law. Within the noise: "unresolved".
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.result import SignalLink
from analysis.tuned_lr import baseline_objective, is_on_policy
from workbench import censoring

SIGNALS = {
    "ess_mean": "effective sample size",
    "grad_cosine_mean": "consecutive-gradient cosine",
    "age_mean": "batch age",
}
"""The runs.csv columns read, and their names in words."""
MIN_CONFIGURATIONS = 5
"""Fewer configurations than this with both a saving and the diagnostic: no reading."""
N_BOOT = 2000


def _savings(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per replay configuration with an on-policy arm at its lr: its objective, log paired ratio and the
    mean of each diagnostic over its runs."""
    runs = runs[runs["arm"] == "sampler"] if "arm" in runs else runs  # the study's own seeds (not `confirm`'s)
    objective = baseline_objective(runs)
    on = runs[runs.apply(lambda r: is_on_policy(r, objective), axis=1)]
    rows = []
    for number, g in runs[~runs.index.isin(on.index)].groupby("trial_number"):
        lr = g["lr"].iloc[0]
        base = on[np.isclose(on["lr"], lr)]
        if base.empty:
            continue
        ratio = censoring.paired_ratio(censoring.from_frame(g), censoring.from_frame(base)).estimate
        if not (math.isfinite(ratio) and ratio > 0):
            continue
        rows.append(
            {
                "trial_number": number,
                "objective": g["objective"].iloc[0] if "objective" in g else "",
                "log_ratio": math.log(ratio),
                **{s: float(g[s].mean()) if s in g else math.nan for s in SIGNALS},
            }
        )
    return pd.DataFrame(rows)


def _link(table: pd.DataFrame, signal: str, scope: str, seed: int) -> SignalLink | None:
    ok = table[np.isfinite(table[signal])]
    n = len(ok)
    if n < MIN_CONFIGURATIONS or ok[signal].nunique() < 2:
        return None
    x, y = ok[signal].to_numpy(), ok["log_ratio"].to_numpy()
    rho = float(sps.spearmanr(x, y).statistic)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(N_BOOT):
        i = rng.integers(0, n, n)
        if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
            draws.append(sps.spearmanr(x[i], y[i]).statistic)
    low, high = (float(q) for q in np.quantile(draws, [0.025, 0.975])) if draws else (math.nan, math.nan)
    return SignalLink(
        diagnostic=signal,
        diagnostic_words=SIGNALS[signal],
        scope=scope,
        n_configurations=n,
        rho=rho,
        low=low,
        high=high,
    )


def stale_signals(runs: pd.DataFrame, seed: int = 0) -> tuple[SignalLink, ...] | None:
    """Every diagnostic's link with the saving, over all replay configurations and, in a study of several losses,
    within each loss; None where no diagnostic was logged or too few configurations have one."""
    if not any(s in runs and runs[s].notna().any() for s in SIGNALS):
        return None
    table = _savings(runs)
    if table.empty:
        return None
    scopes = [("every loss", table)]
    if table["objective"].nunique() > 1:
        scopes += [(f"loss {name}", g) for name, g in table.groupby("objective")]
    links = [_link(t, s, scope, seed) for scope, t in scopes for s in SIGNALS]
    links = [x for x in links if x is not None]
    return tuple(links) or None
