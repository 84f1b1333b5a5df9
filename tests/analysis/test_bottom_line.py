"""The report's bottom line (`analysis.bottom_line`): a claim only where the paired interval excludes 1, on the
study's curve, and the command that would settle it."""

from __future__ import annotations

import math

from analysis.bottom_line import bottom_line, runs_line


def _config(number: int, x: float, y: float, ratio: float = math.nan, low: float = math.nan, high: float = math.nan,
            seeds: int = 3, arm: str = "sampler") -> dict:
    return {"trial_number": number, "x": x, "y": y, "strategy": "uniform", "baseline": (x, y) == (1, 1), "arm": arm,
            "compute_to_target": 20.0 * (1 if math.isnan(ratio) else ratio), "ratio_to_baseline": ratio, "ratio_ci_low": low,
            "ratio_ci_high": high, "seeds": seeds, "censored_seeds": 0}


def _result(*configs: dict, censored: int = 0, confirmations=()) -> dict:
    return {"metric": "demo_prob", "target_accuracy": 0.665, "reference_mu": 0.92, "estimator": "fitted",
            "n_runs": 3 * len(configs), "n_censored_runs": censored, "n_configurations": len(configs),
            "configurations": list(configs), "confirmations": list(confirmations)}


BASE = _config(0, 1, 1)


def test_an_interval_containing_1_is_unresolved_and_the_next_step_is_a_race():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 1.10, 0.50, 2.44), _config(2, 8, 2, 1.21, 0.56, 2.61)), "studies/quickstart.yaml")
    assert line.startswith("**Bottom line.** No replay configuration is resolved from on-policy on `demo_prob`")
    assert "x 4, y 2 (trial 1), needs 1.10x on-policy's compute (95% CI 0.50 to 2.44, 3 paired seeds)" in line
    assert "saving" not in line and line.endswith("Next: `workbench study race studies/quickstart.yaml` adds seeds where the leader is not yet resolved.")


def test_a_resolved_saving_is_named_before_a_larger_unresolved_one_and_sent_to_confirmation():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 0.80, 0.70, 0.90), _config(2, 8, 4, 0.60, 0.30, 1.20)))
    assert "x 4, y 2 (trial 1), needs 0.80x" in line and "a resolved saving of 20% (1 of the 2 configurations tried saves" in line
    assert "`workbench study confirm SPEC`" in line


def test_a_replicated_saving_says_what_the_fresh_seeds_gave():
    best = _config(1, 4, 2, 0.80, 0.70, 0.90)
    confirmations = [{"selection": best, "replicated": _config(5, 4, 2, 0.95, 0.80, 1.10, arm="confirm")}]
    line = bottom_line(_result(BASE, best, confirmations=confirmations), "s.yaml")
    assert "On fresh seeds it needs 0.95x on-policy's compute (95% CI 0.80 to 1.10, 3 paired seeds): unresolved there." in line


def test_every_setting_resolvably_dearer_is_said_as_such():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 1.5, 1.2, 1.9), _config(2, 8, 2, 1.3, 1.1, 1.6)))
    assert "Every replay configuration tried needs resolvably more compute than on-policy" in line
    assert "the closest, replay at x 8, y 2 (trial 2), needs 1.30x" in line


def test_one_seed_is_never_a_claim():
    line = bottom_line(_result(BASE, _config(1, 4, 2, 0.5, seeds=1)))
    assert "0.50x on-policy's compute (one seed: no interval)" in line and "No replay configuration is resolved" in line


def test_no_run_reaching_the_target_says_nothing_is_measured_and_not_zero_censored():
    result = _result(BASE, _config(1, 4, 2, 1.0, 0.9, 1.1), censored=6)
    assert "No run reached the target 0.665 on `demo_prob`" in bottom_line(result) and "--target T" in bottom_line(result)
    assert "6 of 6 runs never reached the target 0.665" in runs_line(result)
    assert "every run reached the target 0.665" in runs_line(_result(BASE, _config(1, 4, 2, 1.0, 0.9, 1.1)))
