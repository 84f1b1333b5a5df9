"""A study whose trials are a command outside the workbench (`trainer.kind: command`, docs/trainers.md), through
the real CLI and real stores: it runs, resumes, is analysed and reported like a study of the workbench's own
trainer; a command that reports nothing stops the study with one line."""

from __future__ import annotations

import csv
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from support.cli import run_cli
from support.toy import toy_spec

TRAINER = str(Path(__file__).parents[1] / "support" / "protocol_trainer.py")


def command_spec(tmp_path, mode: str = "good", **fields):
    base = {
        "batch_size": 16,
        "group_size": 4,
        "lr": 1e-4,
        "budget": {"compute_units": None, "steps": 12},
        "eval": {"every": 2, "target_accuracy": 0.2},
        "trainer": {"kind": "command", "command": ["{python}", TRAINER, "--mode", mode], "poll_s": 0.2},
    }
    return toy_spec(
        tmp_path,
        base=base,
        search_space={"replay.ratio": {"choices": [2]}, "x": {"choices": [2, 4]}},
        points=[{"replay.ratio": 2, "x": 2}, {"replay.ratio": 2, "x": 4}],
        sampler="grid",
        seeds=2,
        n_trials=2,
        compute_mu=1.0,
        **fields,
    )


def test_a_study_of_a_trial_command_runs_resumes_and_is_reported(tmp_path):
    spec = command_spec(tmp_path)
    proc = run_cli(["study", "run", str(spec)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trial command: " in proc.stderr and "protocol trainer: seed 1" in proc.stderr
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = optuna.load_study(study_name="toy", storage=storage).get_trials()
    assert [t.state for t in first] == [TrialState.COMPLETE] * 2 + [TrialState.WAITING]  # the baseline, then x 2
    first = first[:2]

    data = yaml.safe_load(spec.read_text())
    data["n_trials"] = 3
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli(["study", "run", str(spec)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = optuna.load_study(study_name="toy", storage=storage).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3 and [t.params for t in complete[:2]] == [t.params for t in first]  # resumed, not redone
    assert [t.value for t in complete[:2]] == [t.value for t in first]

    out = tmp_path / "report"
    report = run_cli(["report", str(spec), "--bootstrap", "5", "--out", str(out)], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 6 and {r["trial_number"] for r in runs} == {"0", "1", "2"}
    md = (out / "report.md").read_text()
    assert "on-policy baseline (trial 0)" in md
    # the protocol trainer's accuracy follows trained rollouts: replay at y 2 reaches the target on fewer units
    assert all(t.value < complete[0].value for t in complete[1:])


def test_a_trial_command_that_reports_nothing_stops_the_study_in_one_line(tmp_path):
    proc = run_cli(["study", "run", str(command_spec(tmp_path, "silent"))], tmp_path)
    assert proc.returncode != 0
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "workbench: error: the on-policy baseline (trial 0) failed with TrialCommandFailed: trial command reported"
            " no eval/accuracy, compute/gen_rollouts, compute/train_rollouts to its MLflow run"
        )
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
