"""A running trial's progress reaches the driver's bar through the study's storage."""

import optuna

from workbench.study import attrs
from workbench.study.driver import _running
from workbench.study.objective import _reporting


def test_a_running_trials_progress_is_recorded_at_most_every_few_seconds_and_shown_by_the_driver():
    study = optuna.create_study()
    trial = study.ask()
    pruned = []
    hook = _reporting(trial, 1, 3, 60.0, then=pruned.append)
    hook({"compute_units": 12.4, "step": 10})
    hook({"compute_units": 15.0, "step": 12})  # within the throttle: not written, still handed on
    assert study.trials[0].user_attrs[attrs.PROGRESS] == "seed 2/3, 12/60 units"
    assert [row["step"] for row in pruned] == [10, 12]
    assert _running(study) == [f"trial {trial.number} (seed 2/3, 12/60 units)"]
    study.tell(trial, 1.0)
    assert _running(study) == []
