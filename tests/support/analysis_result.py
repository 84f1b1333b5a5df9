"""An `analysis.result.Analysis` from a hand-written partial analysis: the fields a test cares about as JSON, every
other field filled with a neutral value (NaN numbers, empty blocks), so a test states only what it reads."""

from __future__ import annotations

import math

from analysis.result import SCHEMA_VERSION, Analysis

NAN = math.nan

CONFIGURATION = {
    "trial_number": 0,
    "x": 1.0,
    "y": 1.0,
    "capacity": 16,
    "ratio": 1.0,
    "baseline": False,
    "strategy": "uniform",
    "compute_to_target": NAN,
    "ci_low": NAN,
    "ci_high": NAN,
    "ratio_to_baseline": NAN,
    "ratio_ci_low": NAN,
    "ratio_ci_high": NAN,
    "verdict": "-",
    "best_accuracy": NAN,
    "best_reading": NAN,
    "seeds": 1,
    "censored_seeds": 0,
    "arm": "sampler",
}

FIT = {
    "alpha": NAN,
    "tau0": NAN,
    "rho": NAN,
    "scale": NAN,
    "sigma": NAN,
    "mu": NAN,
    "with_replacement": False,
    "n_points": 0,
    "n_censored": 0,
    "log_likelihood": NAN,
    "intervals": {},
    "loco": {},
    "r2_log": NAN,
    "median_abs_log_error": NAN,
}

MODEL = {
    "title": "",
    "params": {},
    "intervals": {},
    "unidentified": [],
    "n_points": 0,
    "n_censored": 0,
    "log_likelihood": NAN,
    "aic": NAN,
    "loco": {},
    "r2_log": NAN,
    "median_abs_log_error": NAN,
    "mu": NAN,
    "lr_ref": NAN,
}


def configuration(partial: dict, **extra) -> dict:
    """A configuration record with `partial`'s fields (the `ci_*` from `compute_to_target` where not given)."""
    return CONFIGURATION | extra | partial


def analysis(partial: dict) -> Analysis:
    """`partial` (analysis.json's keys, nested as there) completed and read as an `Analysis`."""
    configs = [configuration(c) for c in partial.get("configurations", [])]
    empirical = configs[0] if configs else CONFIGURATION
    filled = {
        "schema_version": SCHEMA_VERSION,
        "study": "toy",
        "target_accuracy": 0.6,
        "metric": "accuracy",
        "estimator": "first",
        "reference_mu": 1.0,
        "n_runs": 3 * len(configs),
        "n_configurations": len(configs),
        "n_censored_runs": 0,
        "variance_form": "",
        "noise_model": "",
        "mu": partial.get("reference_mu", 1.0),
        "fit": FIT,
        "fit_configurations": len(configs),
        "other_strategies": [],
        "predicted": {
            "x": NAN,
            "y": NAN,
            "compute_to_target": NAN,
            "knobs": {},
            "nearest_measured": empirical,
            "on_policy_optimal": False,
        },
        "empirical": empirical | {"predicted_compute_to_target": NAN},
        "measured_ratio_nearest_predicted_to_empirical": NAN,
        "pareto_front": [],
        "verified": [],
        "probe_verified": [],
        **partial,
        "configurations": configs,
        "confirmations": [
            {side: configuration(c[side], seed_list=[]) for side in ("selection", "replicated")}
            for c in partial.get("confirmations", [])
        ],
        "models": [MODEL | m for m in partial.get("models", [])],
    }
    if "predicted" in partial:
        nearest = partial["predicted"].get("nearest_measured") or {}
        filled["predicted"] = filled["predicted"] | {"nearest_measured": configuration(nearest)}
    if "baseline" in partial:
        filled["baseline"] = configuration(partial["baseline"], predicted_compute_to_target=NAN)
    return Analysis.from_json(filled)
