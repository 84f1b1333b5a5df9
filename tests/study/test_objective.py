"""One study trial's values over its seeds: re-accounted at the study's mu, censored by the shared rule."""

import optuna
import pytest
from optuna.trial import TrialState

from workbench.study.objective import run_arm, seed_values
from workbench.trial.loop import TrialResult


def test_censored_seeds_rank_after_reached_ones_and_closer_misses_rank_better():
    evals = lambda accs: [  # noqa: E731
        {"step": i, "accuracy": a, "gen_rollouts": 16 * i, "train_rollouts": 16 * i, "seconds": float(i)}
        for i, a in enumerate(accs)
    ]
    result = lambda accs: TrialResult("run", {}, evals(accs))  # noqa: E731
    reached = seed_values(result([0.1, 0.5, 0.9]), 0.8, 1.0, 16, "first")
    near = seed_values(result([0.1, 0.5, 0.7]), 0.8, 1.0, 16, "first")
    far = seed_values(result([0.1, 0.2, 0.3]), 0.8, 1.0, 16, "first")
    assert reached["censored"] == 0 and reached["compute_to_target"] == pytest.approx(2.0)
    assert near["censored"] == far["censored"] == 1
    assert reached["compute_to_target"] <= near["total_units"] < near["compute_to_target"] < far["compute_to_target"]
    # re-accounting at another mu: generation-free (mu = 0) counts training only
    assert seed_values(result([0.1, 0.9]), 0.8, 0.0, 16, "first")["compute_to_target"] == pytest.approx(1.0)
    # every estimator is recorded; the default (fitted) falls back to the interpolated crossing on 3 evaluations
    default = seed_values(result([0.1, 0.5, 0.9]), 0.8, 1.0, 16)
    assert default["compute_to_target"] == pytest.approx(1.75) == default["compute_to_target_interpolated"]
    assert default["compute_to_target_first"] == pytest.approx(2.0) and default["censored_fitted"] == 0.0


def test_seed_values_read_the_studys_metric_and_keep_greedy_accuracy_as_accuracy():
    rows = [
        {
            "step": i,
            "accuracy": a,
            "demo_prob": d,
            "gen_rollouts": 16 * i,
            "train_rollouts": 16 * i,
            "seconds": float(i),
        }
        for i, (a, d) in enumerate([(0.05, 0.02), (0.9, 0.05), (0.9, 0.2)])
    ]
    values = seed_values(TrialResult("run", {}, rows), 0.1, 1.0, 16, "first", metric="demo_prob")
    assert values["compute_to_target"] == pytest.approx(2.0)  # demo_prob crosses 0.1 at the third evaluation
    assert values["best_accuracy"] == 0.9 and values["final_accuracy"] == 0.9
    assert seed_values(TrialResult("run", {}, rows), 0.1, 1.0, 16, "first")["compute_to_target"] == pytest.approx(1.0)


def test_a_tracking_server_that_leaves_between_a_trial_runs_creation_and_its_params_fails_it_with_that_reason(
    tmp_path, monkeypatch
):
    """The window a study's outage can hit right after `trial N starts`: the trial's MLflow run exists, its params
    never arrive. The trial must fail naming the server (the study's fail-fast reads that reason), not bare."""
    from types import SimpleNamespace

    import optuna

    from workbench import tracking
    from workbench.config import build_config
    from workbench.study import attrs
    from workbench.study.objective import StudyObjective

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = tracking.RunLogger(uri, "toy", run_name="study")
    study = optuna.create_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    study.set_user_attr(attrs.PARENT_RUN, parent.run_id)
    gone = "the tracking server at http://127.0.0.1:5000 did not answer for 5 s"

    def send(self, wait):
        if wait:
            raise tracking.TrackingUnavailable(gone)

    monkeypatch.setattr(tracking.RunLogger, "_send", send)
    objective = StudyObjective(SimpleNamespace(spec=SimpleNamespace(name="toy"), tracking_uri=uri), study, None)
    trial = study.ask()
    with pytest.raises(tracking.TrackingUnavailable):
        objective._trial_run(trial, {"x": 4}, [0], [build_config({})], {}, arm=None, is_baseline=False)
    reason = study.trials[0].user_attrs[attrs.FAIL_REASON]
    assert reason == f"TrackingUnavailable: {gone}" and study.trials[0].user_attrs[attrs.RUN]


class _Objective:
    """`evaluate` as an arm's objective has it: here it returns 3.0, or raises what it is given."""

    def __init__(self, raises: BaseException | None = None):
        self.raises = raises

    def evaluate(self, trial, params, **kw):
        if self.raises is not None:
            raise self.raises
        return 3.0


@pytest.mark.parametrize("where", ["evaluate", "attributes"])
def test_an_arm_trial_stopped_anywhere_after_it_is_asked_is_told_failed(tmp_path, monkeypatch, where):
    # a SIGTERM while the arm's attributes were written left `study confirm`'s trial running for good (make test)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    attrs = {"arm": "confirm", "knobs": {"x": 1}, "seeds": [8, 9]}
    assert run_arm(study, _Objective(), attrs, {"x": 1}).value == 3.0
    if where == "attributes":
        real = optuna.Trial.set_user_attr
        calls = []

        def interrupted(self, key, value):
            calls.append(key)
            if len(calls) == 2:
                raise KeyboardInterrupt
            real(self, key, value)

        monkeypatch.setattr(optuna.Trial, "set_user_attr", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_arm(study, _Objective(KeyboardInterrupt() if where == "evaluate" else None), attrs, {"x": 1})
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL]
