"""A study's trials from MLflow into tidy pandas frames (MLflow is the source of truth for curves;
docs/architecture.md).

- `runs`: one row per seed run (a configuration trained once): knobs, x = N/R, y = B/R, seed, compute-to-target at
  the study's reference mu by the study's estimator (`workbench.estimators`; with the bracket its crossing lies in
  and the censored flag), best and final accuracy, measured mu, and the arm (`sampler`; `predicted` for a fitted
  optimum run by `workbench study verify`, with the compute it was predicted to need; `confirm` for a re-run on
  fresh seeds by `workbench study confirm`).
- `curves`: one row per evaluation of every seed run: step, compute units at the reference mu, accuracy, pass@k,
  cumulative generated/trained rollouts and seconds (so compute can be re-accounted at any mu).
- `entropy`: policy entropy of fresh samples per step, with compute units.
"""

from __future__ import annotations

import json
import os
import tempfile
import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException

from workbench import censoring, knobs, tracking
from workbench.compute import units
from workbench.config import ConfigError
from workbench.estimators import ESTIMATORS


@dataclass
class StudyData:
    name: str
    reference_mu: float
    target: float
    estimator: str
    runs: pd.DataFrame
    curves: pd.DataFrame
    entropy: pd.DataFrame
    ages: dict[str, dict[int, int]]
    """Per seed run id: trained-rollout counts by age (the staleness histogram)."""
    metric: str = "accuracy"
    """The held-out curve compute-to-target reads (`eval.metric`); `curves["reading"]` holds its values."""
    gain_fraction: float = 0.7
    """The study's `target_gain_fraction` (its auto-target rule; studies that did not record it: the default)."""

    def configs(self) -> pd.DataFrame:
        """One row per configuration: compute-to-target over seeds with its 95% interval (censored seeds as censored,
        `workbench.censoring`), the paired ratio against the baseline on the same seeds with its interval and pair
        counts (informative, censored on one side, both censored and left out),
        means of the rest (`best_accuracy`: greedy accuracy's best; `best_reading`: the best of the study's own
        curve, `metric`), seeds and censored seeds counted."""
        keys = ["trial_number", "x", "y", "capacity", "ratio", "horizon", "strategy", "baseline", "arm"] + [
            k for k in ("variant", "lr") if k in self.runs
        ]
        best_reading = (
            self.curves.groupby("run_id")["reading"].max() if "reading" in self.curves else pd.Series(dtype=float)
        )
        rows = []
        for key, g in self.runs.groupby(keys, dropna=False, sort=False):
            values = censoring.from_frame(g)
            est = censoring.level_interval(list(values.values()))
            row = dict(zip(keys, key))
            row.update(
                seeds=len(g),
                censored_seeds=int(g["censored"].sum()),
                compute_to_target=est.estimate,
                ci_low=est.low,
                ci_high=est.high,
                best_accuracy=g["best_accuracy"].mean(),
                best_reading=g["run_id"].map(best_reading).mean(),
                final_accuracy=g["final_accuracy"].mean(),
                total_units=g["total_units"].mean(),
                mu_measured=g["mu_measured"].median(),
                predicted_when_run=g["predicted_when_run"].iloc[0],
                _values=values,
            )
            rows.append(row)
        out = pd.DataFrame(rows)
        bases = out[out["baseline"]]
        ratio, low, high, verdicts, counts = [], [], [], [], []
        for _, r in out.iterrows():
            # The baseline run on the most of this configuration's seeds (a confirm run has its own).
            shared = [
                (len(set(b["_values"]) & set(r["_values"])), b)
                for _, b in bases.iterrows()
                if b["trial_number"] != r["trial_number"]
            ]
            shared = [sb for sb in shared if sb[0] > 0]
            if r["baseline"] or not shared:
                (
                    ratio.append(np.nan),
                    low.append(np.nan),
                    high.append(np.nan),
                    verdicts.append("baseline" if r["baseline"] else "no paired baseline"),
                )
                counts.append(censoring.counts_of(None))
                continue
            base = max(shared, key=lambda sb: sb[0])[1]
            iv = censoring.paired_ratio(r["_values"], base["_values"])
            ratio.append(iv.estimate), low.append(iv.low), high.append(iv.high), verdicts.append(censoring.verdict(iv))
            counts.append(censoring.counts_of(iv))
        out = out.assign(
            ratio_to_baseline=ratio,
            ratio_ci_low=low,
            ratio_ci_high=high,
            verdict=verdicts,
            **{k: [c[k] for c in counts] for k in censoring.counts_of(None)},
        ).drop(columns="_values")
        return out.sort_values("compute_to_target").reset_index(drop=True)


