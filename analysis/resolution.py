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

from workbench import censoring, stats
from workbench.compute import ToTarget
from workbench.estimators import ESTIMATORS, METRICS, auto_target


def _pooled_sd(groups: list[np.ndarray]) -> tuple[float, int]:
    """Pooled sample standard deviation over groups with two or more values, and its degrees of freedom."""
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g) > 1)
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def _within_checkpoint(ok: pd.DataFrame) -> dict:
    """Where the seeds start from more than one warm start (`seeds_per_checkpoint`): the per-run noise between seeds
    that share a checkpoint, the part a paired comparison sees; the pooled `per_run_log_sd` adds the checkpoints'
    own spread."""
    if "checkpoint" not in ok or ok["checkpoint"].nunique() < 2:
        return {}
    groups = [np.log(g["compute_to_target"].to_numpy(float)) for _, g in ok.groupby(["trial_number", "checkpoint"])]
    sd, df = _pooled_sd(groups)
    return {
        "checkpoints": int(ok["checkpoint"].nunique()),
        "within_checkpoint_log_sd": sd,
        "within_checkpoint_log_sd_df": df,
    }


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
        "per_run_log_sd": per_run,
        "per_run_log_sd_df": df,
        "paired_log_sd": paired,
        "paired_log_sd_df": paired_df,
        **_within_checkpoint(ok),
        "seeds_per_configuration": seeds,
        "censored_runs": int(runs["censored"].sum()),
        "runs": len(runs),
    }
    sd = paired if math.isfinite(paired) else (per_run * math.sqrt(2) if math.isfinite(per_run) else math.nan)
    if seeds > 1 and math.isfinite(sd):
        half = float(sps.t.ppf(0.975, seeds - 1) * sd / math.sqrt(seeds))
        out["smallest_resolvable_saving"] = 1 - math.exp(-half)
        # Seeds needed to resolve a 10% and a 25% saving at this noise (normal approximation, then t refined).
        for saving in (0.10, 0.25):
            need = next(
                (n for n in range(2, 1000) if sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n) < -math.log(1 - saving)), None
            )
            out[f"seeds_to_resolve_{round(100 * saving)}pct"] = need
    return out


def _outcomes(per_seed: dict[int, ToTarget]) -> dict[int, censoring.Outcome]:
    """Per seed: a run's compute-to-target as `workbench.censoring` reads it (a censored run at its total)."""
    return {
        s: censoring.Outcome(v.total, True) if v.censored else censoring.Outcome(v.value) for s, v in per_seed.items()
    }


def _per_configuration(res: dict[str, ToTarget], runs: pd.DataFrame) -> list[dict]:
    """Per configuration, from each run's compute-to-target (`res`, by run id): the per-run noise of log
    compute-to-target over seeds (censored seeds left out and counted), and for each non-baseline configuration the
    paired ratio against the baseline on the same seeds with its 95% interval (censored seeds at their total)."""
    configs = list(runs.groupby("trial_number", sort=True))
    baselines = [g for _, g in configs if g["baseline"].iloc[0]]
    out = []
    for number, g in configs:
        # Paired against the baseline run on the most of these seeds (a confirmation arm has its own).
        base = max(baselines, key=lambda b: len(set(b["seed"]) & set(g["seed"])), default=None)
        mine = {int(s): res[r] for s, r in zip(g["seed"], g["run_id"])}
        reached = [v.value for v in mine.values() if not v.censored]
        row = {
            "trial_number": int(number),
            "baseline": bool(g["baseline"].iloc[0]),
            "seeds": len(mine),
            "censored": sum(v.censored for v in mine.values()),
            "log_sd": stats.log_sd(reached),
            "geo_mean": stats.geometric_interval(reached).estimate if reached else math.nan,
        }
        if base is not None and not row["baseline"]:
            theirs = {int(s): res[r] for s, r in zip(base["seed"], base["run_id"])}
            ratio = censoring.paired_ratio(_outcomes(mine), _outcomes(theirs))
            logs = [
                math.log(mine[s].value / theirs[s].value)
                for s in sorted(set(mine) & set(theirs))
                if not (mine[s].censored or theirs[s].censored)
            ]
            row.update(
                ratio=ratio.estimate,
                ratio_ci_low=ratio.low,
                ratio_ci_high=ratio.high,
                verdict=censoring.verdict(ratio),
                paired_log_sd=float(np.std(logs, ddof=1)) if len(logs) > 1 else math.nan,
                **censoring.counts_of(ratio),
            )
        out.append(row)
    return out


def _read(curves: pd.DataFrame, column: str, target: float, estimator) -> dict[str, ToTarget]:
    """Each run's compute-to-target on the curve `column` at `target` by `estimator`, by run id."""
    return {
        run_id: estimator(g["units"].tolist(), g[column].tolist(), target)
        for run_id, g in curves.sort_values("step").groupby("run_id", sort=False)
    }


