"""The asynchronous pipeline launched by torchrun (docs/pipeline.md "Across machines"): two launcher processes meeting
on 127.0.0.1 stand in for two machines, one holding the trainer (rank 0, the trial), the other the generator; the
weights travel over a gloo group, the rollouts through the launcher's store. Also: trainers in a process group of
their own beside a generator, and a generator's machine lost mid-trial."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import mlflow
import pytest

from workbench.study.limits import descendants

TRIAL = [
    "--set",
    "pipeline.mode=async",
    "--set",
    "budget.steps=8",
    "--set",
    "budget.compute_units=null",
    "--set",
    "eval.every_units=100",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(
    tmp_path, name: str, port: int, nnodes: int, node_rank: int, nproc: int, args: list[str]
) -> subprocess.Popen:
    """`torchrun ... -m workbench.cli train ARGS`, one launcher ("machine"), its output in tmp_path/NAME.{out,err}."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "-m",
        "workbench.cli",
        "train",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        *args,
    ]
    with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=err, start_new_session=True)


def _wait(procs: dict[str, subprocess.Popen], tmp_path, timeout: float = 600) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    try:
        for p in procs.values():
            p.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return {name: p.returncode for name, p in procs.items()}


def _said(tmp_path, names) -> str:
    return "\n".join(
        f"--- {n}.{k}\n" + (tmp_path / f"{n}.{k}").read_text()[-3000:] for n in names for k in ("out", "err")
    )


def _run(tmp_path):
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1, [r.info.run_id for r in runs]  # only rank 0 opens a run
    return client, runs[0]


@pytest.mark.slow
def test_a_two_machine_asynchronous_trial_through_torchrun_on_gloo(tmp_path):
    port = _port()
    procs = {f"node{i}": _launch(tmp_path, f"node{i}", port, 2, i, 1, TRIAL) for i in (0, 1)}
    codes = _wait(procs, tmp_path)
    assert codes == {"node0": 0, "node1": 0}, _said(tmp_path, procs)
    client, run = _run(tmp_path)
    m = run.data.metrics
    assert run.info.status == "FINISHED"
    assert run.data.tags["pipeline.launch"] == "torchrun, 2 processes, backend gloo"
    assert m["final/steps"] == 8 and m["final/train_rollouts"] == 8 * 128
    assert m["final/pipeline_chunks"] >= 2 and m["final/gen_rollouts"] >= m["final/pipeline_chunks"] * 8
    ages = [x.value for x in client.get_metric_history(run.info.run_id, "replay/age_mean")]
    # a generator that never received new weights would train step s on version-0 rollouts only (age s)
    assert len(ages) == 8 and ages[-1] < 7, ages


@pytest.mark.slow
def test_two_trainers_and_a_generator_launched_on_one_machine_share_every_count(tmp_path):
    args = [*TRIAL, "--set", "pipeline.trainers=2", "--set", "budget.steps=4"]
    procs = {"node0": _launch(tmp_path, "node0", _port(), 1, 0, 3, args)}
    codes = _wait(procs, tmp_path)
    assert codes == {"node0": 0}, _said(tmp_path, procs)
    _, run = _run(tmp_path)
    m = run.data.metrics
    assert run.data.tags["pipeline.launch"] == "torchrun, 3 processes, backend gloo"
    assert m["final/steps"] == 4 and m["final/train_rollouts"] == 4 * 128  # both trainers' shards, summed


@pytest.mark.parametrize(
    "override, said",
    [
        ("pipeline.generators=2", "torchrun launched 2 processes, but pipeline.generators + pipeline.trainers = 3"),
        ("pipeline.mode=sync", "torchrun launched 2 processes for one trial: set pipeline.mode: async"),
    ],
)
def test_a_launch_that_does_not_fit_the_trial_is_one_line_on_every_rank(tmp_path, override, said):
    procs = {"node0": _launch(tmp_path, "node0", _port(), 1, 0, 2, [*TRIAL, "--set", override])}
    codes = _wait(procs, tmp_path, timeout=300)
    assert codes["node0"] != 0
    errors = [line for line in (tmp_path / "node0.err").read_text().splitlines() if line.startswith("workbench: error")]
    assert len(errors) == 2 and all(said in e for e in errors), _said(tmp_path, procs)  # rank 0 and rank 1


@pytest.mark.slow
def test_a_generator_machine_lost_mid_trial_ends_the_trial_with_one_line(tmp_path):
    from workbench.trial.pipeline.distributed import PEER_TIMEOUT_S

    port = _port()
    args = [*TRIAL, "--set", "budget.steps=100000"]
    procs = {f"node{i}": _launch(tmp_path, f"node{i}", port, 2, i, 1, args) for i in (0, 1)}
    try:
        deadline = time.monotonic() + 300
        while not re.search(r"^step +\d+ ", (tmp_path / "node0.err").read_text(), re.M) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs.values()), _said(tmp_path, procs)
            time.sleep(0.5)
        time.sleep(2)  # training, the generator sampling
        for pid in [
            procs["node1"].pid,
            *descendants(procs["node1"].pid),
        ]:  # the launcher and its generator: the machine gone
            os.kill(pid, signal.SIGKILL)
        lost = time.monotonic()
        procs["node0"].wait(PEER_TIMEOUT_S + 30)
        took = time.monotonic() - lost
    finally:
        _wait(procs, tmp_path, timeout=1)
    err = (tmp_path / "node0.err").read_text()
    said = [line for line in err.splitlines() if "pipeline: " in line]  # torchrun prefixes a rank's lines with [rankN]
    assert procs["node0"].returncode != 0 and took <= PEER_TIMEOUT_S + 15, (took, _said(tmp_path, procs))
    assert any("pipeline: generator 0 (rank 1, pid" in line and "has not answered for" in line for line in said), said
    assert not descendants(procs["node0"].pid)
    _, run = _run(tmp_path)
    assert run.info.status == "FAILED"