def units_at(curves: pd.DataFrame, mu: float) -> pd.Series:
    """Cumulative compute units of every evaluation, re-accounted at `mu` (`workbench.compute.units`)."""
    return units(curves["train_rollouts"], curves["gen_rollouts"], curves["batch_size"], mu)


def compute_to_target(curves: pd.DataFrame, target: float, mu: float, estimator: str = "first") -> pd.DataFrame:
    """Per run: compute to `target` at `mu` by `estimator` (`workbench.estimators`), the bracket its crossing lies
    in, and the censored flag; a censored run scores its penalised total (fits use `total_units` instead)."""
    c = curves.assign(units=units_at(curves, mu))
    rows = []
    for run_id, g in c.groupby("run_id", sort=False):
        g = g.sort_values("step")
        r = ESTIMATORS[estimator](g["units"].tolist(), g["reading"].tolist(), target)
        rows.append((run_id, r.value, int(r.censored), r.total, r.low, r.high))
    return pd.DataFrame(
        rows, columns=["run_id", "compute_to_target", "censored", "total_units", "low_units", "high_units"]
    )


def _curve(client, run_id: str, tmp: str) -> list[dict]:
    """A run's evaluations: its curve artifact, or, where the artifact store was lost, the same rows rebuilt from the
    run's metric history (the evaluation at step s follows s optimizer steps, whose cumulative counts are logged at
    step s - 1)."""
    try:
        with open(client.download_artifacts(run_id, tracking.CURVE_ARTIFACT, tmp)) as f:
            return json.load(f)
    except (OSError, MlflowException):
        pass

    rows = tracking.curve_from_history(client, run_id)
    if not rows:
        raise ConfigError(f"study: run {run_id} has neither its curve artifact nor the metric history to rebuild it")
    return rows


