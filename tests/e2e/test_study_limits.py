"""A study's limits on its seeds (docs/faults.md): a hung seed (stopped with SIGSTOP: alive, no progress) and a seed
over its memory limit have their process tree killed by the worker, their trial fails with one line saying which
limit, and the study goes on; no process is left behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import mlflow
import optuna
import pytest

from support.cli import run_cli, start_cli
from support.toy import TOY, toy_spec
from workbench import tracking
from workbench.study.limits import Watch, descendants, kill_tree, out_of_memory
from workbench.study.spec import TrialLimits


def _slots(root: int) -> list[int]:
    """The slot processes under `root` (they name themselves `wb-slot`)."""
    out = []
    for pid in descendants(root):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "wb-slot":
                out.append(pid)
        except OSError:
            continue
    return out


def _stepped_seed_runs(db) -> int:
    """Seed runs with a training step logged (read-only: the study writes the store meanwhile)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
            return c.execute(
                "select count(distinct m.run_uuid) from metrics m join tags t on t.run_uuid = m.run_uuid"
                " where m.key = 'train/loss' and t.key = 'workbench.kind' and t.value = 'seed'"
            ).fetchone()[0]
    except sqlite3.Error:
        return 0


def _trials(tmp_path):
    return optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()


@pytest.mark.slow
def test_a_hung_seed_is_killed_within_its_limit_and_the_study_goes_on(tmp_path):
    stall = 20.0
    spec = toy_spec(
        tmp_path,
        n_trials=2,
        baseline=False,
        limits={"stall_s": stall},
        search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [4]}},
        base={**{k: v for k, v in TOY.items() if k != "threads"}, "budget": {"compute_units": None, "steps": 12}},
    )
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = start_cli(
            ["study", "run", str(spec), "--workers", "1"],
            tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while _stepped_seed_runs(tmp_path / "mlflow.db") == 0:  # the first seed is training
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.3)
        (slot,) = _slots(proc.pid)
        os.kill(slot, signal.SIGSTOP)  # alive, and no step ever again
        stopped = time.monotonic()
        while slot in _slots(proc.pid) or os.path.exists(f"/proc/{slot}"):
            assert time.monotonic() - stopped < stall + 15, "the hung seed's process was not killed in time"
            time.sleep(0.2)
        took = time.monotonic() - stopped
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = err_path.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert took <= stall + 5, took
    trials = _trials(tmp_path)
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 1 and sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == 2, err[-3000:]
    reason = failed[0].user_attrs["fail_reason"]
    assert reason.startswith("LimitExceeded: hung: no training step for") and "limits.stall_s 20" in reason
    assert "\n" not in reason
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs(
        [client.get_experiment_by_name("toy").experiment_id],
        filter_string=f"tags.`{tracking.TRIAL_NUMBER}` = '{failed[0].number}'",
    )
    assert runs and all(r.info.status == "FAILED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    assert not descendants(proc.pid)


@pytest.mark.slow
def test_a_seed_over_its_memory_limit_fails_in_one_line_and_the_worker_goes_on(tmp_path):
    spec = toy_spec(
        tmp_path,
        n_trials=2,
        baseline=False,
        max_same_failures=2,
        limits={"memory_mib": 50},
        search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [4]}},
    )
    proc = run_cli(["study", "run", str(spec), "--workers", "1"], tmp_path, timeout=600)
    assert proc.returncode != 0, proc.stderr[-3000:]
    failed = [t for t in _trials(tmp_path) if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 2, proc.stderr[-3000:]  # the second ran in a fresh process after the first was killed
    for t in failed:
        reason = t.user_attrs["fail_reason"]
        assert (
            reason.startswith("LimitExceeded: out of memory: its processes held") and "limits.memory_mib 50" in reason
        )
    assert "stopping" in proc.stderr and "LimitExceeded: out of memory" in proc.stderr


def test_a_watch_names_the_limit_a_seed_is_over():
    w = Watch()
    assert w.over(TrialLimits(stall_s=5, wall_s=50), os.getpid()) is None
    w.progressed -= 6
    assert w.over(TrialLimits(stall_s=5), os.getpid()).startswith("hung: no training step for 6 s (limits.stall_s 5)")
    w.progress()
    w.started -= 51
    assert w.over(TrialLimits(stall_s=5, wall_s=50), os.getpid()).startswith(
        "over its wall-time limit: 51 s (limits.wall_s 50)"
    )
    assert w.over(TrialLimits(memory_mib=1), os.getpid()).startswith("out of memory: its processes held")
    assert not TrialLimits().any and TrialLimits(wall_s=1).any


def test_out_of_memory_is_told_from_other_failures():
    assert out_of_memory(MemoryError())
    assert out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:116] DefaultCPUAllocator: can't allocate memory"))
    assert not out_of_memory(ValueError("loss is NaN"))


def test_kill_tree_ends_a_process_and_its_children():
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"])
    deadline = time.monotonic() + 10
    while len(descendants(parent.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    children = descendants(parent.pid)
    assert len(children) == 2
    kill_tree(parent.pid)
    parent.wait(timeout=5)
    time.sleep(0.2)
    assert not any(
        os.path.exists(f"/proc/{c}") and open(f"/proc/{c}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        for c in children
    )
