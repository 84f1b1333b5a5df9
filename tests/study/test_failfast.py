"""Studies that stop when every trial must fail: the up-front check of a study's configurations on this machine
(`workbench.study.preflight`), the rules that stop a running study (`workbench.study.failfast`) and what a resumed
`study run` enqueues again (`driver._requeue`). The same paths through the real CLI: tests/e2e/test_study_failfast.py."""

from __future__ import annotations


import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from workbench.backends import installed
from workbench.config import ConfigError, build_config
from workbench.study import attrs, driver, failfast
from workbench.study.preflight import check_study
from workbench.study.spec import load_spec
from workbench.trial.tasks import load_task, write_sample_jsonl
from support.toy import TOY, toy_spec

SPACE = {"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4]}}


def jsonl_spec(tmp_path, lines: int, task: dict | None = None, **fields):
    """A toy spec on a GSM8K-style file of `lines` examples."""
    data = write_sample_jsonl(tmp_path / "train.jsonl", n=lines)
    base = {
        **{k: v for k, v in TOY.items() if k != "threads"},
        "task": {"name": "jsonl", "path": str(data), **(task or {})},
    }
    return load_spec(toy_spec(tmp_path, base=base, **fields)), data


# ---------------------------------------------------------------- the check before a study is created


def test_a_base_whose_held_out_set_exceeds_its_file_is_refused_naming_the_field(tmp_path):
    spec, data = jsonl_spec(tmp_path, 20, {"n_eval": 50})
    with pytest.raises(ConfigError) as err:
        check_study(spec)
    assert str(err.value) == f"base.task.n_eval: must be < the 20 examples in {data}"
    # the rule has one home: the message is the one the trial's own task loader raises
    with pytest.raises(ConfigError) as trial_err:
        load_task(build_config(spec.base).task)
    assert str(err.value) == f"base.{trial_err.value}"


def test_a_point_and_a_search_space_value_that_cannot_run_are_named(tmp_path):
    spec, _ = jsonl_spec(
        tmp_path,
        20,
        {"n_eval": 8},
        points=[{"replay.ratio": 2, "x": 4, "task.n_eval": 30}],
        search_space={**SPACE, "task.n_eval": {"choices": [8, 30]}},
    )
    with pytest.raises(
        ConfigError, match=r"^points\[0\] gives a trial that cannot run here: task\.n_eval: must be < the 20"
    ):
        check_study(spec)
    spec.points = []
    with pytest.raises(
        ConfigError, match=r"^search_space\.task\.n_eval: 30 gives a trial that cannot run here: task\.n_eval"
    ):
        check_study(spec)
    spec.search_space["task.n_eval"].choices = [8, 10]
    check_study(spec)  # every configuration can run


def test_a_missing_data_file_among_the_choices_is_named(tmp_path):
    spec, data = jsonl_spec(
        tmp_path,
        20,
        {"n_eval": 8},
        search_space={**SPACE, "task.path": {"choices": [str(tmp_path / "train.jsonl"), str(tmp_path / "gone.jsonl")]}},
    )
    with pytest.raises(
        ConfigError,
        match=r"^search_space\.task\.path: '.*gone\.jsonl' gives a trial that cannot run here: task\.path: no such file",
    ):
        check_study(spec)


@pytest.mark.skipif(installed("vllm"), reason="vLLM is installed here: nothing is missing")
def test_a_missing_vllm_is_caught_up_front_with_the_trials_own_message(tmp_path):
    spec, _ = jsonl_spec(tmp_path, 20, {"n_eval": 8})
    spec.base["generation"] = {"backend": "vllm"}
    with pytest.raises(ConfigError) as err:
        check_study(spec)
    assert str(err.value).startswith("base.generation.backend: vllm is not installed in this environment (")
    from workbench.backends.vllm import import_vllm  # what the trial calls when it starts its engine

    with pytest.raises(ConfigError) as trial_err:
        import_vllm()
    assert str(err.value) == f"base.{trial_err.value}"


# ---------------------------------------------------------------- the rules that stop a running study


def toy_study(tmp_path, **fields):
    spec = load_spec(
        toy_spec(tmp_path, search_space={"replay.ratio": {"choices": [1, 2, 3, 4]}}, baseline=False, **fields)
    )
    return optuna.create_study(), spec


def add(study, state, ratio=2, reason=None, **user_attrs):
    """A finished trial of the toy space; a FAIL with `reason` as the objective records it."""
    system_attrs = user_attrs.pop("system_attrs", None)
    if reason is not None:
        user_attrs[attrs.FAIL_REASON] = reason
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            value=1.0 if state == TrialState.COMPLETE else None,
            params={"replay.ratio": ratio},
            distributions={"replay.ratio": CategoricalDistribution([1, 2, 3, 4])},
            user_attrs=user_attrs,
            system_attrs=system_attrs,
        )
    )
    return study.trials[-1].number


def test_a_config_error_in_one_trial_stops_the_study_with_exit_code_2(tmp_path):
    study, spec = toy_study(tmp_path)
    add(study, TrialState.COMPLETE)
    assert failfast.check(study, spec) is None
    n = add(
        study,
        TrialState.FAIL,
        3,
        "ConfigError: task.chat_template: no chat template",
        **{attrs.CONFIG_ERROR: "task.chat_template: no chat template"},
    )
    stop = failfast.check(study, spec)
    assert stop.exit_code == 2 and stop.trials == (n,)
    assert stop.reason.startswith(
        f"trial {n} failed: task.chat_template: no chat template (a configuration that cannot run;"
    )
    assert "\n" not in stop.reason