def by_estimator(curves: pd.DataFrame, runs: pd.DataFrame, target: float) -> list[dict]:
    """Per estimator (`workbench.estimators`) and configuration: `_per_configuration`, all read from the study's
    curve (`reading`) at `target`."""
    return [
        {"estimator": name, **row}
        for name, f in ESTIMATORS.items()
        for row in _per_configuration(_read(curves, "reading", target, f), runs)
    ]


def by_reading(
    curves: pd.DataFrame, runs: pd.DataFrame, metric: str, target: float, estimator: str, gain_fraction: float
) -> list[dict]:
    """The study's comparisons read on every held-out curve its runs logged at every evaluation (`METRICS`), by
    the study's estimator: the study's own curve at the study's target, each other curve at the target its
    baseline's seeds set there by the auto-target rule (`gain_fraction` of their fitted gain). Where two curves give
    different verdicts, the study's answer depends on what the user reads (docs/measurement.md)."""
    base = runs[runs["baseline"] & (runs["arm"] == "sampler")]
    out = []
    for name in METRICS:
        if name not in curves or curves[name].isna().any():
            continue
        if name == metric:
            at = target
        else:
            mine = curves[curves["run_id"].isin(base["run_id"])].sort_values("step")
            try:
                at = auto_target(
                    [(g["units"].tolist(), g[name].tolist()) for _, g in mine.groupby("run_id")], gain_fraction
                )
            except (ValueError, IndexError):  # no baseline, or a curve that does not rise: nothing to read there
                continue
        res = _read(curves, name, at, ESTIMATORS[estimator])
        out += [
            {"reading": name, "target": at, "study_reading": name == metric, **row}
            for row in _per_configuration(res, runs)
        ]
    return out


def by_checkpoint(curves: pd.DataFrame, runs: pd.DataFrame, estimator: str, gain_fraction: float) -> list[dict]:
    """Where the seeds start from several warm starts (`seeds_per_checkpoint`), each checkpoint's seeds read at
    that checkpoint's own target: `gain_fraction` of its baseline seeds' fitted gain on the study's curve (the
    auto-target rule, per checkpoint). A fixed target can suit one checkpoint and censor every run of another (on
    the default task, one warm start never reached the target another reached in 31-76 units); read per checkpoint,
    every seed says something, and the comparisons stay paired within a checkpoint."""
    if "checkpoint" not in runs or runs["checkpoint"].nunique() < 2:
        return []
    out = []
    for checkpoint, mine in runs.groupby("checkpoint", sort=True):
        base = mine[mine["baseline"] & (mine["arm"] == "sampler")]
        own = curves[curves["run_id"].isin(base["run_id"])].sort_values("step")
        try:
            at = auto_target(
                [(g["units"].tolist(), g["reading"].tolist()) for _, g in own.groupby("run_id")], gain_fraction
            )
        except (ValueError, IndexError):  # no baseline seed on this checkpoint, or a curve that does not rise
            continue
        res = _read(curves[curves["run_id"].isin(mine["run_id"])], "reading", at, ESTIMATORS[estimator])
        rows = [{"checkpoint": int(checkpoint), "target": at, **row} for row in _per_configuration(res, mine)]
        _against_tuned(rows, res, mine)
        out += rows
    return out


def _against_tuned(rows: list[dict], res: dict[str, ToTarget], runs: pd.DataFrame) -> None:
    """Where on-policy ran at several learning rates: each other configuration's paired ratio to on-policy at its
    fastest lr on these seeds (`tuned_trial`; a selection estimate, as in `analysis.tuned_lr`)."""
    if "lr" not in runs:
        return
    first = runs.groupby("trial_number").first()
    on_policy = first[(first["x"] == 1) & (first["y"] == 1) & (first["strategy"] == "uniform")].index
    if first.loc[on_policy, "lr"].nunique() < 2:
        return
    per_seed = {
        n: _outcomes({int(s): res[r] for s, r in zip(g["seed"], g["run_id"])}) for n, g in runs.groupby("trial_number")
    }
    tuned = min(
        on_policy, key=lambda n: stats.finite_or_inf(censoring.level_interval(list(per_seed[n].values())).estimate)
    )
    for row in rows:
        if row["trial_number"] not in on_policy:
            iv = censoring.paired_ratio(per_seed[row["trial_number"]], per_seed[tuned])
            row.update(
                tuned_trial=int(tuned),
                tuned_lr=float(first.loc[tuned, "lr"]),
                ratio_to_tuned=iv.estimate,
                ratio_to_tuned_low=iv.low,
                ratio_to_tuned_high=iv.high,
                verdict_to_tuned=censoring.verdict(iv),
                **{f"{k}_to_tuned": v for k, v in censoring.counts_of(iv).items()},
            )
