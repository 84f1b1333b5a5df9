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
from workbench.study.summary import counts_line

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


def _noisy_arm(study, y, x, lr, values):
    """One complete trial of (y, x, lr) with these per-seed compute-to-target values."""
    space = {
        "replay.ratio": CategoricalDistribution([1, 2]),
        "x": CategoricalDistribution([1, 8]),
        "lr": FloatDistribution(1e-6, 1e-3, log=True),
    }
    per_seed = [{"seed": s, "compute_to_target": v, "total_units": 150.0, "censored": 0} for s, v in enumerate(values)]
    study.add_trial(
        create_trial(
            params={"replay.ratio": y, "x": x, "lr": lr},
            distributions=space,
            value=sum(values) / len(values),
            user_attrs={attrs.PER_SEED: per_seed},
        )
    )


def test_an_arm_resolved_worse_one_lr_up_is_not_trained_two_up(tmp_path):
    spec = _spec()
    declined = {(1, 1, 2.5e-5): 100.0, (1, 1, 5e-5): 80.0, (2, 8, 2.5e-5): 100.0, (2, 8, 5e-5): 130.0}
    study = _study(tmp_path, declined)
    hold = lr_sweep.held(study, spec, {"replay.ratio": 2, "x": 8, "lr": 1e-4})
    # 5e-5 needed 1.3x 2.5e-5's compute on every seed: resolved, so 1e-4 cannot be this arm's best
    assert hold.kind == "skip" and "more compute at lr 5e-05 than at 2.5e-05, ratio 1.3 [1.3, 1.3]" in hold.reason
    assert lr_sweep.held(study, spec, {"replay.ratio": 1, "x": 1, "lr": 1e-4}) is None  # on-policy improved
    assert lr_sweep.held(study, spec, {"replay.ratio": 2, "x": 8, "lr": 5e-5}) is None  # one lr below it only
    assert lr_sweep.held(study, _spec(lr_skip_past_decline=False), {"replay.ratio": 2, "x": 8, "lr": 1e-4}) is None
    # within the noise: trained
    (tmp_path / "b").mkdir()
    noisy = _study(tmp_path / "b", {(1, 1, 2.5e-5): 100.0})
    _noisy_arm(noisy, 2, 8, 2.5e-5, [100.0, 100.0, 100.0, 100.0])
    _noisy_arm(noisy, 2, 8, 5e-5, [70.0, 150.0, 90.0, 160.0])
    assert lr_sweep.held(noisy, spec, {"replay.ratio": 2, "x": 8, "lr": 1e-4}) is None


def _censored_arm(study, y, x, lr, values, total=150.0):
    """One complete trial of (y, x, lr): per seed, a compute-to-target, or None for a run censored at `total`."""
    space = {
        "replay.ratio": CategoricalDistribution([1, 2]),
        "x": CategoricalDistribution([1, 8]),
        "lr": FloatDistribution(1e-6, 1e-3, log=True),
    }
    per_seed = [
        {"seed": s, "compute_to_target": total if v is None else v, "total_units": total, "censored": int(v is None)}
        for s, v in enumerate(values)
    ]
    study.add_trial(
        create_trial(
            params={"replay.ratio": y, "x": x, "lr": lr},
            distributions=space,
            value=total,
            user_attrs={attrs.PER_SEED: per_seed},
        )
    )


@pytest.mark.parametrize(
    "near, skipped",
    [
        ([None] * 7 + [120.0], True),  # censored at 150 on 7 seeds, above the lr below's 100 on the 8th: a decline
        ([None] * 7 + [80.0], False),  # 7 seeds more, one less: sign test p = 0.07, within the noise
        ([None] * 8, True),  # all 8 censored above the lr below's values
    ],
)
def test_an_lr_censored_on_most_seeds_above_the_lr_below_counts_as_a_decline(tmp_path, near, skipped):
    spec = _spec()
    study = _study(tmp_path, {(1, 1, 2.5e-5): 100.0})
    _censored_arm(study, 2, 8, 2.5e-5, [100.0] * 8)
    _censored_arm(study, 2, 8, 5e-5, near)
    hold = lr_sweep.held(study, spec, {"replay.ratio": 2, "x": 8, "lr": 1e-4})
    if skipped:
        assert hold.kind == "skip" and "more compute at lr 5e-05 than at 2.5e-05, more compute on 8 of 8" in hold.reason
        assert "sign test p = 0.0078" in hold.reason
    else:
        assert hold is None


def _objective(study, spec):
    from types import SimpleNamespace

    from workbench.study.objective import StudyObjective

    return StudyObjective(SimpleNamespace(spec=spec), study, threads=None)


