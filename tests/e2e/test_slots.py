"""A configuration's seeds side by side over device slots (`workbench.study.slots`), CPU cores standing in for GPUs:
each seed on its own slot, at the same time, the baseline's too while it runs alone; a seed's failure is its
trial's, and the worker goes on."""

from __future__ import annotations

import os

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from workbench import tracking
from workbench.study.context import context, create_or_load
from workbench.study.spec import load_spec
from support.cli import run_cli
from support.cores import machine_cores
from support.toy import TOY, toy_spec

# Cores 0 and 1 whichever xdist worker runs a test (`all_cores`); the tests that read seeds overlapping in time have
# the machine to themselves (on a core shared with another worker's test, a seed was seen to start after the other
# slot's had ended), the others run beside other tests.
pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(machine_cores()) < 2, reason="two cores to stand in for two GPUs"
)

BASE = {
    **{k: v for k, v in TOY.items() if k != "threads"},
    "budget": {"compute_units": None, "steps": 12},
    "eval": {**TOY["eval"], "every": 4},
}


def _seed_runs(client: MlflowClient, trial_run_id: str):
    exp = client.get_run(trial_run_id).info.experiment_id
    return client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{trial_run_id}'")


def _side_by_side(runs) -> bool:
    """Every pair of the runs overlapped in time."""
    spans = [(r.info.start_time, r.info.end_time) for r in runs]
    return all(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :])


