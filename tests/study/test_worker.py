"""A worker whose trial was declared dead while it ran (another worker failed it by heartbeat and retried it) drops
its late result with one warning and goes on, instead of crashing on Optuna's "Cannot tell a FAIL trial"."""

import logging

import optuna
from optuna.trial import TrialState

from workbench.study.storage import open_storage
from workbench.study.worker import optimize


class OneTrial:
    """The worker's budget callback, reduced to: stop after one trial."""

    def __call__(self, study, trial):
        study.stop()


def test_a_trial_failed_by_another_worker_is_dropped_not_fatal(tmp_path, caplog):
    storage = open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    study = optuna.create_study(study_name="s", storage=storage)

    def objective(trial):
        # what another worker's heartbeat check does to a trial whose worker stalled past the grace period
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return 1.0

    with caplog.at_level(logging.WARNING, logger="workbench.study.worker"):
        optimize(study, objective, OneTrial())
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL]
    assert "declared dead" in caplog.text

    optimize(study, lambda trial: 2.0, OneTrial())  # the worker goes on with the next trial
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.COMPLETE]
