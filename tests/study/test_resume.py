"""A spec edited after its study was created (workbench.study.resume): added points run on resume, once; changed
categorical choices stop before any trial, naming the knob; a storage that refuses a knob's distribution fails the
trial with that reason, not as a lost worker. Real SQLite Optuna storage and MLflow store in tmp_path."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from workbench.config import ConfigError
from workbench.study import attrs
from workbench.study.context import context, create_or_load
from workbench.study.objective import suggest
from workbench.study.spec import load_spec
from support.toy import toy_spec


def _edit(path, **fields):
    spec = yaml.safe_load(path.read_text())
    spec.update(fields)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def _queued(study) -> list[dict]:
    return [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))]


def test_points_added_to_the_spec_are_queued_once_on_resume(tmp_path):
    path = toy_spec(tmp_path, points=[{"replay.ratio": 2, "x": 4}])
    study = create_or_load(context(load_spec(path)))
    assert len(_queued(study)) == 2  # the baseline and the point
    spec = _edit(path, points=[{"replay.ratio": 2, "x": 4}, {"replay.ratio": 2, "x": 2}])
    study = create_or_load(context(spec))
    assert _queued(study)[-1] == {"replay.ratio": 2, "x": 2} and len(_queued(study)) == 3
    assert study.user_attrs[attrs.SPEC]["points"][-1] == {"replay.ratio": 2, "x": 2}
    assert len(_queued(create_or_load(context(spec)))) == 3  # a second resume queues nothing again


def test_changed_categorical_choices_stop_the_resume_in_one_line_naming_the_knob(tmp_path):
    path = toy_spec(tmp_path)
    create_or_load(context(load_spec(path)))
    spec = _edit(path, search_space={"replay.ratio": {"choices": [1, 2, 4]}, "x": {"choices": [2, 4]}})
    with pytest.raises(
        ConfigError,
        match=r"^search_space\.replay\.ratio\.choices: \[1, 2, 4\] now, \[1, 2\] when study 'toy' was created",
    ):
        create_or_load(context(spec))
    study = optuna.load_study(study_name="toy", storage=context(spec).storage_url)
    assert len(study.get_trials()) == 1 and study.user_attrs[attrs.SPEC]["search_space"]["replay.ratio"]["choices"] == [
        1,
        2,
    ]


def test_a_distribution_the_storage_refuses_is_a_config_error_naming_the_knob(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}")
    study.add_trial(
        optuna.trial.create_trial(
            params={"replay.ratio": 1}, distributions={"replay.ratio": CategoricalDistribution([1, 2])}, value=1.0
        )
    )
    spec = load_spec(toy_spec(tmp_path, search_space={"replay.ratio": {"choices": [1, 2, 4]}}))
    with pytest.raises(ConfigError, match=r"^search_space\.replay\.ratio: .*dynamic value space"):
        suggest(study.ask(), spec)


def test_a_knob_added_to_the_space_at_its_base_value_leaves_the_old_points_as_they_ran(tmp_path):
    """A spec that gains a knob (here `lr`) must name it in every point; the old points, at the base config's value,
    are the configurations that already ran: only the point at another value is queued on resume."""
    path = toy_spec(tmp_path, points=[{"replay.ratio": 2, "x": 4}])
    study = create_or_load(context(load_spec(path)))
    assert len(_queued(study)) == 2
    base_lr = load_spec(path).base_config_dict()["lr"]
    space = {"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4]}, "lr": {"choices": [base_lr, 2 * base_lr]}}
    spec = _edit(
        path,
        search_space=space,
        n_trials=4,
        points=[{"replay.ratio": 2, "x": 4, "lr": base_lr}, {"replay.ratio": 2, "x": 4, "lr": 2 * base_lr}],
    )
    study = create_or_load(context(spec))
    assert len(_queued(study)) == 3 and _queued(study)[-1] == {"replay.ratio": 2, "x": 4, "lr": 2 * base_lr}


def test_a_study_resumed_against_a_new_tracking_store_gets_a_new_parent_run(tmp_path):
    """A study carried to another machine by its Optuna record alone (the committed record of a long study) resumes
    there: its old parent run is not in the new MLflow store, so a new one is made and recorded."""
    from mlflow import MlflowClient

    path = toy_spec(tmp_path)
    first = create_or_load(context(load_spec(path)))
    old = first.user_attrs[attrs.PARENT_RUN]
    moved = create_or_load(context(load_spec(path), tracking_uri=f"sqlite:///{tmp_path / 'elsewhere.db'}"))
    new = moved.user_attrs[attrs.PARENT_RUN]
    assert new != old
    assert MlflowClient(f"sqlite:///{tmp_path / 'elsewhere.db'}").get_run(new).info.status == "RUNNING"


def test_a_finished_sweep_resumed_with_a_larger_lr_extend_queues_the_lr_past_its_best_end(tmp_path):
    """Extensions are queued as trials finish; a study whose last trial has finished has none left to do it, so a
    resume with `lr_extend` raised queues the next lr out for an arm best at an end of what it ran."""
    sweep = [2.5e-5, 5e-5, 1e-4]
    path = toy_spec(tmp_path, points=[{"replay.ratio": 2, "x": 4}], lr_sweep=sweep, lr_extend=0)
    spec = load_spec(path)
    study = create_or_load(context(spec))
    # on-policy best in the middle of its sweep (bounded), the replay arm best at the sweep's highest lr
    cost = {(1, 2.5e-5): 100.0, (1, 5e-5): 80.0, (1, 1e-4): 90.0, (2, 2.5e-5): 120.0, (2, 5e-5): 100.0, (2, 1e-4): 70.0}
    for _ in _queued(study):
        trial = study.ask()
        params = suggest(trial, spec)
        value = cost[(params["replay.ratio"], params["lr"])]
        per_seed = [{"seed": 0, "compute_to_target": value, "total_units": 150.0, "censored": 0}]
        trial.set_user_attr(attrs.PER_SEED, per_seed)
        study.tell(trial, value)
    assert _queued(create_or_load(context(spec))) == []  # lr_extend 0: nothing past the sweep
    study = create_or_load(context(_edit(path, lr_extend=1)))
    (queued,) = _queued(study)
    assert (queued["replay.ratio"], queued["x"]) == (2, 4) and queued["lr"] == pytest.approx(2e-4)
    assert len(_queued(create_or_load(context(load_spec(path))))) == 1  # a second resume queues nothing again
