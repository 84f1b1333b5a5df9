"""Studies that stop when every trial must fail, through the real CLI and real stores at toy size: a base trial that
cannot run is refused before anything is created; a trial's `ConfigError`, a failed baseline, the same failure in
a row and a study that completes nothing end `study run` non-zero with one line; a run after the fix resumes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from workbench.study.storage import open_storage
from workbench.trial.subword import build_model_dir
from workbench.trial.tasks import write_sample_jsonl
from support.cli import run_cli
from support.toy import TOY, toy_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"
BASE = {k: v for k, v in TOY.items() if k != "threads"}


def stored_studies(tmp_path) -> list[str]:
    """The studies in the test's Optuna storage (none when the file was never created)."""
    if not (tmp_path / "optuna.db").exists():
        return []
    return [s.study_name for s in optuna.get_all_study_summaries(open_storage(f"sqlite:///{tmp_path / 'optuna.db'}"))]


def error_line(proc) -> str:
    """The command's last stderr line, which must be its one error line."""
    return proc.stderr.strip().splitlines()[-1]


def load(tmp_path) -> optuna.Study:
    return optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def test_a_base_trial_that_cannot_run_exits_2_before_any_trial_and_creates_nothing(tmp_path):
    data = write_sample_jsonl(tmp_path / "train.jsonl", n=20)
    path = toy_spec(tmp_path, base={**BASE, "task": {"name": "jsonl", "path": str(data), "n_eval": 50}})
    for command in ("run", "worker"):
        proc = run_cli(["study", command, str(path)], tmp_path)
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines() == [
            f"workbench: error: base.task.n_eval: must be < the 20 examples in {data}"
        ]
        assert (
            stored_studies(tmp_path) == []
            and not (tmp_path / "mlflow.db").exists()
            and not (tmp_path / "mlruns").exists()
        )


def test_gsm8k_first_on_cpu_with_a_300_line_file_exits_2_within_30_s_naming_task_n_eval(tmp_path):
    """The GPU study (n_eval 500, vLLM) with GSM8K replaced by a 300-line file, on this CPU machine: one line, at once."""
    write_sample_jsonl(tmp_path / "data" / "gsm8k_train.jsonl", n=300)
    build_model_dir(
        tmp_path / "models" / "Qwen2.5-0.5B-Instruct", tmp_path / "data" / "gsm8k_train.jsonl", vocab_size=300
    )
    spec = tmp_path / "gsm8k_first.yaml"
    shutil.copy(STUDIES / "gpu" / "gsm8k_first.yaml", spec)
    start = time.monotonic()
    proc = run_cli(["study", "run", str(spec)], tmp_path)
    seconds = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: base.task.n_eval: must be < the 300 examples in data/gsm8k_train.jsonl"
    ]
    assert seconds < 30, f"{seconds:.1f} s"
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_a_trial_config_error_stops_the_study_and_a_run_after_the_fix_resumes_it(tmp_path):
    """A point asks for the chat template of a tokenizer that has none: the check before the study cannot see it
    (it loads no model), the trial raises `ConfigError`. The study stops there, exit 2; with the template added to
    the model, `study run` runs that configuration again and completes the study."""
    data = write_sample_jsonl(tmp_path / "train.jsonl", n=80)
    model = tmp_path / "model"
    build_model_dir(model, data, vocab_size=300, chat_template=False)
    path = toy_spec(
        tmp_path,
        n_trials=2,
        sampler="grid",
        base={
            **BASE,
            "task": {"name": "jsonl", "path": str(data), "n_eval": 16},
            "model": {"path": str(model)},
            "budget": {"compute_units": None, "steps": 4},
            "eval": {**TOY["eval"], "every": 2},
        },
        search_space={"replay.ratio": {"choices": [1, 2]}, "task.chat_template": {"choices": [False, True]}},
        points=[{"replay.ratio": 2, "task.chat_template": True}],
    )
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_line(proc).startswith(
        f"workbench: error: trial 1 failed: task.chat_template: the tokenizer in {model} has no"
        " chat template (a configuration that cannot run;"
    )
    assert "Traceback" not in proc.stderr
    trials = load(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL]  # the worker took no further trial
    assert trials[1].user_attrs["config_error"].startswith("task.chat_template:")

    build_model_dir(model, data, vocab_size=300, chat_template=True)  # the fix
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = load(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]  # nothing lost
    assert trials[2].params == trials[1].params and trials[2].user_attrs["requeued_from"] == 1


@pytest.mark.slow
def test_a_failed_baseline_stops_the_trials_that_depend_on_it_and_runs_first_on_resume(tmp_path):
    base = {**BASE, "objective": {"name": "asymre"}, "lr": 1.0e30}  # Adam at 1e30: NaN gradients
    path = toy_spec(tmp_path, n_trials=2, base=base, points=[{"replay.ratio": 2, "x": 4}])
    proc = run_cli(["study", "run", str(path), "--workers", "2"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert error_line(proc).startswith("workbench: error: the on-policy baseline (trial 0) failed with TrialDiverged: ")
    assert [t.state for t in load(tmp_path).get_trials()] == [
        TrialState.FAIL,
        TrialState.WAITING,
    ]  # the point never started

    spec = yaml.safe_load(path.read_text())
    spec["base"]["lr"] = 1.0e-4  # the fix
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = load(tmp_path)
    ran = sorted(
        (t for t in study.get_trials() if t.datetime_start and not t.user_attrs.get("skipped")),
        key=lambda t: t.datetime_start,
    )
    assert [(t.state, bool(t.user_attrs.get("baseline"))) for t in ran] == [
        (TrialState.FAIL, True),
        (TrialState.COMPLETE, True),
        (TrialState.COMPLETE, False),
    ]  # the baseline first
    assert ran[2].params == {"replay.ratio": 2, "x": 4}


@pytest.mark.slow
def test_the_same_failure_three_times_in_a_row_stops_the_study(tmp_path):
    base = {**BASE, "objective": {"name": "asymre"}, "lr": 1.0e30}
    path = toy_spec(
        tmp_path, n_trials=5, base=base, baseline=False, compute_mu=1.0, search_space={"replay.ratio": {"choices": [2]}}
    )
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert error_line(proc).startswith("workbench: error: 3 trials in a row failed with TrialDiverged: ")
    assert "(trials 0, 1, 2; max_same_failures = 3;" in error_line(proc)
    assert [t.state for t in load(tmp_path).get_trials()] == [TrialState.FAIL] * 3


@pytest.mark.slow
def test_a_study_that_completes_no_trial_exits_non_zero(tmp_path):
    # x = 1 at y = 2 holds fewer rollouts than a batch: the space has no feasible configuration, nothing trains
    path = toy_spec(
        tmp_path, baseline=False, compute_mu=1.0, search_space={"replay.ratio": {"choices": [2]}, "x": {"choices": [1]}}
    )
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert error_line(proc).startswith("workbench: error: no trial completed (")
