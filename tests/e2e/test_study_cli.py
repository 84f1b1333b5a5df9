"""Studies through the real CLI, real Optuna storages and real MLflow stores, with the faults of design §10."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from contextlib import closing, suppress
from pathlib import Path
from typing import NoReturn

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from workbench.study.context import context, create_or_load
from workbench.study.spec import load_spec
from support.cli import run_cli, start_cli
from support.servers import mlflow_server, postgres_server

from support.toy import TOY, toy_spec


def complete_trials(study):
    return [t for t in study.get_trials() if t.state == TrialState.COMPLETE]


def trial_runs(client: MlflowClient, study_name: str):
    exp = client.get_experiment_by_name(study_name)
    return client.search_runs([exp.experiment_id], filter_string="tags.`workbench.kind` = 'trial'", max_results=1000)


def assert_accounted_once(study, client: MlflowClient, name: str) -> None:
    """Every Optuna trial that trained has exactly one MLflow trial run, linked both ways, under the study's parent."""
    parent = study.user_attrs["mlflow_parent_run_id"]
    runs = {r.info.run_id: r for r in trial_runs(client, name)}
    trained = [t for t in study.get_trials() if "mlflow_run_id" in t.user_attrs]
    assert sorted(t.user_attrs["mlflow_run_id"] for t in trained) == sorted(runs)
    for t in trained:
        run = runs[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["workbench.trial_number"] == str(t.number)
        assert run.data.tags["mlflow.parentRunId"] == parent
        seeds = client.search_runs(
            [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'"
        )
        assert len(seeds) >= 1 and all(s.data.tags["workbench.kind"] == "seed" for s in seeds)
        if t.state == TrialState.COMPLETE:
            assert run.info.status == "FINISHED" and len(seeds) == len(t.user_attrs["per_seed"])
        assert all(s.info.status != "RUNNING" for s in [run, *seeds])


def test_bad_spec_through_the_cli_exits_2_with_one_line_and_creates_nothing(tmp_path):
    path = toy_spec(tmp_path, sampler="annealing")
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "workbench: error: sampler: unknown 'annealing'; known: tpe, gp, random, grid, qmc, nsga2"
    ]
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlflow.db").exists()


# ---------------------------------------------------------------- scale-out: PostgreSQL + MLflow server, 2 workers


@pytest.mark.slow
def test_study_with_two_workers_on_postgres_and_an_mlflow_server(tmp_path):
    with postgres_server() as pg, mlflow_server(pg["url"]["mlflow"], tmp_path / "artifacts") as uri:
        path = toy_spec(
            tmp_path,
            n_trials=4,
            storage=pg["url"]["optuna"],
            tracking_uri=uri,
            search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4, 8]}},
        )
        proc = run_cli(["study", "run", str(path), "--workers", "2"], tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Optuna storage: postgresql+psycopg2://postgres@127.0.0.1" in proc.stdout
        assert "Open both: workbench ui --tracking-uri http://127.0.0.1" in proc.stdout

        study = optuna.load_study(study_name="toy", storage=pg["url"]["optuna"])
        done = complete_trials(study)
        assert len(done) == 4
        assert len({tuple(sorted(t.params.items())) for t in done}) == 4  # no configuration trained twice
        assert done[0].user_attrs.get("baseline") and done[0].params == {"replay.ratio": 1, "x": 1}
        assert study.user_attrs["reference_mu"] > 0
        client = MlflowClient(uri)
        assert_accounted_once(study, client, "toy")
        parent = client.get_run(study.user_attrs["mlflow_parent_run_id"])
        assert parent.info.status == "FINISHED" and parent.data.tags["workbench.storage"].startswith("postgresql")
        table = client.download_artifacts(parent.info.run_id, "trials.csv", str(tmp_path))
        assert sum(1 for line in open(table) if ",COMPLETE," in line) == 4
        status = run_cli(["study", "status", "--study", "toy", "--storage", pg["url"]["optuna"]], tmp_path)
        assert status.returncode == 0 and "4 complete" in status.stdout and "Bottom line: " in status.stdout


@pytest.mark.slow
def test_a_postgres_restart_mid_study_loses_no_trial_and_counts_none_twice(tmp_path):
    """docs/faults.md: PostgreSQL stopped (fast: connections cut) for 5 s while two workers train, then started
    again; every worker waits it out (`storage.PatientRDBStorage`) and the study completes as if nothing happened."""
    with postgres_server() as pg:
        path = toy_spec(
            tmp_path,
            n_trials=5,
            storage=pg["url"]["optuna"],
            base={**{k: v for k, v in TOY.items() if k != "threads"}, "budget": {"compute_units": None, "steps": 12}},
            search_space={"replay.ratio": {"choices": [1, 2]}, "x": {"choices": [2, 4, 8]}},
        )
        err_path = tmp_path / "stderr.txt"
        with open(err_path, "w") as err:
            proc = start_cli(
                ["study", "run", str(path), "--workers", "2"], tmp_path, stdout=subprocess.DEVNULL, stderr=err
            )
        try:
            deadline = time.monotonic() + 300
            while "trial 1 starts" not in err_path.read_text():  # the baseline done, both workers training
                assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
                time.sleep(0.3)
            time.sleep(2)
            pg["restart"](5.0)
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        err = err_path.read_text()
        assert proc.returncode == 0, err[-3000:]
        assert "storage: the database did not answer" in err  # it was noticed, and waited out
        study = optuna.load_study(study_name="toy", storage=pg["url"]["optuna"])
        trials = study.get_trials()
        done = complete_trials(study)
        assert len(done) == 5 and not [t for t in trials if t.state in (TrialState.FAIL, TrialState.RUNNING)], [
            (t.number, t.state, t.user_attrs.get("fail_reason")) for t in trials
        ]
        assert len({tuple(sorted(t.params.items())) for t in done}) == 5  # no configuration trained twice
        assert_accounted_once(study, MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"), "toy")


# ---------------------------------------------------------------- faults


@pytest.mark.slow
def test_a_raising_trial_and_a_nan_trial_fail_with_their_reasons_and_the_worker_goes_on(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    path = toy_spec(
        tmp_path,
        n_trials=1,
        baseline=False,
        compute_mu=1.0,
        sampler="random",
        base={
            **{k: v for k, v in TOY.items() if k != "threads"},
            "objective": {"name": "asymre"},
            "budget": {"compute_units": None, "steps": 4},
        },
        search_space={"lr": {"choices": [1.0e-4, 1.0e30]}, "model.path": {"choices": [None, str(empty)]}},
    )
    ctx = context(load_spec(path), spec_path=str(path))
    study = create_or_load(ctx)
    study.enqueue_trial({"lr": 1.0e30, "model.path": None})  # Adam at 1e30: NaN gradients
    study.enqueue_trial({"lr": 1.0e-4, "model.path": str(empty)})  # from_pretrained raises
    study.enqueue_trial({"lr": 1.0e-4, "model.path": None})
    proc = run_cli(["study", "worker", str(path), "--n-trials", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    trials = optuna.load_study(study_name="toy", storage=ctx.storage_url).get_trials()
    assert [t.state for t in trials[:3]] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["fail_reason"].startswith("TrialDiverged: ")
    assert trials[1].user_attrs["fail_reason"].split(":")[0] in ("OSError", "ValueError")  # not a model directory
    client = MlflowClient(ctx.tracking_uri)
    for t in trials[:2]:
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        assert run.info.status == "FAILED" and run.data.tags["workbench.failure"] == t.user_attrs["fail_reason"]
    assert_accounted_once(optuna.load_study(study_name="toy", storage=ctx.storage_url), client, "toy")


def wait_for_running_trial(
    storage_url: str, tracking_uri: str, timeout: float = 300, driver: subprocess.Popen | None = None
):
    """Poll until some trial is RUNNING and has started training (its seed run exists); return it. Given the
    `driver` (started in its own session), fail at once if it exits, and on a timeout say what its processes were
    doing and what it printed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver is not None and driver.poll() is not None:
            raise AssertionError(f"the driver exited ({driver.returncode}) before a trial ran:\n{_printed(driver)}")
        study = optuna.load_study(study_name="toy", storage=storage_url) if _created(storage_url) else None
        for t in study.get_trials(states=(TrialState.RUNNING,)) if study else []:
            run_id = t.user_attrs.get("mlflow_run_id")
            if run_id:
                client = MlflowClient(tracking_uri)
                exp = client.get_run(run_id).info.experiment_id
                if client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{run_id}'"):
                    return t
        time.sleep(0.5)
    states = [(t.number, t.state.name, sorted(t.user_attrs)) for t in study.get_trials()] if study else "no study"
    if driver is None:
        raise AssertionError(f"timed out waiting for a running trial; trials: {states}")
    report_and_stop(driver, f"timed out waiting for a running trial; trials: {states}")


def wait_for_exit(driver: subprocess.Popen, timeout: float) -> int:
    """The driver's exit code, or (past `timeout`) an AssertionError saying where its processes were."""
    try:
        return driver.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        report_and_stop(driver, f"the driver had not exited {timeout:.0f} s after the signal")


def report_and_stop(driver: subprocess.Popen, why: str) -> NoReturn:
    """Fail with what the driver and its workers were doing: their Python stacks (`kill -USR1`, which the CLI
    answers on stderr), the process table and what they printed; then stop them all."""
    children = subprocess.run(["pgrep", "-P", str(driver.pid)], capture_output=True, text=True).stdout.split()
    for pid in [driver.pid, *map(int, children)]:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    time.sleep(2)  # the stacks are written by each process's own faulthandler
    processes = subprocess.run(
        ["ps", "-eo", "pid,ppid,sid,stat,etime,time,wchan:20,args"], capture_output=True, text=True
    ).stdout
    for pid in map(int, children):  # workers run in their own sessions
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with suppress(ProcessLookupError):
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    raise AssertionError(f"{why}\n{processes}\n{_printed(driver, 12000)}")


def _created(storage_url: str) -> bool:
    """Whether the driver has created the study: read-only, so that the poll never races the driver's creation of
    the SQLite schema (two processes creating it at once can fail either one)."""
    path = Path(storage_url.removeprefix("sqlite:///"))
    if not path.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
            return bool(db.execute("SELECT 1 FROM studies WHERE study_name = 'toy'").fetchall())
    except sqlite3.OperationalError:  # no schema yet, or locked a moment
        return False


def _printed(driver: subprocess.Popen, tail: int = 3000) -> str:
    """The tail of what `driver` wrote to its files (see `start_driver`)."""
    return "\n".join(f"{name}: ...{path.read_text(errors='replace')[-tail:]}" for name, path in driver.logs.items())


def start_driver(path: Path, tmp_path: Path, sigint) -> subprocess.Popen:
    """`workbench study run path` in its own session with SIGINT at `sigint`, as a terminal or a script's background
    would start it; it writes to files (a pipe nobody reads could fill and stall it), kept in `driver.logs`."""
    logs = {"stdout": tmp_path / "driver.out", "stderr": tmp_path / "driver.err"}
    with open(logs["stdout"], "w") as out, open(logs["stderr"], "w") as err:
        driver = start_cli(
            ["study", "run", str(path)],
            tmp_path,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        )
    driver.logs = logs
    return driver


@pytest.mark.slow
def test_a_sigkilled_worker_is_detected_by_heartbeat_its_trial_retried_and_its_runs_killed(tmp_path):
    path = toy_spec(
        tmp_path,
        n_trials=1,
        baseline=False,
        compute_mu=1.0,
        base={
            **{k: v for k, v in TOY.items() if k != "threads"},
            "budget": {"compute_units": None, "steps": 120},
            "eval": {**TOY["eval"], "every": 40},
        },
        search_space={"replay.ratio": {"choices": [2]}},
    )
    ctx = context(load_spec(path), spec_path=str(path))
    create_or_load(ctx)
    env = {"WORKBENCH_HEARTBEAT_INTERVAL": "1", "WORKBENCH_GRACE_PERIOD": "3"}
    victim = start_cli(
        ["study", "worker", str(path)], tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    killed = wait_for_running_trial(ctx.storage_url, ctx.tracking_uri)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # A second worker (here, as on another machine) fails the stale trial after the grace period and retries it.
    proc = run_cli(["study", "worker", str(path)], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    study = optuna.load_study(study_name="toy", storage=ctx.storage_url)
    first = study.get_trials()[killed.number]
    assert first.state == TrialState.FAIL
    retries = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE and retries[0].params == killed.params
    client = MlflowClient(ctx.tracking_uri)
    run = client.get_run(killed.user_attrs["mlflow_run_id"])
    assert run.info.status == "KILLED" and "no heartbeat" in run.data.tags["workbench.failure"]
    assert_accounted_once(study, client, "toy")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_a_rerun_resumes_without_loss_or_duplicates(tmp_path):
    path = toy_spec(
        tmp_path,
        n_trials=3,
        base={
            **{k: v for k, v in TOY.items() if k != "threads"},
            "budget": {"compute_units": None, "steps": 60},
            "eval": {**TOY["eval"], "every": 20},
        },
    )
    spec = load_spec(path)
    ctx = context(spec, spec_path=str(path))
    # As from a terminal: SIGINT at its default (a shell without job control starts background jobs ignoring it).
    driver = start_driver(path, tmp_path, signal.SIG_DFL)
    wait_for_running_trial(ctx.storage_url, ctx.tracking_uri, driver=driver)
    os.killpg(driver.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    wait_for_exit(driver, 180)  # a worker gets 60 s to stop before it is killed
    err = driver.logs["stderr"].read_text()
    assert driver.returncode == 130, err[-3000:]
    assert "Traceback" not in err

    study = optuna.load_study(study_name="toy", storage=ctx.storage_url)
    interrupted = [t for t in study.get_trials() if t.user_attrs.get("interrupted")]
    assert len(interrupted) == 1 and interrupted[0].state == TrialState.FAIL
    client = MlflowClient(ctx.tracking_uri)
    assert client.get_run(interrupted[0].user_attrs["mlflow_run_id"]).info.status == "KILLED"

    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="toy", storage=ctx.storage_url)
    done = complete_trials(study)
    assert len(done) == 3
    assert len({tuple(sorted(t.params.items())) for t in done}) == 3
    assert interrupted[0].params in [t.params for t in done]  # the interrupted configuration was run again
    assert sum(1 for t in done if t.user_attrs.get("baseline")) == 1
    assert_accounted_once(study, client, "toy")


@pytest.mark.slow
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["foreground", "nohup-background"])
def test_sigterm_to_the_driver_stops_its_workers_and_records_the_running_trial_as_interrupted(tmp_path, sigint):
    # A scheduler (or `kill`) signals the driver alone; its workers run in their own sessions and must not outlive it,
    # also when the study was started in a script's background (`nohup workbench study run ... &`: SIGINT ignored,
    # inherited by every process it starts).
    path = toy_spec(
        tmp_path,
        n_trials=2,
        base={
            **{k: v for k, v in TOY.items() if k != "threads"},
            "budget": {"compute_units": None, "steps": 60},
            "eval": {**TOY["eval"], "every": 20},
        },
    )
    spec = load_spec(path)
    ctx = context(spec, spec_path=str(path))
    driver = start_driver(path, tmp_path, sigint)
    wait_for_running_trial(ctx.storage_url, ctx.tracking_uri, driver=driver)
    workers = subprocess.run(["pgrep", "-f", f"study worker {path}"], capture_output=True, text=True).stdout.split()
    assert workers
    driver.send_signal(signal.SIGTERM)
    wait_for_exit(driver, 180)
    err = driver.logs["stderr"].read_text()
    assert driver.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}")]  # what a rerun resumes: the Ctrl-C test
    study = optuna.load_study(study_name="toy", storage=ctx.storage_url)
    interrupted = [t for t in study.get_trials() if t.user_attrs.get("interrupted")]
    assert len(interrupted) == 1 and interrupted[0].state == TrialState.FAIL  # stopped by the signal, not killed


@pytest.mark.slow
def test_multi_objective_study_reports_a_pareto_front(tmp_path):
    path = toy_spec(tmp_path, n_trials=2, objective=["best_accuracy", "compute_units"], sampler="nsga2")
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Pareto front (best_accuracy, compute_units):" in proc.stdout
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    done = complete_trials(study)
    assert len(done) == 2 and all(len(t.values) == 2 and 0 <= t.values[0] <= 1 for t in done)
    for t in done:
        per_seed = t.user_attrs["per_seed"][0]
        assert t.values == [per_seed["best_accuracy"], per_seed["compute_units"]]


def test_strategy_as_a_categorical_knob_with_conditional_parameters_and_points(tmp_path):
    space = {
        "replay.strategy": {"choices": ["uniform", "dgg", "prioritized"]},
        "replay.ratio": {"choices": [2], "when": {"replay.strategy": "uniform"}},
        "x": {"choices": [4], "when": {"replay.strategy": "uniform"}},
        "replay.dgg.max_reuse": {"choices": [2, 3], "when": {"replay.strategy": "dgg"}},
        "objective.name": {"choices": ["ppo_clip", "tis"]},
    }
    points = [
        {"replay.strategy": "dgg", "replay.dgg.max_reuse": 2, "objective.name": "tis"},
        {"replay.strategy": "uniform", "replay.ratio": 2, "x": 4, "objective.name": "ppo_clip"},
    ]
    path = toy_spec(tmp_path, search_space=space, points=points, n_trials=3, sampler="tpe")
    spec = load_spec(path)
    from workbench.study.spec import feasible_space_size

    # uniform: (1,1), (2,4) [(1,4) too: x >= y], dgg: 2 values, prioritized: 1; each x 2 objectives
    assert feasible_space_size(spec) == (3 + 2 + 1) * 2
    assert spec.baseline_params() == {
        "replay.strategy": "uniform",
        "replay.ratio": 1,
        "x": 1,
        "objective.name": "ppo_clip",
    }
    proc = run_cli(["study", "run", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    done = sorted(complete_trials(study), key=lambda t: t.number)
    # the baseline, then the points in order, each a trial of the space with only its active knobs
    assert [t.params for t in done[:3]] == [spec.baseline_params(), *points]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for t in done[:3]:
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        seed = client.search_runs(
            [run.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'"
        )[0]
        assert seed.data.params["replay.strategy"] == t.params["replay.strategy"]
        assert seed.data.params["objective.name"] == t.params["objective.name"]
        assert all(k.startswith("knob.") for k in run.data.params if k not in ("seeds", "baseline"))
        assert {k[5:] for k in run.data.params if k.startswith("knob.")} == set(t.params)
    dgg_seed = client.search_runs(
        [client.get_experiment_by_name("toy").experiment_id], filter_string="params.`replay.strategy` = 'dgg'"
    )[0]
    assert dgg_seed.data.params["replay.dgg.max_reuse"] == "2" and "dgg/gated" in dgg_seed.data.metrics
    assert "offpolicy/ess" in dgg_seed.data.metrics
