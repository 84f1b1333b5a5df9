"""The per-run table committed beside every report (`runs.csv`): one row per seed run, every number a comparison is
made of, so that anyone can recompute a report's and docs/results.md's claims without the stores
(`analysis.recompute`).

Columns: the study, trial and arm; the configuration (strategy, its variant, the loss `objective`, x, y, capacity,
ratio, horizon, lr); the seed and its
warm start (`checkpoint`, the model's init seed); the curve read (`curve`) and its `target`; compute-to-target and the
censored flag by every estimator (`ctt_<estimator>`, `censored_<estimator>`) at the study's reference mu, with the
study's own estimator's copy in `compute_to_target`/`censored`; the run's `total_units`; the `mu` it is accounted at
and the wall-clock `mu_measured` (a diagnostic); wall and device seconds, and the wall's generation, training and
evaluation seconds (evaluation's share of a run's wall time is `eval_seconds / wall_seconds`); the run's means of its
staleness diagnostics (`ess_mean`, `grad_cosine_mean`, `age_mean`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data import StudyData, compute_to_target
from workbench import censoring
from workbench.censoring import Outcome
from workbench.estimators import ESTIMATORS

FILE = "runs.csv"
CONFIG = [
    "trial_number",
    "arm",
    "baseline",
    "strategy",
    "variant",
    "objective",
    "x",
    "y",
    "capacity",
    "ratio",
    "horizon",
    "lr",
]

MEASURED = ("mu_measured", "wall_seconds", "device_seconds", "gen_seconds", "train_seconds", "eval_seconds")
DIAGNOSTICS = ("ess_mean", "grad_cosine_mean", "age_mean")
"""The run's means over its steps of the importance weights' effective sample size, the consecutive-gradient cosine
and the batch's mean age (empty where the run did not log them: TRL's trainer, studies from before)."""


def runs_table(data: StudyData) -> pd.DataFrame:
    """One row per seed run of `data` (column order fixed; floats as measured)."""
    runs = data.runs
    out = runs[
        [c for c in CONFIG if c in runs] + ["seed"] + (["checkpoint"] if "checkpoint" in runs else []) + ["run_id"]
    ].copy()
    if "checkpoint" not in out:
        out.insert(
            out.columns.get_loc("seed") + 1, "checkpoint", 0
        )  # a study from before warm starts were recorded: the first
    out.insert(0, "study", data.name)
    out["curve"] = data.metric
    out["target"] = data.target
    out["estimator"] = data.estimator
    for name in ESTIMATORS:
        ctt = compute_to_target(data.curves, data.target, data.reference_mu, name).set_index("run_id")
        out[f"ctt_{name}"] = out["run_id"].map(ctt["compute_to_target"].where(ctt["censored"] == 0, np.nan))
        out[f"censored_{name}"] = out["run_id"].map(ctt["censored"]).astype("Int64")
        if name == data.estimator:
            out["total_units"] = out["run_id"].map(ctt["total_units"])
    out["compute_to_target"] = out[f"ctt_{data.estimator}"]
    out["censored"] = out[f"censored_{data.estimator}"]
    out["mu"] = data.reference_mu
    for column in (*MEASURED, *DIAGNOSTICS):
        out[column] = runs[column] if column in runs else np.nan
    return out.sort_values(["trial_number", "seed"]).reset_index(drop=True)


def write_runs_table(data: StudyData, out: Path) -> Path:
    path = Path(out) / FILE
    runs_table(data).to_csv(path, index=False, float_format="%.6g")
    return path


def read_runs_table(path: Path) -> pd.DataFrame:
    """A committed `runs.csv` (plain CSV: nothing unpickled)."""
    return pd.read_csv(path)


def outcomes(table: pd.DataFrame, trial: int, estimator: str | None = None) -> dict[int, Outcome]:
    """Per seed of `trial`: compute-to-target by `estimator` (the study's when None), censored runs at their total."""
    g = table[table["trial_number"] == trial]
    if g.empty:
        raise KeyError(f"no runs of trial {trial}")
    ctt, cens = (f"ctt_{estimator}", f"censored_{estimator}") if estimator else ("compute_to_target", "censored")
    return censoring.outcomes(
        {int(s): (t if c else v) for s, v, c, t in zip(g["seed"], g[ctt], g[cens], g["total_units"])},
        {int(s) for s, c in zip(g["seed"], g[cens]) if c},
    )