def test_the_same_failure_k_times_in_a_row_stops_the_study(tmp_path):
    study, spec = toy_study(tmp_path, max_same_failures=3)
    oom = "OutOfMemoryError: CUDA out of memory"
    add(study, TrialState.FAIL, 1, oom)
    add(study, TrialState.FAIL, 2, oom)
    add(study, TrialState.COMPLETE, 3)  # a completed trial breaks the run
    add(study, TrialState.FAIL, 1, oom)
    add(study, TrialState.FAIL, 2, "TrialDiverged: loss is nan at step 3")  # another reason breaks it too
    add(study, TrialState.FAIL, 3, oom)
    add(study, TrialState.FAIL, 4, oom)
    assert failfast.check(study, spec) is None
    last = add(study, TrialState.FAIL, 1, oom)
    stop = failfast.check(study, spec)
    assert stop.exit_code == 1 and stop.trials == (last - 2, last - 1, last)
    assert stop.reason.startswith(
        f"3 trials in a row failed with {oom} (trials {last - 2}, {last - 1}, {last}; max_same_failures = 3;"
    )
    spec.max_same_failures = 0  # never
    assert failfast.check(study, spec) is None


def test_failures_already_dealt_with_do_not_count(tmp_path):
    study, spec = toy_study(tmp_path, max_same_failures=2)
    add(study, TrialState.FAIL, 1, "KeyboardInterrupt: interrupted", **{attrs.INTERRUPTED: True})
    add(study, TrialState.FAIL, 2, "KeyboardInterrupt: interrupted", **{attrs.INTERRUPTED: True})
    dead = add(study, TrialState.FAIL, 3)  # its worker died; retried (the retry carries its number)
    add(study, TrialState.WAITING, 3, system_attrs={"failed_trial": dead, "retry_history": [dead]})
    requeued = add(study, TrialState.FAIL, 4, "ConfigError: x", **{attrs.CONFIG_ERROR: "x"})
    study.set_user_attr(attrs.REQUEUED, [requeued])  # a resumed `study run` enqueued it again
    assert failfast.check(study, spec) is None
    add(study, TrialState.FAIL, 1)  # a dead worker whose retries ran out: a failure like any other
    add(study, TrialState.FAIL, 2)
    assert failfast.check(study, spec).reason.startswith(f"2 trials in a row failed with {failfast.LOST}")


def test_max_failures_counts_only_failures_not_dealt_with(tmp_path):
    study, spec = toy_study(tmp_path, max_failures=2, max_same_failures=0)
    add(study, TrialState.FAIL, 1, "ValueError: a")
    add(study, TrialState.FAIL, 2, "KeyboardInterrupt: interrupted", **{attrs.INTERRUPTED: True})
    assert failfast.check(study, spec) is None
    add(study, TrialState.FAIL, 3, "ValueError: b")
    stop = failfast.check(study, spec)
    assert stop.reason == "2 failed trials (max_failures = 2; the last: ValueError: b)" and stop.trials == ()


def test_a_failed_baseline_stops_the_study(tmp_path):
    study, spec = toy_study(tmp_path)
    n = add(study, TrialState.FAIL, 1, "TrialDiverged: loss is nan at step 1", **{attrs.BASELINE: True})
    stop = failfast.check(study, spec)
    assert stop.exit_code == 1 and stop.trials == (n,)
    assert stop.reason.startswith(
        f"the on-policy baseline (trial {n}) failed with TrialDiverged: loss is nan at step 1;"
    )


def test_a_study_that_completed_no_trial_ends_non_zero(tmp_path):
    study, spec = toy_study(tmp_path)
    stop = failfast.verdict(study, spec)
    assert stop.exit_code == 1 and stop.reason.startswith("no trial completed (no trials yet;")
    add(study, TrialState.PRUNED, 2, **{attrs.SKIPPED: True})
    assert failfast.verdict(study, spec).reason.startswith("no trial completed (1 skipped;")
    add(study, TrialState.COMPLETE)
    assert failfast.verdict(study, spec) is None


# ---------------------------------------------------------------- resuming a stopped study


def test_a_resume_enqueues_the_stopped_configurations_again_unless_the_fix_removed_them(tmp_path):
    study, spec = toy_study(tmp_path)
    add(study, TrialState.COMPLETE, 1)
    first = add(study, TrialState.FAIL, 2, "ConfigError: x", **{attrs.CONFIG_ERROR: "x", attrs.POINT: True})
    second = add(study, TrialState.FAIL, 4, "ConfigError: x", **{attrs.CONFIG_ERROR: "x"})
    interrupted = add(study, TrialState.FAIL, 3, "KeyboardInterrupt: interrupted", **{attrs.INTERRUPTED: True})
    spec.search_space["replay.ratio"].choices = [1, 2, 3]  # the fix: ratio 4 is no longer searched
    driver._requeue(study, spec)

    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.system_attrs["fixed_params"], t.user_attrs[attrs.REQUEUED_FROM]) for t in waiting] == [
        ({"replay.ratio": 2}, first),
        ({"replay.ratio": 3}, interrupted),
    ]
    assert waiting[0].user_attrs.get(attrs.POINT) is True
    assert study.user_attrs[attrs.REQUEUED] == [first, second, interrupted]
    assert failfast.check(study, spec) is None  # the stop is dealt with: the workers may go on
    assert [t.state for t in study.trials[:4]] == [TrialState.COMPLETE, *[TrialState.FAIL] * 3]  # nothing lost
    driver._requeue(study, spec)
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2  # once
