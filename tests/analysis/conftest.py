"""A study's frames built in memory (`analysis.data.StudyData`, as `load_study` returns them from MLflow): the report
runs on them without training or a tracking store."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.data import StudyData, compute_to_target, units_at

QUICKSTART_GRID = {(1.0, 1.0): 1.0, (4.0, 2.0): 1.1, (8.0, 2.0): 1.2}
"""The quickstart's configurations, (x, y) -> how much slower than on-policy each learns per unit of compute."""


def build_study(
    grid: dict[tuple[float, float], float] = QUICKSTART_GRID,
    seeds: int = 3,
    batch_size: int = 16,
    mu: float = 0.9,
    target: float = 0.6,
    metric: str = "demo_prob",
    steps: int = 100,
    name: str = "toy",
) -> StudyData:
    """Every (x, y) of `grid` run on `seeds` seeds: the curve 0.2 + 0.6(1 - exp(-units / (16 slowness))) with a
    seed's noise, evaluated every step; (1, 1) is the on-policy baseline. Trials numbered in the grid's order."""
    rng = np.random.default_rng(0)
    runs, curves, entropy, ages = [], [], [], {}
    for number, ((x, y), slowness) in enumerate(grid.items()):
        for seed in range(seeds):
            run_id = f"t{number}-s{seed}"
            scale = 16.0 * slowness * math.exp(0.2 * rng.standard_normal())
            runs.append(
                {
                    "run_id": run_id,
                    "trial_number": number,
                    "seed": seed,
                    "batch_size": batch_size,
                    "capacity": round(x * batch_size / y),
                    "ratio": y,
                    "horizon": None,
                    "strategy": "uniform",
                    "objective": "grpo",
                    "y": y,
                    "x": x,
                    "fresh_per_step": batch_size / y,
                    "lr": 2.5e-5,
                    "baseline": (x, y) == (1.0, 1.0),
                    "arm": "sampler",
                    "predicted_when_run": math.nan,
                    "final_accuracy": 0.75,
                    "initial_accuracy": 0.2,
                    "mu_measured": mu,
                    "mu_used": mu,
                    "target": target,
                    "wall_seconds": 60.0,
                    "pipeline": "sync",
                    "generators": 1,
                    "trainers": 1,
                }
            )
            for step in range(steps + 1):
                u = float(
                    units_at(
                        pd.DataFrame(
                            {
                                "train_rollouts": [step * batch_size],
                                "gen_rollouts": [step * batch_size / y],
                                "batch_size": [batch_size],
                            }
                        ),
                        mu,
                    ).iloc[0]
                )
                value = 0.2 + 0.6 * (1 - math.exp(-u / scale))
                curves.append(
                    {
                        "run_id": run_id,
                        "batch_size": batch_size,
                        "step": step,
                        "accuracy": min(1.0, value + 0.15),
                        "pass_at_k": min(1.0, value + 0.2),
                        "mean_at_k": value,
                        "demo_prob": value,
                        "gen_rollouts": step * batch_size / y,
                        "train_rollouts": float(step * batch_size),
                        "seconds": 1.5 * step,
                    }
                )
                entropy.append({"run_id": run_id, "step": step, "entropy": 0.5 - 0.005 * step, "units_logged": u})
            ages[run_id] = {a: batch_size for a in range(int(x))}
    curves = pd.DataFrame(curves)
    curves["reading"] = curves[metric]
    runs = pd.DataFrame(runs)
    best = curves.groupby("run_id")["accuracy"].max().rename("best_accuracy")  # greedy accuracy, as MLflow holds it
    runs = runs.merge(best, left_on="run_id", right_index=True).merge(
        compute_to_target(curves, target, mu, "first"), on="run_id"
    )
    curves["units"] = units_at(curves, mu)
    return StudyData(name, mu, target, "first", runs, curves, pd.DataFrame(entropy), ages, metric)


@pytest.fixture(scope="session")
def study():
    """`build_study` (the quickstart's grid unless told otherwise)."""
    return build_study
