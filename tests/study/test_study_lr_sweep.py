"""Each arm at its own learning rate (`lr_sweep`): every arm runs at every lr of the sweep, and an arm whose best lr
is at an end is queued once more past it (workbench.study.lr_sweep), read from a real SQLite Optuna storage."""

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import create_trial

from workbench.config import ConfigError
from workbench.study import attrs, lr_sweep
from workbench.study.spec import StudySpec, load_spec

SWEEP = [2.5e-5, 5e-5, 1e-4]


def _spec(**fields) -> StudySpec:
    data = {
        "name": "lr",
        "base": {"budget": {"compute_units": 10}},
        "search_space": {"replay.ratio": {"choices": [2]}, "x": {"choices": [8]}},
        "points": [{"replay.ratio": 2, "x": 8}],
        "lr_sweep": SWEEP,
        "n_trials": 2,
        **fields,
    }
    return StudySpec.model_validate(data)


def test_every_arm_runs_at_every_lr_of_the_sweep():
    spec = _spec()
    assert spec.points == [
        {"replay.ratio": 1, "x": 1, "lr": 5e-5},
        {"replay.ratio": 1, "x": 1, "lr": 1e-4},
        {"replay.ratio": 2, "x": 8, "lr": 2.5e-5},
        {"replay.ratio": 2, "x": 8, "lr": 5e-5},
        {"replay.ratio": 2, "x": 8, "lr": 1e-4},
    ]
    assert spec.n_trials == 6 and spec.baseline_params()["lr"] == 2.5e-5  # the baseline runs the base lr
    lr = spec.search_space["lr"]
    assert lr.log and lr.low < 2.5e-5 / 4 and lr.high > 1e-4 * 4  # room for two extensions each side
    again = StudySpec.model_validate(spec.model_dump(mode="json"))  # as a resumed study reads it back
    assert again.points == spec.points and again.n_trials == 6


@pytest.mark.parametrize("sweep, why", [([5e-5, 1e-4], "must include the base lr"), ([1e-4, 5e-5], "ascending")])
def test_a_sweep_that_cannot_bound_the_baseline_is_one_line(tmp_path, sweep, why):
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nbase: {{budget: {{compute_units: 10}}}}\nsearch_space: {{x: {{choices: [8]}}}}\nlr_sweep: {sweep}\n"
    )
    with pytest.raises(ConfigError, match=f"^lr_sweep: .*{why}"):
        load_spec(path)


def _study(tmp_path, table):
    """Trials of (y, x, lr) -> compute-to-target on 4 seeds, the first the baseline."""
    study = optuna.create_study(study_name="lr", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    space = {
        "replay.ratio": CategoricalDistribution([1, 2]),
        "x": CategoricalDistribution([1, 8]),
        "lr": FloatDistribution(1e-6, 1e-3, log=True),
    }
    for i, ((y, x, lr), c) in enumerate(table.items()):
        per_seed = [
            {"seed": s, "compute_to_target": c * (1 + 0.02 * s), "total_units": 150.0, "censored": 0} for s in range(4)
        ]
        study.add_trial(
            create_trial(
                params={"replay.ratio": y, "x": x, "lr": lr},
                distributions=space,
                value=c,
                user_attrs={attrs.PER_SEED: per_seed, attrs.BASELINE: i == 0},
            )
        )
    return study


def test_an_arm_best_at_an_end_of_its_sweep_is_run_once_more_past_it(tmp_path):
    spec = _spec()
    # on-policy is best in the middle (bounded); replay is best at the highest lr: 2e-4 is queued for it
    study = _study(
        tmp_path,
        {
            (1, 1, 2.5e-5): 100.0,
            (1, 1, 5e-5): 80.0,
            (1, 1, 1e-4): 90.0,
            (2, 8, 2.5e-5): 120.0,
            (2, 8, 5e-5): 100.0,
            (2, 8, 1e-4): 70.0,
        },
    )
    assert lr_sweep.extend(study, spec) == 1 and lr_sweep.extensions(study) == 1
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    fixed = waiting.system_attrs["fixed_params"]
    assert (fixed["replay.ratio"], fixed["x"]) == (2, 8) and math.isclose(fixed["lr"], 2e-4)
    assert lr_sweep.due(study, spec) == []  # queued and not yet run: nothing more for that arm


def test_no_extension_past_lr_extend_or_while_an_arm_is_still_sweeping(tmp_path):
    spec = _spec(lr_extend=1)
    study = _study(
        tmp_path,
        {
            (1, 1, 2.5e-5): 100.0,
            (1, 1, 5e-5): 80.0,
            (1, 1, 1e-4): 90.0,
            (2, 8, 2.5e-5): 120.0,
            (2, 8, 5e-5): 100.0,
            (2, 8, 1e-4): 80.0,
            (2, 8, 2e-4): 60.0,
        },
    )
    assert lr_sweep.due(study, spec) == []  # best at 2e-4, one past the sweep: lr_extend 1 reached
    (tmp_path / "b").mkdir()
    partial = _study(tmp_path / "b", {(1, 1, 2.5e-5): 100.0, (2, 8, 2.5e-5): 90.0, (2, 8, 5e-5): 80.0})
    assert lr_sweep.due(partial, spec) == []  # neither arm has run its whole sweep yet