@pytest.mark.slow
@pytest.mark.all_cores
def test_a_worker_with_two_slots_runs_each_configuration_s_seeds_side_by_side(tmp_path):
    path = toy_spec(
        tmp_path,
        n_trials=2,
        baseline=False,
        compute_mu=1.0,
        seeds=2,
        base={**BASE, "objective": {"name": "asymre"}},
        search_space={"lr": {"choices": [1.0e-4, 1.0e30]}},
    )
    ctx = context(load_spec(path), spec_path=str(path))
    study = create_or_load(ctx)
    study.enqueue_trial({"lr": 1.0e30})  # Adam at 1e30: NaN gradients; a seed's failure fails its trial
    study.enqueue_trial({"lr": 1.0e-4})
    proc = run_cli(["study", "worker", str(path), "--devices", "0,1", "--n-trials", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "device slots: cpu 0 | cpu 1" in proc.stderr
    # each slot's seed speaks as it runs, under its slot's name (not silent until it ends)
    assert "[cpu 0] trial: B=" in proc.stderr and "[cpu 1] trial: B=" in proc.stderr
    assert any(line.startswith("[cpu 1] step ") for line in proc.stderr.splitlines())

    trials = optuna.load_study(study_name="toy", storage=ctx.storage_url).get_trials()
    assert [t.state for t in trials[:2]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["fail_reason"].startswith("TrialDiverged: ")
    client = MlflowClient(ctx.tracking_uri)
    runs = _seed_runs(client, trials[1].user_attrs["mlflow_run_id"])
    assert sorted(r.data.tags[tracking.SLOT] for r in runs) == ["cpu 0", "cpu 1"]
    assert sorted(r.data.tags[tracking.SEED] for r in runs) == ["0", "1"] and all(
        r.info.status == "FINISHED" for r in runs
    )
    assert _side_by_side(runs)
    assert [s["seed"] for s in trials[1].user_attrs["per_seed"]] == [0, 1]  # results in the seeds' order


@pytest.mark.slow
@pytest.mark.all_cores
def test_the_baseline_that_runs_alone_spreads_its_seeds_over_every_device(tmp_path):
    """`study run --workers 2 --devices 0,1`: one device per worker, but while the baseline runs alone (it sets the
    study's mu and target), its seeds run side by side over both."""
    path = toy_spec(
        tmp_path, n_trials=2, seeds=2, base=BASE, search_space={"replay.ratio": {"choices": [2]}, "x": {"choices": [4]}}
    )
    proc = run_cli(["study", "run", str(path), "--workers", "2", "--devices", "0,1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ctx = context(load_spec(path), spec_path=str(path))
    trials = optuna.load_study(study_name="toy", storage=ctx.storage_url).get_trials(states=(TrialState.COMPLETE,))
    baseline = next(t for t in trials if t.user_attrs.get("baseline"))
    client = MlflowClient(ctx.tracking_uri)
    runs = _seed_runs(client, baseline.user_attrs["mlflow_run_id"])
    assert sorted(r.data.tags[tracking.SLOT] for r in runs) == ["cpu 0", "cpu 1"] and _side_by_side(runs)
    other = next(t for t in trials if not t.user_attrs.get("baseline"))
    assert all(
        tracking.SLOT not in r.data.tags for r in _seed_runs(client, other.user_attrs["mlflow_run_id"])
    )  # one device: in turn


@pytest.mark.slow
@pytest.mark.all_cores(alone=False)
def test_ctrl_c_to_a_worker_ends_its_side_by_side_seeds_killed_and_takes_its_slots_with_it(tmp_path):
    import signal
    import subprocess
    import time

    from support.cli import start_cli

    path = toy_spec(
        tmp_path,
        n_trials=1,
        baseline=False,
        compute_mu=1.0,
        seeds=2,
        base={**BASE, "budget": {"compute_units": None, "steps": 400}, "eval": {**TOY["eval"], "every": 20}},
    )
    ctx = context(load_spec(path), spec_path=str(path))
    create_or_load(ctx)
    with open(tmp_path / "worker.err", "w") as err:
        worker = start_cli(
            ["study", "worker", str(path), "--devices", "0,1"],
            tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    client = MlflowClient(ctx.tracking_uri)
    exp = client.get_experiment_by_name("toy").experiment_id
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and worker.poll() is None:
        running = client.search_runs(
            [exp], filter_string="tags.`workbench.kind` = 'seed' and attributes.status = 'RUNNING'"
        )
        if len(running) == 2:
            break
        time.sleep(0.5)
    assert len(running) == 2, (tmp_path / "worker.err").read_text()[-3000:]
    slots = [
        int(p) for p in subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split()
    ]
    worker.send_signal(signal.SIGINT)  # what the driver forwards on Ctrl-C
    assert worker.wait(timeout=120) == 130, (tmp_path / "worker.err").read_text()[-3000:]
    seeds = client.search_runs([exp], filter_string="tags.`workbench.kind` = 'seed'")
    assert sorted(r.info.status for r in seeds) == ["KILLED", "KILLED"]
    trial = optuna.load_study(study_name="toy", storage=ctx.storage_url).get_trials()[0]
    assert trial.state == TrialState.FAIL and trial.user_attrs.get("interrupted")
    assert slots and not [
        p for p in slots if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"
    ]


@pytest.mark.slow
def test_a_slot_whose_process_died_is_started_again_for_the_next_trial(tmp_path):
    import signal

    from workbench.config import build_config
    from workbench.study.slots import Slot, SlotPool
    from support.toy import toy_dict

    pool = SlotPool([Slot("cpu", (0,)), Slot("cpu", (1,))])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # the store created once here, as a study's context does before its workers

    def jobs():
        cfgs = [
            build_config(toy_dict(seed=seed, tracking={"uri": uri}, budget={"compute_units": None, "steps": 2}))
            for seed in (0, 1)
        ]
        return [(cfg, {"run_name": f"seed {cfg.seed}"}) for cfg in cfgs]

    try:
        first = pool.run(jobs(), [lambda row: None] * 2)
        victim = pool._procs[0][0]
        os.kill(victim.pid, signal.SIGKILL)  # what the kernel's OOM killer does
        victim.join(timeout=10)
        second = pool.run(jobs(), [lambda row: None] * 2)
    finally:
        pool.close()
    assert [r.metrics["final/steps"] for r in first + second] == [2, 2, 2, 2]
    assert pool._procs == []  # closed
