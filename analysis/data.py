"""A study's trials from MLflow into tidy pandas frames (MLflow is the source of truth for curves, design §6).

- `runs`: one row per seed run (a configuration trained once): knobs, x = N/R, y = B/R, seed, compute-to-target at
  the study's reference mu, the censored flag, best and final accuracy, measured mu, and the arm (`sampler`, or
  `predicted` for a fitted optimum run by `workbench study verify`, with the compute it was predicted to need).
- `curves`: one row per evaluation of every seed run: step, compute units at the reference mu, accuracy, pass@k,
  cumulative generated/trained rollouts and seconds (so compute can be re-accounted at any mu).
- `entropy`: policy entropy of fresh samples per step, with compute units.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench import tracking
from workbench.compute import to_target, units
from workbench.config import ConfigError


@dataclass
class StudyData:
    name: str
    reference_mu: float
    target: float
    runs: pd.DataFrame
    curves: pd.DataFrame
    entropy: pd.DataFrame
    ages: dict[str, dict[int, int]]
    """Per seed run id: trained-rollout counts by age (the staleness histogram)."""

    def configs(self) -> pd.DataFrame:
        """One row per configuration: medians over seeds, seeds and censored seeds counted."""
        keys = ["trial_number", "x", "y", "capacity", "ratio", "horizon", "strategy", "baseline", "arm"]
        g = self.runs.groupby(keys, dropna=False)
        out = g.agg(
            seeds=("seed", "count"),
            censored_seeds=("censored", "sum"),
            compute_to_target=("compute_to_target", "median"),
            best_accuracy=("best_accuracy", "median"),
            final_accuracy=("final_accuracy", "median"),
            total_units=("total_units", "median"),
            mu_measured=("mu_measured", "median"),
            predicted_when_run=("predicted_when_run", "first"),
        ).reset_index()
        return out.sort_values("compute_to_target").reset_index(drop=True)


def units_at(curves: pd.DataFrame, mu: float) -> pd.Series:
    """Cumulative compute units of every evaluation, re-accounted at `mu` (`workbench.compute.units`)."""
    return units(curves["train_rollouts"], curves["gen_rollouts"], curves["batch_size"], mu)


def compute_to_target(curves: pd.DataFrame, target: float, mu: float) -> pd.DataFrame:
    """Per run: compute to `target` at `mu` by the study's rule (`workbench.compute.to_target`): units at the first
    evaluation reaching it; a censored run (`censored` = 1) scores its penalised total."""
    c = curves.assign(units=units_at(curves, mu))
    rows = []
    for run_id, g in c.groupby("run_id", sort=False):
        g = g.sort_values("step")
        r = to_target(g["units"].tolist(), g["accuracy"].tolist(), target)
        rows.append((run_id, r.value, int(r.censored), r.total))
    return pd.DataFrame(rows, columns=["run_id", "compute_to_target", "censored", "total_units"])


def load_study(name: str, tracking_uri: str) -> StudyData:
    """Read every finished seed run of study `name` (MLflow experiment of the same name)."""
    client = tracking.client(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise ConfigError(f"study: no MLflow experiment named {name!r} in {tracking_uri}")
    kind = f"tags.`{tracking.KIND}`"
    parent = client.search_runs([exp.experiment_id], filter_string=f"{kind} = '{tracking.KIND_STUDY}'")
    trials = client.search_runs([exp.experiment_id], filter_string=f"{kind} = '{tracking.KIND_TRIAL}'", max_results=5000)
    seeds = client.search_runs([exp.experiment_id], filter_string=f"{kind} = '{tracking.KIND_SEED}' and attributes.status = 'FINISHED'",
                               max_results=5000)
    if not seeds:
        raise ConfigError(f"study: no finished trial in MLflow experiment {name!r}")
    baseline_trials = {t.info.run_id for t in trials if t.data.params.get(tracking.PARAM_BASELINE) == "True"}
    arms = {t.info.run_id: t.data.tags[tracking.ARM] for t in trials if tracking.ARM in t.data.tags}
    predicted_at = {t.info.run_id: t.data.metrics.get(tracking.PREDICTED_COMPUTE_TO_TARGET, np.nan) for t in trials}
    ref = None
    for r in [*parent, *trials]:
        if tracking.REFERENCE_MU in r.data.tags:
            ref = float(r.data.tags[tracking.REFERENCE_MU])
            break

    # Only seeds of completed trials: a trial whose worker died is retried as a new trial, and the seeds its first
    # attempt finished would otherwise count its configuration twice.
    complete = {t.info.run_id for t in trials if t.info.status == "FINISHED" and t.data.tags.get(tracking.STATUS) == tracking.STATUS_FINISHED}
    rows, curve_rows, entropy_rows, ages = [], [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in seeds:
            trial_run = r.data.tags.get(tracking.PARENT_RUN)
            if r.data.tags.get(tracking.STATUS) != tracking.STATUS_FINISHED or trial_run not in complete:
                continue
            p, m = r.data.params, r.data.metrics
            B = int(p["batch_size"])
            ratio = float(p["replay.ratio"])
            capacity = int(p["replay.capacity"])
            rows.append({
                "run_id": r.info.run_id,
                "trial_number": int(r.data.tags.get(tracking.TRIAL_NUMBER, -1)),
                "seed": int(p["seed"]),
                "batch_size": B,
                "capacity": capacity,
                "ratio": ratio,
                "horizon": None if p["replay.horizon"] == "null" else int(p["replay.horizon"]),
                "strategy": p["replay.strategy"],
                "objective": p["objective.name"],
                "y": ratio,
                "x": float(f"{capacity * ratio / B:.3g}"),  # N/R, rounded: capacities are whole rollouts
                "fresh_per_step": B / ratio,
                "baseline": trial_run in baseline_trials,
                "arm": arms.get(trial_run, "sampler"),
                "predicted_when_run": predicted_at.get(trial_run, np.nan),
                "best_accuracy": m[tracking.FINAL_BEST_ACCURACY],
                "final_accuracy": m[tracking.FINAL_ACCURACY],
                "initial_accuracy": m.get(tracking.FINAL_INITIAL_ACCURACY, np.nan),
                "mu_measured": m.get(tracking.FINAL_MU_MEASURED, np.nan),
                "mu_used": m.get(tracking.FINAL_MU, np.nan),
                "target": float(p["eval.target_accuracy"]),
                "wall_seconds": m.get(tracking.FINAL_WALL_SECONDS, np.nan),
            })
            with open(client.download_artifacts(r.info.run_id, tracking.CURVE_ARTIFACT, tmp)) as f:
                for e in json.load(f):
                    curve_rows.append({"run_id": r.info.run_id, "batch_size": B, **e})
            with open(client.download_artifacts(r.info.run_id, tracking.AGES_ARTIFACT, tmp)) as f:
                ages[r.info.run_id] = {int(k): v for k, v in json.load(f)["age_counts"].items()}
            logged = {mm.step: mm.value for mm in client.get_metric_history(r.info.run_id, tracking.COMPUTE_UNITS)}
            for mm in client.get_metric_history(r.info.run_id, tracking.POLICY_ENTROPY):
                entropy_rows.append({"run_id": r.info.run_id, "step": mm.step, "entropy": mm.value, "units_logged": logged.get(mm.step)})
    if not rows:
        raise ConfigError(f"study: no completed trial in MLflow experiment {name!r}")
    runs = pd.DataFrame(rows)
    curves = pd.DataFrame(curve_rows)
    target = float(runs["target"].iloc[0])
    if ref is None:  # no reference recorded: the baseline's measured mu, else the median measured mu
        base = runs[runs["baseline"]]
        ref = float((base if len(base) else runs)["mu_measured"].median())
    ctt = compute_to_target(curves, target, ref)
    runs = runs.merge(ctt, on="run_id")
    curves["units"] = units_at(curves, ref)
    return StudyData(name, ref, target, runs, curves, pd.DataFrame(entropy_rows), ages)


def reaccount(data: StudyData, mu: float) -> StudyData:
    """The same study with compute re-accounted at another mu (what-if hardware): curves and compute-to-target."""
    curves = data.curves.assign(units=units_at(data.curves, mu))
    runs = data.runs.drop(columns=["compute_to_target", "censored", "total_units"]).merge(compute_to_target(data.curves, data.target, mu), on="run_id")
    return StudyData(data.name, mu, data.target, runs, curves, data.entropy, data.ages)
