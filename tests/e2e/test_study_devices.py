"""`study run --devices` through the real CLI: each real worker process confines itself to its own devices (on this
CPU machine: cores) and every trial records what its worker saw."""

from __future__ import annotations

import os

import optuna
import pytest
from optuna.trial import TrialState

from support.cli import run_cli
from support.cores import machine_cores
from support.toy import toy_spec

# Core ids 0 and 1, whichever xdist worker runs them: the study of two workers has the machine to itself, the checks
# of `--devices` only see every core.
pytestmark = pytest.mark.all_cores(alone=False)


@pytest.mark.all_cores
@pytest.mark.slow
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(machine_cores()) < 2, reason="needs 2 cores and Linux affinity"
)
def test_two_workers_each_run_on_their_own_core(tmp_path):
    spec = toy_spec(tmp_path, n_trials=4, search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4]}})
    proc = run_cli(["study", "run", str(spec), "--workers", "2", "--devices", "0,1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 worker(s) x 1 thread(s) on cpu 0 | 1" in proc.stderr
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    trained = [t for t in study.get_trials() if t.state == TrialState.COMPLETE and "mlflow_run_id" in t.user_attrs]
    assert len(trained) >= 3
    seen = [t.user_attrs["devices"] for t in trained]
    assert all(s["kind"] == "cpu" and s["affinity"] == s["devices"] and len(s["devices"]) == 1 for s in seen)
    by_pid = {}
    for s in seen:
        by_pid.setdefault(s["pid"], set()).add(tuple(s["devices"]))
    assert all(len(sets) == 1 for sets in by_pid.values())  # a worker keeps its set
    assert {d for sets in by_pid.values() for d in sets} <= {(0,), (1,)}
    # both real worker processes confined themselves (the second may find no trial left to run)
    lines = [line for line in proc.stderr.splitlines() if ": cpu devices " in line]
    assert sorted(line.split(": cpu devices ")[1] for line in lines) == ["0 (it sees 0)", "1 (it sees 1)"]
    assert len({line.split("worker ")[1].split(":")[0] for line in lines}) == 2
    baseline = next(t for t in trained if t.user_attrs.get("baseline"))
    assert baseline.user_attrs["devices"]["devices"] == [0]  # the first worker's core, not every core


def test_too_few_devices_for_the_workers_exits_2_before_any_store(tmp_path):
    spec = toy_spec(tmp_path)
    proc = run_cli(["study", "run", str(spec), "--workers", "2", "--devices", "0"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: --devices: 1 device(s) for 2 worker(s) x 1 (1 per trial: one); give at least 2"
    ]
    assert not (tmp_path / "optuna.db").exists()


def test_an_asynchronous_study_needs_w_plus_t_devices_per_worker(tmp_path):
    spec = toy_spec(tmp_path, search_space={"replay.capacity": {"choices": [16, 64]}})  # asynchronously y is not set
    text = spec.read_text().replace("base:\n", "base:\n  pipeline: {mode: async, generators: 2}\n", 1)
    spec.write_text(text)
    proc = run_cli(["study", "run", str(spec), "--workers", "1", "--devices", "0,1"], tmp_path)
    assert proc.returncode == 2 and "give at least 3" in proc.stderr
    proc = run_cli(["study", "worker", str(spec), "--devices", "0-1"], tmp_path)
    assert proc.returncode == 2 and "--devices: 2 device(s) for 1 worker(s) x 3" in proc.stderr
