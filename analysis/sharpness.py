"""Skill or sharpness: whether an arm's saving on a held-out curve is learning, or a sampling distribution that
narrows faster (docs/measurement.md, "Skill or sharpness").

A curve read at the generation temperature (the demonstrations' probability, sampled pass@1) rises when the policy
learns and also when it only sharpens: lowering the temperature moves it several-fold on the same weights, and an
arm that trains on successes more often sharpens faster. Two readings take sharpness out:

- **At equal entropy.** Each run's metric as a function of its own sampling entropy (the metric at its evaluations
  against the entropy there); arm and baseline compared at the same entropy over the range both runs of a seed
  cover, as the mean difference over that range, paired by seed, with a 95% interval over seeds
  (`workbench.stats.mean_interval`). Two arms that differ only in how fast they sharpen read the same.
- **At each arm's best decoding temperature.** Compute-to-target of each run read on greedy accuracy (T = 0) and on
  sampled pass@1 at each temperature the runs logged (`eval.temperatures`), at one accuracy target; each
  configuration at the temperature where its geometric mean is least; the arm's per-seed compute at its best
  temperature over the baseline's at its best, paired by seed (`workbench.stats.paired_ratio`). A saving that a
  user can also get by decoding the baseline at a lower temperature disappears here.

`skill_or_sharpness` puts them beside the ratios on the study's curve and on greedy accuracy (from
`analysis.resolution.by_reading`) and says, per comparison, which it is.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from workbench import censoring, stats, tracking
from workbench.estimators import ESTIMATORS

GRID_POINTS = 25
"""Entropies at which a seed's two runs are compared, evenly over the range both cover."""
ENTROPY_WINDOW = 5
"""Optimizer steps in the centred moving average of the training steps' entropy read at an evaluation."""
MIN_POINTS = 2
"""Evaluations a run needs, with both the metric and the entropy, to be read against its entropy."""
GREEDY = "accuracy"
"""The curve column of greedy accuracy (the T = 0 point)."""


def temperatures(curves: pd.DataFrame) -> list[float]:
    """The decoding temperatures whose sampled pass@1 the runs logged (`eval.temperatures`), ascending."""
    pattern = re.compile(re.escape(tracking.CURVE_MEAN_AT_K_AT_T.split("{")[0]) + r"(.+)$")
    found = [float(m.group(1)) for c in curves.columns if (m := pattern.match(str(c))) and curves[c].notna().any()]
    return sorted(found)


def pass_at_1(t: float) -> str:
    """The curve column of sampled pass@1 at temperature `t`."""
    return tracking.CURVE_MEAN_AT_K_AT_T.format(t)


# ---------------------------------------------------------------- entropy at each evaluation


def entropy_at_evaluations(curves: pd.DataFrame, entropy: pd.DataFrame) -> tuple[pd.Series, str]:
    """The sampling entropy at every evaluation (aligned with `curves`' index) and where it comes from.

    The held-out samples' entropy (`eval/sample_entropy`) where every run logged it at every evaluation (pass@k
    sampled at each: `eval.pass_k_every: 1`); otherwise the entropy of each optimizer step's fresh rollouts
    (`policy/entropy`, logged by every trial, older stores included), as a centred moving average over
    `ENTROPY_WINDOW` steps read at the evaluation's step (the step's fresh rollouts are sampled by the policy that
    evaluation measures). Both are at the generation temperature. NaN everywhere, source "none", where neither was
    logged."""
    column = tracking.CURVE_SAMPLE_ENTROPY
    if column in curves and len(curves) and curves[column].notna().all():
        return curves[column].astype(float), "held-out samples"
    out = pd.Series(np.nan, index=curves.index, dtype=float)
    if entropy is None or not len(entropy):
        return out, "none"
    by_run = {run_id: g.sort_values("step") for run_id, g in entropy.groupby("run_id")}
    for run_id, g in curves.groupby("run_id"):
        logged = by_run.get(run_id)
        if logged is None or not len(logged):
            continue
        smooth = logged["entropy"].rolling(ENTROPY_WINDOW, center=True, min_periods=1).mean()
        out.loc[g.index] = np.interp(g["step"].to_numpy(float), logged["step"].to_numpy(float), smooth.to_numpy(float))
    return out, "training steps' fresh rollouts" if out.notna().any() else "none"


