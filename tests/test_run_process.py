"""`workbench train`'s MLflow run in a helper process: what it logs, how its errors surface, and a trial process
that dies without ending its run (the helper ends it FAILED)."""

import subprocess
import sys
import time

import pytest
from mlflow import MlflowClient

from workbench import tracking
from workbench.run_process import RunProcess


def test_a_run_in_a_helper_process_logs_what_an_in_process_run_logs(tracking_uri, tmp_path):
    run = RunProcess(tracking_uri, "helper", "a run", tags={"who": "test"})
    run.log_params({"lr": 2.5e-5, "x": None})
    for step in range(3):
        run.log_metrics({"eval/accuracy": 0.5 + step / 10}, step)
    run.set_tags({"phase": "done"})
    run.log_text("hello", "notes/hello.txt")
    run.end(tracking.STATUS_FINISHED)
    got = MlflowClient(tracking_uri).get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "a run"
    assert got.data.params == {"lr": "2.5e-05", "x": "null"}
    assert got.data.tags["who"] == "test" and got.data.tags["phase"] == "done"
    assert got.data.tags[tracking.STATUS] == tracking.STATUS_FINISHED
    history = MlflowClient(tracking_uri).get_metric_history(run.run_id, "eval/accuracy")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(0, 0.5), (1, 0.6), (2, 0.7)]
    path = MlflowClient(tracking_uri).download_artifacts(run.run_id, "notes/hello.txt", str(tmp_path))
    assert open(path).read() == "hello"


def test_errors_surface_in_the_trial_process(tracking_uri):
    run = RunProcess(tracking_uri, "helper")
    run.log_params({"a": 1})
    with pytest.raises(RuntimeError, match="MLflow: MlflowException"):
        run.log_params({"a": 2})  # MLflow refuses to change a logged parameter
    run.set_tags({"k" * 300: "v"})  # not waited for: refused by MLflow, reported at the next call that waits
    with pytest.raises(RuntimeError, match="MLflow: MlflowException"):
        run.flush()
    run.end(tracking.STATUS_FINISHED)
    assert MlflowClient(tracking_uri).get_run(run.run_id).info.status == "FINISHED"


def test_a_run_that_cannot_be_created_raises_when_the_trial_asks_for_it():
    run = RunProcess("nosuchscheme://somewhere", "helper")
    with pytest.raises(RuntimeError, match="MLflow: .*nosuchscheme"):
        run.run_id


@pytest.mark.parametrize("how", ["killed", "exits"])
def test_a_trial_process_that_dies_leaves_its_run_failed_not_running(tracking_uri, how):
    code = (
        "import os, signal, sys\n"
        "from workbench.run_process import RunProcess\n"
        "run = RunProcess(sys.argv[1], 'helper')\n"
        "run.log_metrics({'m': 1.0}, 0)\n"
        "run.flush()\n"
        "print(run.run_id, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL) if sys.argv[2] == 'killed' else sys.exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, tracking_uri, how], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    run_id = proc.stdout.split()[0]
    deadline = time.monotonic() + 60
    while (got := MlflowClient(tracking_uri).get_run(run_id)).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert got.info.status == "FAILED"
    assert got.data.tags[tracking.FAILURE] == "the trial process exited without ending its run"
    assert MlflowClient(tracking_uri).get_metric_history(run_id, "m")[0].value == 1.0


def test_a_trial_that_stops_before_its_run_is_ready_leaves_no_traceback_and_the_run_failed(tracking_uri):
    # Bad input found after the helper started (a malformed JSONL line): the trial exits at once, the helper finds
    # the pipe closed when it reports the run it created, ends that run FAILED and prints nothing.
    code = "import sys\nfrom workbench.run_process import RunProcess\nRunProcess(sys.argv[1], 'early')\nsys.exit(2)\n"
    proc = subprocess.run([sys.executable, "-c", code, tracking_uri], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    client = MlflowClient(tracking_uri)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        exp = client.get_experiment_by_name("early")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        if runs and runs[0].info.status != "RUNNING":
            break
        time.sleep(0.5)
    assert exp is None or all(r.info.status == "FAILED" for r in runs)  # no run yet when the helper was stopped first
