"""`workbench study confirm` and `study compare` through the real CLI into real Optuna and MLflow stores."""

from __future__ import annotations

import json
import os
import signal
import time

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from workbench import tracking
from support.cli import run_cli, start_cli
from support.cores import machine_cores, whole_machine
from support.toy import TOY, toy_spec


def _study(tmp_path):
    return optuna.load_study(study_name="toy", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def test_race_then_confirm_through_the_cli_into_real_stores(tmp_path):
    spec = toy_spec(
        tmp_path,
        seeds=2,
        n_trials=3,
        sampler="grid",
        search_space={"replay.ratio": {"choices": [2]}, "x": {"choices": [2, 4]}},
    )
    assert run_cli(["study", "run", str(spec)], tmp_path).returncode == 0

    # Racing: with 2 seeds nothing is resolved against the leader, so one round adds seed 2 to the leader, the
    # contender and the baseline (to keep savings paired); with --max-seeds 3 the race then stops.
    race = run_cli(["study", "race", str(spec), "--max-seeds", "3", "--step", "1"], tmp_path)
    assert race.returncode == 0, race.stderr
    assert "ran seeds [2]" in race.stdout and "race over" in race.stdout
    raced = [t for t in _study(tmp_path).get_trials() if t.user_attrs.get("arm") == "race"]
    assert sorted(t.user_attrs["extends"] for t in raced) == [0, 1, 2]
    assert "(3 runs" in race.stdout  # merged into the configurations they extend

    # On two cores the fresh seeds run side by side, one per core (`--devices`, as a worker's slots), the machine
    # to themselves.
    two = len(machine_cores()) >= 2 and hasattr(os, "sched_setaffinity")
    with whole_machine():
        proc = run_cli(
            ["study", "confirm", str(spec), "--top", "1", "--seeds", "2", "--json"]
            + (["--devices", "0,1"] if two else []),
            tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [d["seeds"] for d in done] == [[3, 4], [3, 4]]  # fresh: selection (the race included) used seeds 0-2
    assert "selection  (seeds 0,1,2)" in proc.stdout and "replicated (seeds 3,4)" in proc.stdout

    confirmed = [t for t in _study(tmp_path).get_trials() if t.user_attrs.get("arm") == "confirm"]
    assert sorted(t.user_attrs["confirms"] for t in confirmed)[0] == 0  # the baseline, then the best configuration
    assert all(sorted(int(v["seed"]) for v in t.user_attrs["per_seed"]) == [3, 4] for t in confirmed)
    assert next(t for t in confirmed if t.user_attrs["confirms"] == 0).user_attrs["baseline"] is True

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("toy")
    runs = client.search_runs(
        [exp.experiment_id], filter_string="tags.`workbench.arm` = 'confirm' and tags.`workbench.kind` = 'seed'"
    )
    assert sorted(r.data.params["seed"] for r in runs) == ["3", "3", "4", "4"]
    if two:
        assert sorted(r.data.tags.get(tracking.SLOT, "-") for r in runs) == ["cpu 0", "cpu 0", "cpu 1", "cpu 1"]

    # Asking for the predicted optima before `study verify` has run one: one line, exit 2, nothing trained.
    none = run_cli(["study", "confirm", str(spec), "--top", "1", "--seeds", "2", "--predicted"], tmp_path)
    assert none.returncode == 2 and none.stderr.count("\n") == 1 and "study verify" in none.stderr

    # The same command again trains nothing: already confirmed on those seeds.
    again = run_cli(["study", "confirm", str(spec), "--top", "1", "--seeds", "2", "--json"], tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1]) == done
    assert len([t for t in _study(tmp_path).get_trials() if t.user_attrs.get("arm") == "confirm"]) == 2

    compare = run_cli(["study", "compare", str(spec)], tmp_path)
    assert compare.returncode == 0 and "ratio to on-policy" in compare.stdout and "(confirms trial" in compare.stdout
    noise = run_cli(["study", "compare", str(spec), "--noise"], tmp_path)
    assert noise.returncode == 0 and all(
        name in noise.stdout for name in ("first", "interpolated", "sustained", "fitted")
    )

    # The analysis reads the same stores: race seeds merged into their configuration, confirm arms beside.
    from analysis.data import load_study

    data = load_study("toy", f"sqlite:///{tmp_path / 'mlflow.db'}")
    configs = data.configs()
    selection = configs[configs["arm"] != "confirm"]
    assert set(selection["seeds"]) == {3} and sorted(configs.loc[configs["arm"] == "confirm", "seeds"]) == [2, 2]
    assert {"ci_low", "ci_high", "ratio_to_baseline", "verdict"} <= set(configs.columns)


def test_confirm_before_any_trial_is_a_one_line_error(tmp_path):
    spec = toy_spec(tmp_path)
    run = run_cli(["study", "confirm", str(spec)], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "study" in run.stderr


@pytest.mark.slow
def test_sigterm_to_confirm_ends_its_running_trial_as_failed_so_the_study_packs(tmp_path):
    # SIGTERM used to kill `study confirm` outright: its trial stayed RUNNING for good (it has no heartbeat to go
    # stale), and `study pack` refused the study.
    spec = toy_spec(tmp_path, n_trials=2)
    assert run_cli(["study", "run", str(spec)], tmp_path).returncode == 0
    # the confirmation's runs long enough to be stopped in flight (the stores and the study unchanged)
    long = {**TOY, "budget": {"compute_units": None, "steps": 5000}}
    spec = toy_spec(tmp_path, n_trials=2, base={k: v for k, v in long.items() if k != "threads"})
    err_path = tmp_path / "confirm.err"
    with open(tmp_path / "confirm.out", "w") as out, open(err_path, "w") as err:
        confirm = start_cli(
            ["study", "confirm", str(spec), "--top", "1", "--seeds", "2"],
            tmp_path,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    deadline, running = time.monotonic() + 180, []
    while not running and time.monotonic() < deadline and confirm.poll() is None:
        time.sleep(0.5)
        running = [t for t in _study(tmp_path).get_trials(states=(TrialState.RUNNING,)) if t.user_attrs.get("arm")]
    assert running, f"no confirm trial ran (exit {confirm.poll()}):\n{err_path.read_text()[-3000:]}"
    confirm.send_signal(signal.SIGTERM)
    confirm.wait(timeout=120)
    printed = err_path.read_text()
    assert confirm.returncode == 130, printed[-3000:]
    assert "Traceback" not in printed
    assert _study(tmp_path).trials[running[0].number].state == TrialState.FAIL
    packed = run_cli(["study", "pack", str(spec)], tmp_path)
    assert packed.returncode == 0, packed.stderr
