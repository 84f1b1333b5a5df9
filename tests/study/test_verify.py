"""`study verify`: the fitted optimum mapped to knobs for the study's batch size (the run itself: tests/e2e)."""

import pytest

from workbench.study.verify import _measured_twin, predicted_knobs


def test_verify_maps_the_prediction_to_knobs_and_finds_a_measured_twin():
    result = {"predicted": {"x": 7.9, "y": 1.3712}, "configurations": [
        {"trial_number": 0, "y": 1.0, "capacity": 128}, {"trial_number": 5, "y": 1.37, "capacity": 738}]}
    knobs, x, y = predicted_knobs(result, 128)
    assert knobs == {"replay.ratio": 1.37, "replay.capacity": 738, "replay.horizon": None}
    assert y == 1.37 and x == pytest.approx(738 * 1.37 / 128)
    assert _measured_twin(result, knobs) == 5
    on_policy = {"predicted": {"x": 1.0, "y": 0.6}, "configurations": result["configurations"]}
    knobs, x, y = predicted_knobs(on_policy, 128)
    assert knobs["replay.ratio"] == 1.0 and knobs["replay.capacity"] == 128 and _measured_twin(on_policy, knobs) == 0
    # a study that searches lr: a prediction without its own lr runs at the base lr, so only that twin counts
    by_lr = {"configurations": [{"trial_number": 8, "y": 1.0, "capacity": 128, "lr": 5e-5},
                                {"trial_number": 0, "y": 1.0, "capacity": 128, "lr": 1e-4}]}
    assert _measured_twin(by_lr, knobs, base_lr=1e-4) == 0 and _measured_twin(by_lr, knobs, base_lr=2e-4) is None
    assert _measured_twin(by_lr, {**knobs, "lr": 5e-5}, base_lr=1e-4) == 8


def test_a_prediction_that_names_a_measured_trial_is_confirmed_with_the_predictions():
    import optuna
    from optuna.distributions import CategoricalDistribution

    from workbench.study import attrs
    from workbench.study.confirm import prediction_trials

    study = optuna.create_study()
    dist = {"x": CategoricalDistribution([1, 8])}
    for number, x in enumerate((1, 8)):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, value=50.0 - number,
                                                  user_attrs={attrs.BASELINE: True} if number == 0 else {}))
    study.add_trial(optuna.trial.create_trial(value=45.0, user_attrs={attrs.ARM: "predicted", attrs.KNOBS: {"x": 3}}))
    assert [t.number for t in prediction_trials(study)] == [2]
    study.set_user_attr(attrs.PREDICTED_TWINS, [1])  # what `study verify` records when its point was measured already
    assert [t.number for t in prediction_trials(study)] == [1, 2]
