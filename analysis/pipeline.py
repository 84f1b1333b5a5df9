"""The asynchronous pipeline's study tables: for each configuration of a study whose runs include
`pipeline.mode: async`, its split (W generators, T trainers), the replay ratio that emerged, mu by the paper's
estimator (App. D.4), each side's idle fraction, and the wall time to the target (the pipeline's wall seconds,
evaluations excluded) against the synchronous baseline on the same seeds.

The theory's mapping (docs/theory.md, docs/pipeline.md): with W generators and T trainers that never stall, each trained
rollout is used y ≈ mu·T/W times, so the split that realises a replay ratio y* is W/T ≈ mu/y*, and the buffer that
realises x* holds N = x*·R = x*·B/y* rollouts. Each row compares the y its split implies (at the synchronous mu the
study measured) with the y that emerged, and `mapped_split` turns a predicted (x*, y*) into (W/T, N).
"""

from __future__ import annotations

import math

import pandas as pd

from workbench import censoring, knobs, stats
from workbench.censoring import Outcome
from workbench.compute import to_target

from analysis.data import StudyData


def wall_to_target(curves: pd.DataFrame, target: float) -> dict[str, Outcome]:
    """Each run's working seconds (evaluations excluded) at its first evaluation at or above `target`, by run id; a
    run that never got there is censored at its total (`workbench.censoring`)."""
    out = {}
    for run_id, g in curves.sort_values("step").groupby("run_id", sort=False):
        seconds = (
            g["wall_seconds"] if "wall_seconds" in g and g["wall_seconds"].notna().all() else g["seconds"]
        )  # older runs: seconds
        r = to_target(seconds.tolist(), g["reading"].tolist(), target)
        out[run_id] = Outcome(r.total, True) if r.censored else Outcome(r.value)
    return out


def device_time_to_target(data: StudyData) -> dict[str, Outcome]:
    """Each run's device-seconds to the target: its wall seconds to it x its W + T devices (the paper's count: one
    device per generator and per trainer), by run id. Arms with different splits compare on it, not on wall time."""
    wall = wall_to_target(data.curves, data.target)
    devices = dict(zip(data.runs["run_id"], data.runs["generators"] + data.runs["trainers"]))
    return {r: Outcome(w.value * devices[r], w.censored) for r, w in wall.items() if r in devices}


def is_async(data: StudyData) -> bool:
    """Whether any run of the study ran the asynchronous pipeline."""
    return "pipeline" in data.runs and bool((data.runs["pipeline"] == "async").any())


def mapped_split(x: float, y: float, mu: float, batch_size: int) -> dict[str, float]:
    """The asynchronous settings that realise (x, y): W/T ≈ mu / y and N = x·B / y (`workbench.knobs`)."""
    return {
        "x": x,
        "y": y,
        "workers_per_trainer": knobs.workers_per_trainer(y, mu),
        "capacity": knobs.capacity(x, y, batch_size, distinct=False),
    }


def split_table(data: StudyData) -> list[dict]:
    """One row per configuration (synchronous ones included, as the reference): what each side did."""
    runs = data.runs
    if not is_async(data):
        return []
    wall = wall_to_target(data.curves, data.target)
    runs = runs.assign(wall_to_target=runs["run_id"].map(wall))
    base = runs[runs["baseline"]]  # the synchronous trial, or, in an asynchronous study, the queue
    base_wall = dict(zip(base["seed"], base["wall_to_target"]))
    # the mu a split's expected replay ratio is read at: the synchronous runs' measured mu, else (an asynchronous study)
    # its queue baseline's, which counts an emulated slower generator's time
    sync_mu = (
        float(runs.loc[runs["pipeline"] == "sync", "mu_measured"].median())
        if (runs["pipeline"] == "sync").any()
        else float(base["mu_measured"].median())
        if len(base)
        else math.nan
    )
    rows = []
    for number, g in runs.groupby("trial_number", sort=True):
        first = g.iloc[0]
        asynchronous = first["pipeline"] == "async"
        w = censoring.level_interval(g["wall_to_target"].tolist())
        c = censoring.level_interval(list(censoring.from_frame(g).values()))
        row = {
            "trial_number": int(number),
            "pipeline": str(first["pipeline"]),
            "strategy": str(first.get("strategy_run", first["strategy"])),
            "generators": int(first["generators"]),
            "trainers": int(first["trainers"]),
            "capacity": int(first["capacity"]),
            "baseline": bool(first["baseline"]),
            "seeds": len(g),
            "censored_seeds": int(g["censored"].sum()),
            "replay_ratio": float(g["replay_ratio_measured"].median()),
            "mu_d4": float(g["mu_d4"].median()) if asynchronous else math.nan,
            "mu_measured": float(g["mu_measured"].median()),
            "trainer_idle": float(g["trainer_idle"].median()) if asynchronous else math.nan,
            "generator_idle": float(g["generator_idle"].median()) if asynchronous else math.nan,
            "wall_to_target": w.estimate,
            "wall_ci": [w.low, w.high],
            "compute_to_target": c.estimate,
            "compute_ci": [c.low, c.high],
        }
        if asynchronous and math.isfinite(sync_mu):
            # y ≈ mu·T/W when neither side stalls: what this split should give at the synchronous mu
            row["replay_ratio_from_split"] = knobs.replay_ratio_of_split(sync_mu, row["generators"], row["trainers"])
        if not row["baseline"] and base_wall:
            iv = censoring.paired_ratio(dict(zip(g["seed"], g["wall_to_target"])), base_wall)
            row.update(
                wall_ratio_to_baseline=iv.estimate,
                wall_ratio_ci=[iv.low, iv.high],
                wall_verdict=censoring.verdict(iv)
                if not math.isfinite(iv.estimate)
                else stats.verdict(iv, "wall time"),
                **{f"wall_{k}": v for k, v in censoring.counts_of(iv).items()},
            )
        rows.append(_json_safe(row))
    return rows


def _json_safe(row: dict) -> dict:
    """NaN (no value, or an interval's end with one seed) as None, for JSON."""

    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {k: [clean(x) for x in v] if isinstance(v, list) else clean(v) for k, v in row.items()}
