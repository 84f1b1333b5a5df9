"""`study confirm`'s fresh seeds and the warm starts they start from (`workbench.study.confirm`), without training."""

import optuna

from workbench.study import attrs
from workbench.study.confirm import fresh_seeds, selection_seeds, warm_start_line
from workbench.study.spec import load_spec

from support.toy import toy_spec


def test_confirm_says_which_warm_starts_its_fresh_seeds_use(tmp_path):
    spec = load_spec(toy_spec(tmp_path, seeds=8, seeds_per_checkpoint=4))  # seeds 0-3: init_seed 0, 4-7: 1, 8-11: 2
    study = optuna.create_study()
    study.set_user_attr(attrs.SPEC, {"seeds": spec.seed_list})
    selection = selection_seeds(study)
    assert selection == set(range(8)) and fresh_seeds(study, 6) == [8, 9, 10, 11, 12, 13]
    assert [spec.checkpoint_of(s) for s in (7, 8, 11, 12)] == [1, 2, 2, 3]
    line = warm_start_line(spec, [8, 9, 10, 11, 12, 13], selection)
    assert line == (
        "fresh seeds 8-13 start from warm starts (model.init_seed, 4 seeds each): 2 for seeds 8-11 (a fresh"
        " checkpoint), 3 for seeds 12-13 (a fresh checkpoint)"
    )
    # selection seeds 0-5 fill checkpoint 1 only half: fresh seeds 6-7 start where selection seeds 4-5 did
    shared = warm_start_line(spec, [6, 7, 8], set(range(6)))
    assert shared.endswith(
        ": 1 for seeds 6-7 (checkpoint 1, also used in selection), 2 for seed 8 (a fresh checkpoint)"
    )
    assert warm_start_line(spec, [6, 7], set(range(6))).endswith(
        ": 1 for seeds 6-7 (checkpoint 1, also used in selection); no fresh checkpoint: more seeds (--seeds) reach one"
    )
    assert "\n" not in line + shared


def test_confirm_says_every_seed_shares_one_checkpoint_where_the_spec_does_not_vary_it(tmp_path):
    spec = load_spec(toy_spec(tmp_path, seeds=4))
    line = warm_start_line(spec, [4, 5, 6, 7], set(range(4)))
    assert line == (
        "fresh seeds 4-7: every seed of this study shares one checkpoint (model.init_seed 0), so confirm"
        " replicates over training's randomness only, not over the warm start (a spec's seeds_per_checkpoint"
        " varies it)"
    )
    moved = load_spec(
        toy_spec(tmp_path, seeds=4, base={**spec.base, "model": {**spec.base.get("model", {}), "init_seed": 5}})
    )
    assert "(model.init_seed 5)" in warm_start_line(moved, [4, 5], set(range(4)))
    varied = load_spec(toy_spec(tmp_path, seeds=4, seeds_per_checkpoint=2, base=moved.base))
    assert warm_start_line(varied, [4, 5], set(range(4))).endswith(
        ": 7 for seeds 4-5 (a fresh checkpoint)"
    )  # 5 + 4 // 2


def test_confirm_can_name_the_trials_a_question_needs_instead_of_the_best_k():
    import pytest
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from workbench.config import ConfigError
    from workbench.study.confirm import named_trials

    study = optuna.create_study()
    lr = {"lr": FloatDistribution(1e-6, 1.0, log=True)}
    for value, user in ((30.0, {attrs.BASELINE: True}), (20.0, {}), (25.0, {}), (10.0, {attrs.ARM: "confirm"})):
        study.add_trial(create_trial(params={"lr": 1e-4}, distributions=lr, value=value, user_attrs=user))
    study.add_trial(create_trial(params={"lr": 1e-4}, distributions=lr, state=TrialState.FAIL))
    assert [t.number for t in named_trials(study, [2, 1, 2])] == [2, 1]  # in the order named, once each
    assert [t.number for t in named_trials(study, [0, 1])] == [1]  # the baseline is re-run anyway
    for bad in ([3], [4], [9]):  # a confirm arm, a failed trial, no trial: one line naming the flag
        with pytest.raises(
            ConfigError, match=r"^--trials: .* is not a complete trial of the study \(complete: 0, 1, 2\)"
        ):
            named_trials(study, bad)


def test_confirm_says_a_fixed_model_source_gives_every_seed_the_one_model(tmp_path):
    """A source that is not `seeded` (here one without `model.path`, as a model shipped in a package) starts every
    seed from its one model: `model.init_seed` does not vary it."""
    from workbench.registry import MODEL_SOURCES
    from workbench.trial.model_sources import ModelSource

    class Packaged(ModelSource):
        pass

    MODEL_SOURCES.register("packaged_for_test")(Packaged)
    try:
        base = load_spec(toy_spec(tmp_path, seeds=4)).base
        spec = load_spec(toy_spec(tmp_path, seeds=4, base={**base, "model": {"source": "packaged_for_test"}}))
        assert warm_start_line(spec, [4, 5], set(range(4))) == (
            "fresh seeds 4-5: every seed starts from the one model of model.source packaged_for_test, so confirm"
            " replicates over training's randomness only, not over the starting model"
        )
    finally:
        MODEL_SOURCES.pop("packaged_for_test")
