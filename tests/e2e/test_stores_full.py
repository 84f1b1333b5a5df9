"""The stores' disk filling up mid-study (docs/faults.md): the study stops with one line and exit code 3, both stores
stay readable, and once there is space again `study run` resumes it to completion.

The stores live on a 2 MB tmpfs (root may mount one; elsewhere the test's processes get a 2 MB file-size limit
instead, RLIMIT_FSIZE with SIGXFSZ ignored: SQLite then refuses its writes as "database or disk is full" the same
way)."""

from __future__ import annotations

import resource
import signal
import subprocess
import time

import optuna
import pytest
from mlflow import MlflowClient

from support.cli import run_cli
from support.toy import TOY, toy_spec
from workbench.study.storage import DEFAULT_GRACE

LIMIT_KB = 2000
SMALL_KB = 200
"""Too little for the new stores' tables."""


def _mount(path, size_kb: int = LIMIT_KB) -> bool:
    path.mkdir()
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def _small_files(size_kb: int = LIMIT_KB):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (size_kb * 1024, size_kb * 1024))


def _stopped_by_a_full_disk(spec, tmp_path, mounted: bool, size_kb: int, timeout: float) -> None:
    """`study run` on stores with `size_kb` of room stops with the one line, exit code 3 and no traceback."""
    proc = run_cli(
        ["study", "run", str(spec), "--workers", "1"],
        tmp_path,
        timeout=timeout,
        **({} if mounted else {"preexec_fn": lambda: _small_files(size_kb)}),
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("workbench: error")]
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert (
        len(errors) == 1
        and errors[0].startswith("workbench: error: the stores' disk is full (")
        and "resumes it" in errors[0]
    ), errors
    assert "Traceback" not in proc.stderr, proc.stderr[proc.stderr.index("Traceback") - 2000 :][:5000]


@pytest.mark.slow
def test_a_full_disk_stops_the_study_in_one_line_and_a_resume_completes_it(tmp_path):
    stores = tmp_path / "stores"
    mounted = _mount(stores)
    try:
        spec = toy_spec(
            tmp_path,
            n_trials=6,
            storage=f"sqlite:///{stores / 'optuna.db'}",
            tracking_uri=f"sqlite:///{stores / 'mlflow.db'}",
            base={**{k: v for k, v in TOY.items() if k != "threads"}, "budget": {"compute_units": None, "steps": 12}},
            search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4, 8]}},
        )
        _stopped_by_a_full_disk(spec, tmp_path, mounted, LIMIT_KB, timeout=900)
        study = optuna.load_study(study_name="toy", storage=f"sqlite:///{stores / 'optuna.db'}")  # readable
        before = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
        client = MlflowClient(f"sqlite:///{stores / 'mlflow.db'}")
        assert client.search_runs([client.get_experiment_by_name("toy").experiment_id])
        assert len(before) < 6
        if mounted:  # space returns
            subprocess.run(["mount", "-o", "remount,size=64m", str(stores)], check=True)
        # the trial that was running when the disk filled could not be recorded as failed: its heartbeat goes stale,
        # and the resumed study fails it (and runs its configuration again) once the grace period has passed
        time.sleep(DEFAULT_GRACE + 1)
        try:  # ~20 s alone on one core; what it printed if it does not end
            resumed = run_cli(["study", "run", str(spec), "--workers", "1"], tmp_path, timeout=300)
        except subprocess.TimeoutExpired as hung:
            pytest.fail(f"the resumed study did not end in 300 s; it printed:\n{(hung.stderr or b'').decode()[-6000:]}")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        study = optuna.load_study(study_name="toy", storage=f"sqlite:///{stores / 'optuna.db'}")
        done = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(done) == 6 and len({tuple(sorted(t.params.items())) for t in done}) == 6
        assert not [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(stores)], capture_output=True)


def test_a_disk_too_full_to_create_the_stores_is_the_same_one_line(tmp_path):
    """Full before anything is recorded: the stores' tables cannot be written (MLflow's migrations, Optuna's
    schema), and the study stops with the same line and exit code, not a traceback from inside a library."""
    stores = tmp_path / "stores"
    mounted = _mount(stores, size_kb=SMALL_KB)
    try:
        spec = toy_spec(
            tmp_path,
            storage=f"sqlite:///{stores / 'optuna.db'}",
            tracking_uri=f"sqlite:///{stores / 'mlflow.db'}",
        )
        _stopped_by_a_full_disk(spec, tmp_path, mounted, SMALL_KB, timeout=300)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(stores)], capture_output=True)
