"""The per-run noise split by warm start (`analysis.resolution.resolution` with `seeds_per_checkpoint`)."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.resolution import resolution


def _runs(checkpoint_effect: float) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for number in (0, 1):
        for seed in range(8):
            checkpoint = seed // 4
            value = 50 * math.exp(checkpoint_effect * (1 if checkpoint else -1) + rng.normal(0, 0.05))
            rows.append(
                {
                    "trial_number": number,
                    "seed": seed,
                    "checkpoint": checkpoint,
                    "baseline": number == 0,
                    "censored": 0,
                    "compute_to_target": value,
                }
            )
    return pd.DataFrame(rows)


def test_the_checkpoints_spread_is_told_apart_from_the_seeds():
    z = resolution(_runs(checkpoint_effect=0.3))
    assert z["checkpoints"] == 2 and z["within_checkpoint_log_sd_df"] == 12
    assert z["within_checkpoint_log_sd"] == pytest.approx(0.05, abs=0.03)
    assert z["per_run_log_sd"] > 0.25  # the pooled figure carries the checkpoints' spread
    assert z["paired_log_sd"] < 0.12  # pairing by seed (and so by checkpoint) removes it


def test_one_checkpoint_adds_nothing():
    runs = _runs(0.3).assign(checkpoint=0)
    assert "within_checkpoint_log_sd" not in resolution(runs)


def test_each_checkpoint_is_read_at_its_own_target():
    from analysis.resolution import by_checkpoint

    # checkpoint 0 climbs from 0.4 to 0.8, checkpoint 1 from 0.35 to 0.5: a fixed target of 0.65 censors checkpoint 1
    rows, curves = [], []
    for number in (0, 1):
        for seed in range(4):
            checkpoint, run_id = seed // 2, f"{number}-{seed}"
            start, top = (0.4, 0.8) if checkpoint == 0 else (0.35, 0.5)
            speed = 1.0 if number == 0 else 1.25  # trial 1 learns 1.25x faster on every checkpoint
            rows.append(
                {
                    "run_id": run_id,
                    "trial_number": number,
                    "seed": seed,
                    "checkpoint": checkpoint,
                    "baseline": number == 0,
                    "arm": "sampler",
                    "censored": 0,
                }
            )
            for step, units in enumerate(range(0, 101, 5)):
                progress = 1 - math.exp(-speed * units / 30)
                curves.append(
                    {"run_id": run_id, "step": step, "units": float(units), "reading": start + (top - start) * progress}
                )
    got = by_checkpoint(pd.DataFrame(curves), pd.DataFrame(rows), "interpolated", 0.7)
    targets = {r["checkpoint"]: r["target"] for r in got}
    assert targets[0] > 0.65 > 0.5 > targets[1] > 0.35
    for r in got:
        if r["trial_number"] == 1:
            assert r["censored"] == 0 and r["ratio"] == pytest.approx(0.8, abs=0.05)  # the same saving on both


def test_each_checkpoint_compares_with_on_policy_at_its_fastest_lr_there():
    from analysis.resolution import by_checkpoint

    rows, curves = [], []
    arms = {
        0: (1, 1, "uniform", 2.5e-5, 1.0),
        1: (8, 2, "positive_bias", 2.5e-5, 1.25),
        2: (1, 1, "uniform", 5e-5, 1.25),
    }
    for number, (x, y, strategy, lr, speed) in arms.items():
        for seed in range(4):
            run_id = f"{number}-{seed}"
            rows.append(
                {
                    "run_id": run_id,
                    "trial_number": number,
                    "seed": seed,
                    "checkpoint": seed // 2,
                    "x": float(x),
                    "y": float(y),
                    "strategy": strategy,
                    "lr": lr,
                    "baseline": number == 0,
                    "arm": "sampler",
                    "censored": 0,
                }
            )
            for step, units in enumerate(range(0, 101, 5)):
                curves.append(
                    {
                        "run_id": run_id,
                        "step": step,
                        "units": float(units),
                        "reading": 0.4 + 0.4 * (1 - math.exp(-speed * (1 + 0.01 * seed) * units / 30)),
                    }
                )
    got = [
        r
        for r in by_checkpoint(pd.DataFrame(curves), pd.DataFrame(rows), "interpolated", 0.7)
        if r["trial_number"] == 1
    ]
    assert len(got) == 2
    for r in got:  # 0.8x the default lr's compute, the same as on-policy at twice the lr
        assert r["ratio"] == pytest.approx(0.8, abs=0.05)
        assert r["tuned_trial"] == 2 and r["ratio_to_tuned"] == pytest.approx(1.0, abs=0.03)
