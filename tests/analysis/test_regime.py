"""`analysis.regime`'s crossover and report on studies written by hand."""

from analysis.regime import crossover, markdown


def _arm(number, strategy, lr, y, pair=None, wall=None, on_policy=False):
    return {
        "trial_number": number,
        "strategy": strategy,
        "capacity": 1024 if strategy == "uniform" else 128,
        "lr": lr,
        "y": y,
        "generators": 1,
        "trainers": 1,
        "y_of_split": y,
        "tuned_queue": number == 1,
        "x": 8 * y if strategy == "uniform" else 1.0,
        "seeds": 4,
        "censored_seeds": 0,
        "compute_to_target": 40.0,
        "compute_ci": [35.0, 45.0],
        "wall_to_target": 50.0,
        "wall_ci": [45.0, 55.0],
        "against_tuned": pair,
        "against_tuned_device_time": wall,
        "baseline": number == 0,
        "on_policy": on_policy,
    }


def _study(s, mu, high, wall_high):
    pair = {"ratio": 0.7, "low": 0.5, "high": high}
    return {
        "study": f"s{s}",
        "slowdown": s,
        "mu": mu,
        "generators": 1,
        "trainers": 1,
        "target": 0.65,
        "metric": "accuracy",
        "on_policy_best_lr": 5e-5,
        "on_policy_best_lr_bounded": True,
        "predicted": {"x": 8.0, "y": 2.0},
        "recommendation": {"lines": ["recommend at mu ..."]},
        "arms": [
            _arm(0, "queue", 2.5e-5, 1.0, on_policy=True),
            _arm(1, "queue", 5e-5, 1.0, on_policy=True),
            _arm(2, "uniform", 2.5e-5, mu, pair, {**pair, "high": wall_high}),
        ],
    }


def test_the_crossover_is_the_smallest_mu_whose_buffer_interval_lies_below_one():
    studies = [_study(12, 5.6, 0.8, 0.7), _study(1, 0.5, 1.4, 1.5), _study(3, 1.6, 1.1, 0.9), _study(6, 3.0, 0.95, 0.8)]
    c = crossover(studies)
    assert c["compute"] == {"slowdown": 6, "mu": 3.0} and c["device_time"] == {"slowdown": 3, "mu": 1.6}
    assert c["theory"] == {"slowdown": 3, "mu": 1.6}  # the first split whose y = mu·T/W exceeds 1
    assert crossover([_study(1, 0.5, 1.4, 1.5)])["compute"] is None and c["reaccounted"] is None
    # a synchronous study re-accounted beside them: its own crossover
    studies[0]["reaccounted"] = [{"against_tuned": {"ratio": 0.6, "low": 0.5, "high": 0.7}}]
    studies[3]["reaccounted"] = [{"against_tuned": {"ratio": 0.9, "low": 0.7, "high": 1.1}}]
    assert crossover(studies)["reaccounted"] == {"slowdown": 12, "mu": 5.6}


def test_the_report_names_each_mu_the_arms_and_the_crossover():
    studies = [_study(1, 0.5, 1.4, 1.5), _study(12, 5.6, 0.8, 0.7)]
    md = markdown({"studies": studies, "crossover": crossover(studies), "confirmed": [], "confirm_study": None})
    assert (
        "## s 12: mu 5.60" in md
        and "| 2 | uniform N 1024, lr 2.5e-05 | 1:1 | 5.60 |" in md
        and "0.70 [0.50, 0.80]" in md
    )
    assert "in compute: s 12 (mu 5.60); in device time: s 12 (mu 5.60)" in md and "| tuned queue |" in md
