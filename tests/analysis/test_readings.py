"""The study's comparisons read on every held-out curve its runs logged (`analysis.resolution.by_reading`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.resolution import by_reading
from workbench.estimators import auto_target

UNITS = np.arange(0.0, 101.0, 5.0)


def sigmoid(c: np.ndarray, r0: float, top: float, mid: float, slope: float = 3.0) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return r0 + (top - r0) / (1.0 + (mid / c) ** slope)


def study(demo_slowdown: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """On-policy (trial 0) and one replay arm (trial 1), 4 paired seeds: on greedy accuracy the arm keeps pace
    with the baseline; on the demonstrations' probability it needs `demo_slowdown` times the compute."""
    runs, curves = [], []
    for trial, baseline in ((0, True), (1, False)):
        for seed, jitter in enumerate((1.0, 1.04, 0.97, 1.02)):
            run_id = f"t{trial}s{seed}"
            runs.append({"run_id": run_id, "trial_number": trial, "seed": seed, "baseline": baseline, "arm": "sampler"})
            acc_mid = 30.0 * jitter * ((1.0 + 0.04 * (-1) ** seed) if trial else 1.0)  # paired noise, no effect
            demo_mid = 40.0 * jitter * (demo_slowdown if trial else 1.0)
            for step, (u, acc, demo) in enumerate(
                zip(UNITS, sigmoid(UNITS, 0.3, 0.9, acc_mid), sigmoid(UNITS, 0.05, 0.3, demo_mid))
            ):
                curves.append(
                    {
                        "run_id": run_id,
                        "step": step,
                        "units": u,
                        "accuracy": acc,
                        "demo_prob": demo,
                        "mean_at_k": np.nan if step % 2 else 0.5,
                        "reading": acc,
                    }
                )
    return pd.DataFrame(runs), pd.DataFrame(curves)


def test_every_logged_curve_is_read_at_its_own_auto_target_and_the_disagreement_shows():
    runs, curves = study(demo_slowdown=1.5)
    rows = by_reading(curves, runs, "accuracy", 0.72, "interpolated", gain_fraction=0.7)
    # mean@k was not sampled at every evaluation: it is not read
    assert {r["reading"] for r in rows} == {"accuracy", "demo_prob"}
    acc = next(r for r in rows if r["reading"] == "accuracy" and not r["baseline"])
    demo = next(r for r in rows if r["reading"] == "demo_prob" and not r["baseline"])
    assert acc["study_reading"] and acc["target"] == 0.72  # the study's own curve at the study's target
    base = [
        (g["units"].tolist(), g["demo_prob"].tolist())
        for _, g in curves[curves["run_id"].str.startswith("t0")].groupby("run_id")
    ]
    assert not demo["study_reading"] and demo["target"] == auto_target(base, 0.7)
    assert acc["ratio"] == pytest.approx(1.0, abs=0.03) and acc["verdict"].startswith("unresolved")
    assert demo["ratio"] == pytest.approx(1.5, rel=0.05) and demo["verdict"].startswith("resolved: more")
    assert demo["seeds"] == 4 and demo["censored"] == 0 and demo["paired_log_sd"] < 0.05


def test_a_curve_the_baseline_does_not_climb_is_left_out():
    runs, curves = study(demo_slowdown=1.0)
    curves["demo_prob"] = 0.1  # flat: no target on a rising curve
    rows = by_reading(curves, runs, "accuracy", 0.72, "first", gain_fraction=0.7)
    assert {r["reading"] for r in rows} == {"accuracy"}
