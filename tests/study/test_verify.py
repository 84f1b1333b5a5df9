"""`study verify`: what it confirms (the mapping of a prediction to knobs: tests/test_prediction.py; the run itself:
tests/e2e)."""


def test_a_prediction_that_names_a_measured_trial_is_confirmed_with_the_predictions():
    import optuna
    from optuna.distributions import CategoricalDistribution

    from workbench.study import attrs
    from workbench.study.confirm import prediction_trials

    study = optuna.create_study()
    dist = {"x": CategoricalDistribution([1, 8])}
    for number, x in enumerate((1, 8)):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": x},
                distributions=dist,
                value=50.0 - number,
                user_attrs={attrs.BASELINE: True} if number == 0 else {},
            )
        )
    study.add_trial(optuna.trial.create_trial(value=45.0, user_attrs={attrs.ARM: "predicted", attrs.KNOBS: {"x": 3}}))
    assert [t.number for t in prediction_trials(study)] == [2]
    study.set_user_attr(attrs.PREDICTED_TWINS, [1])  # what `study verify` records when its point was measured already
    assert [t.number for t in prediction_trials(study)] == [1, 2]
