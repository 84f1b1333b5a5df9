"""`analysis.recommend` on analysis results written by hand: replay only where its interval against lr-tuned
on-policy excludes 1, on-policy otherwise, and no recommendation where the data cannot carry one."""

import pytest

from analysis.recommend import from_probe, from_study, mu_from_seconds
from support.analysis_result import analysis


def _config(number, x, y, capacity, lr, seeds=4, censored=0, baseline=False):
    return {
        "trial_number": number,
        "x": x,
        "y": y,
        "capacity": capacity,
        "ratio": y,
        "lr": lr,
        "strategy": "uniform",
        "baseline": baseline,
        "arm": "sampler",
        "seeds": seeds,
        "censored_seeds": censored,
        "compute_to_target": 50.0,
        "ratio_to_baseline": 1.0,
        "ratio_ci_low": 0.9,
        "ratio_ci_high": 1.1,
        "verdict": "unresolved",
    }


def _result(high: float, seeds: int = 4, censored: int = 0):
    on = [
        {"trial_number": 0, "lr": 2.5e-5, "compute_to_target": 60.0, "ci_low": 50.0, "ci_high": 70.0},
        {"trial_number": 1, "lr": 5e-5, "compute_to_target": 50.0, "ci_low": 45.0, "ci_high": 55.0},
        {"trial_number": 2, "lr": 1e-4, "compute_to_target": 70.0, "ci_low": 60.0, "ci_high": 80.0},
    ]
    pair = {"ratio": 0.6, "low": 0.45, "high": high, "seeds": seeds, "verdict": "x"}
    return analysis(
        {
            "study": "s",
            "reference_mu": 5.5,
            "metric": "accuracy",
            "target_accuracy": 0.65,
            "pipeline": [{"trial_number": 0}],
            "configurations": [
                _config(0, 1, 1, 128, 2.5e-5, seeds, censored, True),
                _config(1, 1, 1, 128, 5e-5, seeds, censored),
                _config(2, 1, 1, 128, 1e-4, seeds),
                _config(3, 40.0, 5.0, 1024, 2.5e-5, seeds),
            ],
            "tuned_lr": {
                "on_policy_by_lr": on,
                "on_policy_best_lr": 5e-5,
                "on_policy_best_trial": 1,
                "on_policy_best_lr_bounded": True,
                "tuned": [
                    {
                        "trial_number": 3,
                        "lr": 2.5e-5,
                        "x": 40.0,
                        "y": 5.0,
                        "against_tuned": pair,
                        "against_tuned_device_time": {**pair, "ratio": 0.5, "low": 0.4, "high": 0.62},
                    }
                ],
            },
            "models": [
                {
                    "model": "thm45",
                    "skill": {"selected": False, "words": "not selected"},
                    "optimum": {"x": 1.0, "y": 1.0, "compute": 1.0},
                }
            ],
        }
    )


def test_replay_whose_interval_against_tuned_on_policy_excludes_one_is_recommended_with_its_split():
    rec = from_study(_result(high=0.8), split=(1, 1))
    r = rec.recommended
    assert (r.strategy, r.capacity, r.replay_ratio, r.lr) == ("uniform", 1024, 5.0, 2.5e-5)
    assert r.workers_per_trainer == pytest.approx(5.5 / 5.0) and r.given.replay_ratio == pytest.approx(5.5)
    assert rec.saving.share == pytest.approx(0.4) and (rec.saving.low, rec.saving.high) == pytest.approx((0.2, 0.55))
    assert rec.saving_device_time.share == pytest.approx(0.5)
    assert "no model beats the null predictors" in rec.skill
    assert any("40%" in line and "[20%, 55%]" in line for line in rec.lines())
    assert type(rec).from_json(rec.to_json()) == rec  # a recommendation round-trips through its JSON


def test_within_the_noise_it_recommends_on_policy_at_its_tuned_lr_and_says_why():
    rec = from_study(_result(high=1.3))
    assert rec.recommended.strategy == "on-policy" and rec.recommended.lr == 5e-5 and rec.saving is None
    assert "0.60x [0.45, 1.30]" in rec.why_on_policy


def test_data_that_cannot_carry_a_recommendation_says_so():
    assert "one seed" in from_study(_result(high=0.8, seeds=1)).refused
    assert "missed the target on 3 of 4" in from_study(_result(high=0.8, censored=3)).refused
    far = from_study(_result(high=0.8), mu=0.5)
    assert any(n.startswith("extrapolated") for n in far.notes)  # an asynchronous study's staleness is its split's


def test_mu_from_measured_seconds_and_a_probe_without_a_sweep():
    assert mu_from_seconds(gen_seconds=0.05, train_seconds=1.28, batch_size=128) == pytest.approx(5.0)
    rec = from_probe({"mu": 0.5, "predicted": {"x": 4, "y": 2, "capacity": 256}})
    assert rec.recommended is None and "--lr-sweep" in rec.refused