def test_a_point_past_a_decline_is_recorded_skipped_and_leaves_the_count_and_the_extension_right(tmp_path):
    spec = _spec()
    study = _study(
        tmp_path,
        {(1, 1, 2.5e-5): 100.0, (1, 1, 5e-5): 80.0, (1, 1, 1e-4): 90.0, (2, 8, 2.5e-5): 100.0, (2, 8, 5e-5): 130.0},
    )
    point = {"replay.ratio": 2, "x": 8, "lr": 1e-4}
    study.enqueue_trial(point, user_attrs={attrs.POINT: True})
    trial = study.ask()
    with pytest.raises(optuna.TrialPruned, match="past a decline"):
        _objective(study, spec)._past_decline(trial, point)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    (skipped,) = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert skipped.user_attrs[attrs.LR_PAST_DECLINE] and "past a decline" in skipped.user_attrs[attrs.SKIP_REASON]
    assert lr_sweep.past_decline(study) == 1 and lr_sweep.to_run(study, 6) == 5
    assert "1 not trained past a decline" in counts_line(study) and "skipped" not in counts_line(study)
    # the arm's sweep counts as run: its best, 2.5e-5, is at the low end, so 1.25e-5 is queued; nothing above
    assert [(p["replay.ratio"], p["lr"]) for p in lr_sweep.due(study, spec)] == [(2, pytest.approx(1.25e-5))]


def test_a_point_whose_deciding_lr_is_still_to_run_goes_behind_a_runnable_trial_or_waits_for_it(tmp_path, monkeypatch):
    from workbench.study import objective

    spec = _spec()
    study = _study(tmp_path, {(1, 1, 2.5e-5): 100.0, (1, 1, 5e-5): 80.0, (2, 8, 2.5e-5): 100.0})
    point = {"replay.ratio": 2, "x": 8, "lr": 1e-4}
    study.enqueue_trial(point, user_attrs={attrs.POINT: True})  # ahead of the lr that decides it (a requeue's order)
    study.enqueue_trial({"replay.ratio": 2, "x": 8, "lr": 5e-5}, user_attrs={attrs.POINT: True})
    assert lr_sweep.held(study, spec, point).kind == "wait"
    # the sweep's lowest lr is never held by the higher ones queued behind it (they wait for it, not it for them)
    assert lr_sweep.held(study, spec, {"replay.ratio": 2, "x": 8, "lr": 2.5e-5}) is None
    lr_of = lambda trial: study.get_trials()[trial.number].system_attrs["fixed_params"]["lr"]  # noqa: E731
    drawn = study.ask()
    assert math.isclose(lr_of(drawn), 1e-4)  # Optuna hands out the oldest waiting trial
    with pytest.raises(optuna.TrialPruned, match="deferred: lr 0.0001 waits for this arm at 5e-05 and 2.5e-05"):
        _objective(study, spec)._past_decline(drawn, point)
    study.tell(drawn, state=optuna.trial.TrialState.PRUNED)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [lr_of(t) for t in waiting] == [5e-5, 1e-4] and waiting[1].user_attrs[attrs.POINT]  # behind it now
    # the 5e-5 trial runs elsewhere and nothing else is waiting but the 1e-4 point: this worker waits for it
    running, waiter = study.ask(), study.ask()
    polls = []

    def finish_elsewhere(seconds):
        polls.append(seconds)
        per_seed = [
            {"seed": s, "compute_to_target": 60.0 * (1 + 0.02 * s), "total_units": 150.0, "censored": 0}
            for s in range(4)
        ]
        running.set_user_attr(attrs.PER_SEED, per_seed)
        running.suggest_categorical("replay.ratio", [1, 2])  # the knobs it was queued with, as `suggest` draws
        running.suggest_categorical("x", [1, 8])
        running.suggest_float("lr", 1e-6, 1e-3, log=True)
        study.tell(running, 60.0)

    monkeypatch.setattr(objective.time, "sleep", finish_elsewhere)
    assert _objective(study, spec)._past_decline(waiter, point) is None  # 5e-5 improved on 2.5e-5: 1e-4 is trained
    assert polls == [objective.HOLD_POLL_SECONDS]


def test_a_worker_asks_about_every_waiting_trial_from_one_read_of_the_study(tmp_path, monkeypatch):
    from workbench.study import objective

    spec = _spec()
    study = _study(tmp_path, {(1, 1, 2.5e-5): 100.0, (2, 8, 2.5e-5): 100.0, (2, 8, 5e-5): 130.0})
    # 1e-4 on on-policy waits for on-policy's 5e-5, which runs elsewhere; behind it, six more points that wait too
    study.enqueue_trial({"replay.ratio": 1, "x": 1, "lr": 5e-5}, user_attrs={attrs.POINT: True})
    running = study.ask()
    point = {"replay.ratio": 1, "x": 1, "lr": 1e-4}
    for _ in range(7):
        study.enqueue_trial(point, user_attrs={attrs.POINT: True})
    waiter = study.ask()
    reads = []
    real = type(study).get_trials
    monkeypatch.setattr(type(study), "get_trials", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))

    class Polled(Exception):
        pass

    def first_poll(seconds):
        raise Polled

    monkeypatch.setattr(objective.time, "sleep", first_poll)
    with pytest.raises(Polled):
        _objective(study, spec)._past_decline(waiter, point)
    # its own question (one read), then one read for the six waiting trials' questions (not one each)
    assert len(reads) == 2, f"{len(reads)} reads of the study for one check of 6 waiting trials"
    assert running.number not in [t.number for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