def load_study(name: str, tracking_uri: str) -> StudyData:
    """Read every finished seed run of study `name` (MLflow experiment of the same name)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per downloaded curve otherwise
    client = tracking.client(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise ConfigError(f"study: no MLflow experiment named {name!r} in {tracking_uri}")
    kind = f"tags.`{tracking.KIND}`"
    parent = client.search_runs([exp.experiment_id], filter_string=f"{kind} = '{tracking.KIND_STUDY}'")
    trials = client.search_runs(
        [exp.experiment_id], filter_string=f"{kind} = '{tracking.KIND_TRIAL}'", max_results=5000
    )
    seeds = client.search_runs(
        [exp.experiment_id],
        filter_string=f"{kind} = '{tracking.KIND_SEED}' and attributes.status = 'FINISHED'",
        max_results=5000,
    )
    if not seeds:
        raise ConfigError(f"study: no finished trial in MLflow experiment {name!r}")
    baseline_trials = {t.info.run_id for t in trials if t.data.params.get(tracking.PARAM_BASELINE) == "True"}
    arms = {t.info.run_id: t.data.tags[tracking.ARM] for t in trials if tracking.ARM in t.data.tags}
    arm_of_number = {t.data.tags.get(tracking.TRIAL_NUMBER): arms.get(t.info.run_id, "sampler") for t in trials}
    predicted_at = {t.info.run_id: t.data.metrics.get(tracking.PREDICTED_COMPUTE_TO_TARGET, np.nan) for t in trials}
    ref, target, estimator, metric, gain_fraction = _study_settings(parent, trials, seeds)

    # Only seeds of completed trials: a trial whose worker died is retried as a new trial, and the seeds its first
    # attempt finished would otherwise count its configuration twice.
    complete = {
        t.info.run_id
        for t in trials
        if t.info.status == "FINISHED" and t.data.tags.get(tracking.STATUS) == tracking.STATUS_FINISHED
    }
    rows, curve_rows, entropy_rows, ages = [], [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in seeds:
            trial_run = r.data.tags.get(tracking.PARENT_RUN)
            if r.data.tags.get(tracking.STATUS) != tracking.STATUS_FINISHED or trial_run not in complete:
                continue
            # The seeds a race added to a configuration count as that configuration's (`study race`).
            number = r.data.tags.get(tracking.EXTENDS) or r.data.tags.get(tracking.TRIAL_NUMBER, "-1")
            arm = (
                arm_of_number.get(number, "sampler")
                if tracking.EXTENDS in r.data.tags
                else arms.get(trial_run, "sampler")
            )
            rows.append(
                _seed_row(r, int(number), arm, trial_run in baseline_trials, predicted_at.get(trial_run, np.nan))
            )
            B = rows[-1]["batch_size"]
            for e in _curve(client, r.info.run_id, tmp):
                curve_rows.append({"run_id": r.info.run_id, "batch_size": B, **e})
            try:
                with open(client.download_artifacts(r.info.run_id, tracking.AGES_ARTIFACT, tmp)) as f:
                    ages[r.info.run_id] = {int(k): v for k, v in json.load(f)["age_counts"].items()}
            except (OSError, MlflowException):
                pass  # artifacts lost: the staleness histogram leaves this run out, the curve comes from metrics
            logged = {mm.step: mm.value for mm in client.get_metric_history(r.info.run_id, tracking.COMPUTE_UNITS)}
            for mm in client.get_metric_history(r.info.run_id, tracking.POLICY_ENTROPY):
                entropy_rows.append(
                    {"run_id": r.info.run_id, "step": mm.step, "entropy": mm.value, "units_logged": logged.get(mm.step)}
                )
    if not rows:
        raise ConfigError(f"study: no completed trial in MLflow experiment {name!r}")
    runs = emergent_ratios(variants(pd.DataFrame(rows)))
    curves = pd.DataFrame(curve_rows)
    if metric not in curves or curves[metric].isna().any():
        raise ConfigError(f"study: eval.metric is {metric}, but some evaluations did not log it")
    curves["reading"] = curves[metric].astype(float)
    if target is None:
        target = float(runs["target"].iloc[0])
    if ref is None:  # no reference recorded: the baseline's measured mu, else the median measured mu
        base = runs[runs["baseline"]]
        ref = float((base if len(base) else runs)["mu_measured"].median())
    ctt = compute_to_target(curves, target, ref, estimator)
    runs = runs.merge(ctt, on="run_id")
    curves["units"] = units_at(curves, ref)
    entropy = pd.DataFrame(entropy_rows, columns=["run_id", "step", "entropy", "units_logged"])  # none: a trainer
    # that does not log it (a trial command, docs/trainers.md)
    return StudyData(name, ref, target, estimator, runs, curves, entropy, ages, metric, gain_fraction)


def _study_settings(parent: list, trials: list, seeds: list) -> tuple:
    """What a study recorded about itself: its reference mu and target (None where not recorded), its estimator,
    the curve its runs read and its auto-target rule."""
    ref = target = None
    for r in [*parent, *trials]:
        if ref is None and tracking.REFERENCE_MU in r.data.tags:
            ref = float(r.data.tags[tracking.REFERENCE_MU])
        if target is None and tracking.TARGET_ACCURACY in r.data.tags:
            target = float(r.data.tags[tracking.TARGET_ACCURACY])  # the study's (set by its baseline when `auto`)
    # studies before estimators read `first`
    estimator = parent[0].data.params.get("estimator", "first") if parent else "first"
    metric = seeds[0].data.params.get("eval.metric", "accuracy")  # studies before `eval.metric`: greedy accuracy
    gain_fraction = float(parent[0].data.params.get("target_gain_fraction", 0.7)) if parent else 0.7
    return ref, target, estimator, metric, gain_fraction


def _seed_row(r, number: int, arm: str, baseline: bool, predicted: float) -> dict:
    """One seed run (an MLflow run) as a row of `StudyData.runs`: its knobs in the model's coordinates, its warm
    start, arm and measured summaries."""
    p, m = r.data.params, r.data.metrics
    B = int(p["batch_size"])
    ratio = float(p["replay.ratio"])
    capacity = int(p["replay.capacity"])
    return {
        "run_id": r.info.run_id,
        "trial_number": number,
        "seed": int(p["seed"]),
        "batch_size": B,
        "capacity": capacity,
        "ratio": ratio,
        "horizon": None if p["replay.horizon"] == "null" else int(p["replay.horizon"]),
        "strategy": p["replay.strategy"],
        "strategy_knobs": {
            k.rsplit(".", 1)[1]: v for k, v in p.items() if k.startswith(f"replay.{p['replay.strategy']}.")
        },
        "objective": p["objective.name"],
        "y": ratio,
        "x": float(f"{knobs.staleness(capacity, ratio, B):.3g}"),  # N/R, rounded: capacities are whole rollouts
        "fresh_per_step": knobs.fresh_per_step(B, ratio),
        "lr": float(p.get("lr", "nan")),
        "checkpoint": int(p.get("model.init_seed", 0)),  # the warm start (`seeds_per_checkpoint`)
        "baseline": baseline,
        "arm": arm,
        "predicted_when_run": predicted,
        "best_accuracy": m[tracking.FINAL_BEST_ACCURACY],
        "final_accuracy": m[tracking.FINAL_ACCURACY],
        "initial_accuracy": m.get(tracking.FINAL_INITIAL_ACCURACY, np.nan),
        "mu_measured": m.get(tracking.FINAL_MU_MEASURED, np.nan),
        "mu_used": m.get(tracking.FINAL_MU, np.nan),
        "target": float(p["eval.target_accuracy"]),
        "wall_seconds": m.get(tracking.FINAL_WALL_SECONDS, np.nan),
        # where the wall time went (evaluation is neither generation nor training compute)
        "gen_seconds": m.get("final/gen_seconds", np.nan),
        "train_seconds": m.get("final/train_seconds", np.nan),
        "eval_seconds": m.get("final/eval_seconds", np.nan),
        # the run's means of its per-step staleness diagnostics (`workbench.trial.diagnostics.RUN_MEANS`)
        "ess_mean": m.get("final/ess_mean", np.nan),
        "grad_cosine_mean": m.get("final/grad_cosine_mean", np.nan),
        "age_mean": m.get("final/age_mean", np.nan),
        # the pipeline (`pipeline.*`; studies before it: synchronous, one process)
        "pipeline": p.get("pipeline.mode", "sync"),
        "generators": int(p.get("pipeline.generators", 1)),
        "trainers": int(p.get("pipeline.trainers", 1)),
        "slowdown": float(p.get("pipeline.generator_slowdown", 1.0)),
        "replay_ratio_measured": m.get("final/replay_ratio", np.nan),
        "mu_d4": m.get("final/pipeline_mu_d4", np.nan),
        "trainer_idle": m.get("final/pipeline_trainer_idle_fraction", np.nan),
        "generator_idle": m.get("final/pipeline_generator_idle_fraction", np.nan),
    }


def variants(runs: pd.DataFrame) -> pd.DataFrame:
    """`variant`: the knobs of a run's strategy (`replay.<strategy>.*`) that differ between the study's runs of that
    strategy, as `replay_fraction=0` (empty where none does), and its loss (`loss=oapl`) where the study's runs differ
    in it. Two configurations of one strategy that differ only
    there (prioritized replay, and the same strategy with replay_fraction 0: the skip alone) are two cells, not one."""
    variant = pd.Series("", index=runs.index, dtype=object)
    for _, g in runs.groupby("strategy"):
        table = pd.DataFrame(list(g["strategy_knobs"]), index=g.index)
        # a knob some runs lack was added to the strategy after they ran (they ran at its default): only the values
        # the runs logged are compared
        varying = [k for k in table if table[k].nunique(dropna=True) > 1]
        variant[g.index] = [" ".join(f"{k}={_short(row[k])}" for k in varying) for _, row in table.iterrows()]
    if "objective" in runs and runs["objective"].nunique() > 1:  # a study of several losses: the loss is a knob
        variant = (variant + " loss=" + runs["objective"]).str.strip()
    return runs.drop(columns="strategy_knobs").assign(variant=variant)


def strategy_shown(r) -> dict:
    """A configuration's strategy as the labels show it (`workbench.verdicts.knob_label`): its `variant` knobs, after
    `strategy` unless it is uniform (`{"strategy": "prioritized", "replay_fraction": "0"}`; `{"loss": "oapl"}` in a
    study of several losses; nothing for uniform replay in a study of one)."""
    strategy = r.get("strategy", "uniform")
    variant = r.get("variant") or ""
    shown = dict(kv.split("=", 1) for kv in str(variant).split())
    return shown if strategy == "uniform" else {"strategy": strategy, **shown}


def _short(value: str) -> str:
    """A logged parameter as the labels write it: `0.0` as `0`, `2.5e-05` as `2.5e-05`, text as it is."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def emergent_ratios(runs: pd.DataFrame) -> pd.DataFrame:
    """Asynchronous runs in the model's coordinates: the queue (each rollout trained once) is on-policy GRPO (x 1,
    y 1, uniform), and a buffer's replay ratio is not set but emerges from the split, so its y is the configuration's
    median measured K_train/K_gen over its seeds and x = N·y/B. `strategy_run` keeps the strategy each run ran."""
    runs = runs.assign(strategy_run=runs["strategy"])
    if "pipeline" not in runs or not (runs["pipeline"] == "async").any():
        return runs
    asynchronous = runs["pipeline"] == "async"
    queue = asynchronous & (runs["strategy"] == "queue")
    runs.loc[queue, ["strategy", "y", "ratio", "x"]] = ["uniform", 1.0, 1.0, 1.0]
    runs.loc[queue, "fresh_per_step"] = runs.loc[queue, "batch_size"].astype(float)
    buffer = asynchronous & (runs["strategy"] == "uniform") & ~queue
    if buffer.any():
        y = runs[buffer].groupby("trial_number")["replay_ratio_measured"].transform("median").round(2)
        runs.loc[buffer, "y"] = y
        runs.loc[buffer, "ratio"] = y
        runs.loc[buffer, "x"] = [
            float(f"{knobs.staleness(c, r, b):.3g}")
            for c, r, b in zip(runs.loc[buffer, "capacity"], y, runs.loc[buffer, "batch_size"])
        ]
        runs.loc[buffer, "fresh_per_step"] = runs.loc[buffer, "batch_size"] / y
    return runs


def retarget(data: StudyData, target: float, estimator: str | None = None) -> StudyData:
    """The same study with compute-to-target read at another target accuracy (and with another estimator)."""
    estimator = estimator or data.estimator
    ctt = compute_to_target(data.curves, target, data.reference_mu, estimator)
    runs = data.runs.drop(columns=list(ctt.columns.drop("run_id"))).merge(ctt, on="run_id")
    return dataclasses.replace(data, target=target, estimator=estimator, runs=runs)


def reaccount(data: StudyData, mu: float) -> StudyData:
    """The same study with compute re-accounted at another mu (what-if hardware): curves and compute-to-target."""
    curves = data.curves.assign(units=units_at(data.curves, mu))
    ctt = compute_to_target(data.curves, data.target, mu, data.estimator)
    runs = data.runs.drop(columns=list(ctt.columns.drop("run_id"))).merge(ctt, on="run_id")
    return dataclasses.replace(data, reference_mu=mu, runs=runs, curves=curves)
