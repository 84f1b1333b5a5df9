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
            rows.append({"trial_number": number, "seed": seed, "checkpoint": checkpoint, "baseline": number == 0,
                         "censored": 0, "compute_to_target": value})
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
