"""What a study can and cannot resolve: its measured per-run noise and the smallest difference its seeds can decide.

The per-run noise is the spread of log compute-to-target between seeds of one configuration, pooled over the
configurations (censored seeds left out). Paired by seed against on-policy, the spread of the log ratio is what
decides a saving: with n seeds, a 95% interval on the log ratio is about t(n-1) * sd / sqrt(n) wide on each side,
so savings smaller than 1 - exp(-that) cannot be told apart from none.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from workbench import stats
from workbench.estimators import ESTIMATORS


def _pooled_sd(groups: list[np.ndarray]) -> tuple[float, int]:
    """Pooled sample standard deviation over groups with two or more values, and its degrees of freedom."""
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def resolution(runs: pd.DataFrame) -> dict:
    """The study's noise and resolving power from its per-seed runs (`StudyData.runs`)."""
    ok = runs[runs["censored"] == 0]
    by_config = [np.log(g["compute_to_target"].to_numpy(float)) for _, g in ok.groupby("trial_number")]
    per_run, df = _pooled_sd(by_config)
    base = ok[ok["baseline"]]
    pairs = []
    for number, g in ok[~ok["baseline"]].groupby("trial_number"):
        mine = dict(zip(g["seed"], g["compute_to_target"]))
        best = None
        for _, b in base.groupby("trial_number"):  # the baseline run on the most of these seeds
            theirs = dict(zip(b["seed"], b["compute_to_target"]))
            common = sorted(set(mine) & set(theirs))
            if best is None or len(common) > len(best):
                best = [math.log(mine[s] / theirs[s]) for s in common]
        if best and len(best) > 1:
            pairs.append(np.asarray(best))
    paired, paired_df = _pooled_sd(pairs)
    seeds = int(runs.groupby("trial_number")["seed"].count().median())
    out = {
        "per_run_log_sd": per_run, "per_run_log_sd_df": df, "paired_log_sd": paired, "paired_log_sd_df": paired_df,
        "seeds_per_configuration": seeds, "censored_runs": int(runs["censored"].sum()), "runs": len(runs),
    }
    sd = paired if math.isfinite(paired) else (per_run * math.sqrt(2) if math.isfinite(per_run) else math.nan)
    if seeds > 1 and math.isfinite(sd):
        half = float(sps.t.ppf(0.975, seeds - 1) * sd / math.sqrt(seeds))
        out["smallest_resolvable_saving"] = 1 - math.exp(-half)
        # Seeds needed to resolve a 10% and a 25% saving at this noise (normal approximation, then t refined).
        for saving in (0.10, 0.25):
            need = next((n for n in range(2, 1000) if sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n) < -math.log(1 - saving)), None)
            out[f"seeds_to_resolve_{round(100 * saving)}pct"] = need
    return out


def by_estimator(curves: pd.DataFrame, runs: pd.DataFrame, target: float) -> list[dict]:
    """Per estimator (`workbench.estimators`) and configuration: the per-run noise of log compute-to-target over
    seeds (censored seeds left out and counted), and for each non-baseline configuration the paired ratio against
    the baseline on the same seeds with its 95% interval, all read from the curves at `target`."""
    per_run = {}
    for run_id, g in curves.groupby("run_id", sort=False):
        g = g.sort_values("step")
        per_run[run_id] = {name: f(g["units"].tolist(), g["reading"].tolist(), target) for name, f in ESTIMATORS.items()}
    out = []
    configs = list(runs.groupby("trial_number", sort=True))
    baselines = [g for _, g in configs if g["baseline"].iloc[0]]
    for name in ESTIMATORS:
        for number, g in configs:
            # Paired against the baseline run on the most of these seeds (a confirmation arm has its own).
            base = max(baselines, key=lambda b: len(set(b["seed"]) & set(g["seed"])), default=None)
            res = {int(s): per_run[r][name] for s, r in zip(g["seed"], g["run_id"])}
            reached = [v.value for v in res.values() if not v.censored]
            row = {"estimator": name, "trial_number": int(number), "baseline": bool(g["baseline"].iloc[0]), "seeds": len(res),
                   "censored": sum(v.censored for v in res.values()), "log_sd": stats.log_sd(reached),
                   "geo_mean": stats.geometric_interval(reached).estimate if reached else math.nan}
            if base is not None and not row["baseline"]:
                theirs = {int(s): per_run[r][name] for s, r in zip(base["seed"], base["run_id"])}
                bound = lambda v: v.total if v.censored else v.value  # noqa: E731
                ratio = stats.paired_ratio({s: bound(v) for s, v in res.items()}, {s: bound(v) for s, v in theirs.items()})
                common = sorted(set(res) & set(theirs))
                logs = [math.log(bound(res[s]) / bound(theirs[s])) for s in common]
                row.update(ratio=ratio.estimate, ratio_ci_low=ratio.low, ratio_ci_high=ratio.high, verdict=stats.verdict(ratio),
                           paired_log_sd=float(np.std(logs, ddof=1)) if len(logs) > 1 else math.nan)
            out.append(row)
    return out