# ---------------------------------------------------------------- at equal entropy


def _against_entropy(h: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """One run's metric as a function of its entropy: its points sorted by entropy (equal entropies averaged)."""
    ok = np.isfinite(h) & np.isfinite(m)
    if ok.sum() < MIN_POINTS:
        return None
    frame = pd.DataFrame({"h": h[ok], "m": m[ok]}).groupby("h", sort=True)["m"].mean()
    return (frame.index.to_numpy(float), frame.to_numpy(float)) if len(frame) >= MIN_POINTS else None


def seed_difference(
    arm: tuple[np.ndarray, np.ndarray], base: tuple[np.ndarray, np.ndarray]
) -> tuple[float, float, float] | None:
    """The mean over the entropy range both runs cover of arm's metric minus the baseline's at the same entropy
    (each linear between its evaluations), and that range; None where the ranges do not overlap."""
    (ha, ma), (hb, mb) = arm, base
    low, high = max(ha[0], hb[0]), min(ha[-1], hb[-1])
    if not high > low:
        return None
    grid = np.linspace(low, high, GRID_POINTS)
    return float(np.mean(np.interp(grid, ha, ma) - np.interp(grid, hb, mb))), float(low), float(high)


def _baseline_for(runs: pd.DataFrame, group: pd.DataFrame) -> pd.DataFrame | None:
    """The baseline configuration run on the most of `group`'s seeds (a confirmation arm has its own)."""
    bases = [g for _, g in runs[runs["baseline"].astype(bool)].groupby("trial_number")]
    best = max(bases, key=lambda b: len(set(b["seed"]) & set(group["seed"])), default=None)
    return best if best is not None and set(best["seed"]) & set(group["seed"]) else None


def equal_entropy(curves: pd.DataFrame, h: pd.Series, runs: pd.DataFrame, column: str) -> list[dict]:
    """Per non-baseline configuration: its difference from the baseline on `column` at equal entropy `h` (aligned
    with `curves`), paired by seed, with a 95% interval over the seeds whose runs' entropy ranges overlap."""
    per_run = (
        {
            run_id: _against_entropy(h.loc[g.index].to_numpy(float), g[column].to_numpy(float))
            for run_id, g in curves.groupby("run_id")
        }
        if column in curves
        else {}
    )
    out = []
    for number, g in runs.groupby("trial_number", sort=True):
        base = _baseline_for(runs, g)
        if bool(g["baseline"].iloc[0]) or base is None:
            continue
        theirs = dict(zip(base["seed"], base["run_id"]))
        diffs, ranges, unread = [], [], 0
        for seed, run_id in zip(g["seed"], g["run_id"]):
            a, b = per_run.get(run_id), per_run.get(theirs.get(seed))
            d = seed_difference(a, b) if a is not None and b is not None else None
            if d is None:
                unread += seed in theirs
                continue
            diffs.append(d[0])
            ranges.append(d[1:])
        iv = stats.mean_interval(diffs)
        span = [float(np.median([r[0] for r in ranges])), float(np.median([r[1] for r in ranges]))] if ranges else None
        out.append(
            {
                "trial_number": int(number),
                "reading": column,
                "difference": iv.estimate,
                "low": iv.low,
                "high": iv.high,
                "seeds": iv.n,
                "seeds_unread": unread,
                "entropy_range": span,
                "direction": _direction(iv),
            }
        )
    return out


def _direction(iv: stats.Interval) -> int:
    """+1: the arm is higher at equal entropy, resolved; -1: lower, resolved; 0: the interval contains 0."""
    if iv.n < 2 or not math.isfinite(iv.low):
        return 0
    return 1 if iv.low > 0 else -1 if iv.high < 0 else 0


# ---------------------------------------------------------------- at each arm's best decoding temperature


def compute_to_target(
    curves: pd.DataFrame, column: str, target: float, estimator: str
) -> dict[str, tuple[float, bool]]:
    """Per run: compute to `target` on `column` by `estimator`, read on the evaluations that logged it, and whether
    it is censored (then its total compute, a bound, as `StudyData.configs` counts it); runs with fewer than two
    such evaluations left out."""
    out = {}
    for run_id, g in curves[curves[column].notna()].sort_values("step").groupby("run_id", sort=False):
        if len(g) >= 2:
            r = ESTIMATORS[estimator](g["units"].tolist(), g[column].astype(float).tolist(), target)
            out[run_id] = (r.total if r.censored else r.value, bool(r.censored))
    return out


def best_temperature(curves: pd.DataFrame, runs: pd.DataFrame, target: float, estimator: str) -> list[dict]:
    """Per configuration: compute-to-target (geometric mean over seeds) on greedy accuracy (T = 0) and on sampled
    pass@1 at each logged temperature, all at `target`; its best temperature; and for each non-baseline
    configuration the paired ratio of its per-seed compute at its best temperature to the baseline's at the
    baseline's best, with its 95% interval (both bests are selected on the same seeds: a selection estimate). The
    best temperature is the one with the fewest censored seeds, then the least compute (censored seeds at their
    total)."""
    columns = {0.0: GREEDY, **{t: pass_at_1(t) for t in temperatures(curves)}}
    by_t = {t: compute_to_target(curves, c, target, estimator) for t, c in columns.items()}
    per_config, per_seed = {}, {}
    for number, g in runs.groupby("trial_number", sort=True):
        means, censored = {}, {}
        for t, values in by_t.items():
            mine = [values[r] for r in g["run_id"] if r in values]
            if len(mine) == len(g):  # every seed read at this temperature
                means[t] = censoring.level_interval([censoring.Outcome(v, c) for v, c in mine]).estimate
                censored[t] = sum(c for _, c in mine)
        if not means:
            continue
        best = min(means, key=lambda t: (censored[t], stats.finite_or_inf(means[t]), t))
        per_config[number] = {
            "trial_number": int(number),
            "baseline": bool(g["baseline"].iloc[0]),
            "runs": len(g),
            "by_temperature": {f"{t:g}": v for t, v in means.items()},
            "censored_by_temperature": {f"{t:g}": n for t, n in censored.items()},
            "best_temperature": best,
            "compute_to_target": means[best],
            "censored_seeds": censored[best],
        }
        per_seed[number] = {int(s): censoring.Outcome(*by_t[best][r]) for s, r in zip(g["seed"], g["run_id"])}
    for number, row in per_config.items():
        base = _baseline_for(runs, runs[runs["trial_number"] == number])
        if row["baseline"] or base is None or int(base["trial_number"].iloc[0]) not in per_seed:
            continue
        b = int(base["trial_number"].iloc[0])
        iv = censoring.paired_ratio(per_seed[number], per_seed[b])
        bound = any(r["censored_seeds"] >= r["runs"] for r in (row, per_config[b]))
        row.update(
            baseline_trial=b,
            baseline_best_temperature=per_config[b]["best_temperature"],
            ratio=iv.estimate,
            ratio_ci_low=iv.low,
            ratio_ci_high=iv.high,
            seeds=iv.n,
            verdict=censoring.verdict(iv),
            bound=bound,
            **censoring.counts_of(iv),
        )
    return list(per_config.values())


# ---------------------------------------------------------------- the verdict


def _resolved(row: dict | None, side: int) -> bool:
    """Whether a ratio row's interval lies wholly below 1 (`side` -1) or above it (+1); never for a `bound` (every
    seed of one side censored: a ratio of totals, not a measurement)."""
    if not row or row.get("bound") or not math.isfinite(row.get("ratio_ci_low", math.nan)):
        return False
    return row["ratio_ci_high"] < 1 if side < 0 else row["ratio_ci_low"] > 1


def _ratio_text(row: dict | None) -> str:
    if not row or not math.isfinite(row.get("ratio", math.nan)):
        return "not read"
    if not math.isfinite(row.get("ratio_ci_low", math.nan)):
        return f"{row['ratio']:.2f} (one seed: no interval)"
    bound = ", every seed of one side censored: a bound" if row.get("bound") else ""
    return f"{row['ratio']:.2f} [{row['ratio_ci_low']:.2f}, {row['ratio_ci_high']:.2f}{bound}]"


def difference_text(row: dict | None, missing: str = "not read", one_seed: str = "(one seed: no interval)") -> str:
    """An equal-entropy difference with its interval, in words or a table cell."""
    if not row or not math.isfinite(row.get("difference", math.nan)):
        return missing
    if not math.isfinite(row.get("low", math.nan)):
        return f"{row['difference']:+.3f} {one_seed}"
    return f"{row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"


def verdict(
    study: dict | None,
    greedy: dict | None,
    entropy_study: dict | None,
    entropy_greedy: dict | None,
    best_t: dict | None,
    metric: str,
) -> tuple[str, str]:
    """`skill`, `sharpness` or `unresolved`, and why, for one comparison with the baseline.

    - skill: a resolved saving on the study's curve that also holds where sharpening cannot make it (on greedy
      accuracy, at the arm's best temperature, or at equal entropy: each interval excluding no difference) and no
      reading resolved against the arm;
    - sharpness: a resolved saving on the study's curve that none of those readings shows, where the equal-entropy
      reading of the study's curve was made (the saving vanishes when entropy is held equal);
    - unresolved: no resolved saving to explain, readings that disagree, or too little read to tell."""
    if study and study.get("bound"):
        return (
            "unresolved",
            f"every seed of one side is censored on the study's curve ({_ratio_text(study)}): nothing measured",
        )
    if not _resolved(study, -1):
        return "unresolved", "no resolved saving on the study's curve to explain"
    greedy_is_study = metric == GREEDY
    for_skill = [
        (f"on greedy accuracy it saves too ({_ratio_text(greedy)})", _resolved(greedy, -1)),
        (f"at its best decoding temperature it saves too ({_ratio_text(best_t)})", _resolved(best_t, -1)),
        (
            f"at equal entropy it reads {difference_text(entropy_study)} on {metric}",
            bool(entropy_study) and entropy_study["direction"] > 0,
        ),
        (
            f"at equal entropy it reads {difference_text(entropy_greedy)} on greedy accuracy",
            bool(entropy_greedy) and entropy_greedy["direction"] > 0,
        ),
    ]
    against = [
        (f"greedy accuracy needs more compute ({_ratio_text(greedy)})", _resolved(greedy, 1)),
        (f"at the arms' best temperatures it needs more ({_ratio_text(best_t)})", _resolved(best_t, 1)),
        (
            f"at equal entropy it reads {difference_text(entropy_study)} on {metric}",
            bool(entropy_study) and entropy_study["direction"] < 0,
        ),
        (
            f"at equal entropy it reads {difference_text(entropy_greedy)} on greedy accuracy",
            bool(entropy_greedy) and entropy_greedy["direction"] < 0,
        ),
    ]
    pro = [why for why, holds in for_skill if holds]
    con = [why for why, holds in against if holds]
    if greedy_is_study:  # a saving on greedy accuracy is what a greedy decoder deploys: no temperature makes it
        return (
            ("skill", "the saving is on greedy accuracy, which no decoding temperature moves")
            if not con
            else ("unresolved", "the saving is on greedy accuracy, but " + "; ".join(con))
        )
    if pro and not con:
        return "skill", "; ".join(pro)
    if pro and con:
        return "unresolved", "the readings disagree: " + "; ".join(pro + con)
    if entropy_study and entropy_study["seeds"] >= 2:
        gone = [
            f"at equal entropy the arms read {difference_text(entropy_study)} on {metric}",
            f"on greedy accuracy {_ratio_text(greedy)}",
        ] + con
        return "sharpness", "the saving vanishes where entropy is held equal: " + "; ".join(gone)
    return "unresolved", (
        f"greedy accuracy gives {_ratio_text(greedy)} and the equal-entropy reading of {metric} "
        "was not made (no entropy logged, or the runs' entropy ranges do not overlap)"
    )


def skill_or_sharpness(
    curves: pd.DataFrame, entropy: pd.DataFrame, runs: pd.DataFrame, metric: str, estimator: str, readings: list[dict]
) -> dict:
    """Every reading of this module for each comparison with the baseline, with its verdict (`verdict`), and what
    the runs did not log. `readings`: `analysis.resolution.by_reading`'s rows (the study's curve at its target and
    greedy accuracy at its own), whose greedy target the best-temperature reading shares."""
    readings = _with_bounds(readings)
    h, source = entropy_at_evaluations(curves, entropy)
    logged_t = temperatures(curves)
    columns = [
        c
        for c in dict.fromkeys([metric, GREEDY, "demo_prob", "mean_at_k", *map(pass_at_1, logged_t)])
        if c in curves and curves[c].notna().any()
    ]
    by_column = (
        {c: {r["trial_number"]: r for r in equal_entropy(curves, h, runs, c)} for c in columns}
        if source != "none"
        else {}
    )
    study_rows = {r["trial_number"]: r for r in readings if r["study_reading"]}
    greedy_rows = {r["trial_number"]: r for r in readings if r["reading"] == GREEDY}
    greedy_target = next((r["target"] for r in readings if r["reading"] == GREEDY), None)
    best = (
        {r["trial_number"]: r for r in best_temperature(curves, runs, greedy_target, estimator)}
        if greedy_target is not None
        else {}
    )
    missing = []
    if source == "none":
        missing.append(
            "the sampling entropy (neither `policy/entropy` nor `eval/sample_entropy`): no equal-entropy reading"
        )
    if not logged_t:
        missing.append(
            "sampled pass@1 at other decoding temperatures (`eval.temperatures`): the best-temperature reading"
            " is greedy accuracy alone"
        )
    if greedy_target is None:
        missing.append("greedy accuracy as a rising curve with a target: no ratio on it, no best-temperature reading")
    comparisons = []
    for number, study in sorted(study_rows.items()):
        if study["baseline"]:
            continue
        at_entropy = {c: by_column[c][number] for c in by_column if number in by_column[c]}
        kind, why = verdict(
            study, greedy_rows.get(number), at_entropy.get(metric), at_entropy.get(GREEDY), best.get(number), metric
        )
        comparisons.append(
            {
                "trial_number": number,
                "study_curve": _ratio_only(study),
                "greedy": _ratio_only(greedy_rows.get(number)),
                "equal_entropy": list(at_entropy.values()),
                "best_temperature": best.get(number),
                "verdict": kind,
                "why": why,
            }
        )
    return {
        "metric": metric,
        "entropy_source": source,
        "temperatures": logged_t,
        "greedy_target": greedy_target,
        "estimator": estimator,
        "baseline_best_temperature": [r for r in best.values() if r["baseline"]],
        "comparisons": comparisons,
        "missing": missing,
    }


def _with_bounds(readings: list[dict]) -> list[dict]:
    """`by_reading`'s rows, each marked `bound` where every seed of its configuration, or of every baseline, is
    censored on that curve (its ratio is then of total computes)."""
    baselines_gone: dict[str, list[bool]] = {}
    for r in readings:
        if r["baseline"]:
            baselines_gone.setdefault(r["reading"], []).append(r["censored"] >= r["seeds"])
    return [
        {**r, "bound": r["censored"] >= r["seeds"] or all(baselines_gone.get(r["reading"], [False]))} for r in readings
    ]


def _ratio_only(row: dict | None) -> dict | None:
    keys = ("reading", "target", "ratio", "ratio_ci_low", "ratio_ci_high", "verdict", "seeds", "censored", "bound")
    return {k: row[k] for k in keys if k in row} if row else None
