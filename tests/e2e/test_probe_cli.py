"""`workbench probe` through the real CLI into a real MLflow store."""

import json
import re

import pytest
import yaml
from mlflow import MlflowClient

from support.cli import run_cli
from support.toy import toy_dict


@pytest.mark.slow
def test_probe_cli_measures_logs_and_predicts_or_says_why_not(tmp_path):
    over = toy_dict()
    over.pop("budget")
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(over))
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    proc = run_cli(
        [
            "probe",
            "--config",
            str(config),
            "--x",
            "4",
            "--steps",
            "14",
            "--every",
            "2",
            "--sketch",
            "256",
            "--tracking-uri",
            uri,
            "--json",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1  # stdout: the JSON only
    out = json.loads(proc.stdout)
    assert out["probes"] >= 3 and out["noise"] and "predicted" in out
    # progress on stderr, with --json too: the plan, each probe's gradients, the reading of them
    err = proc.stderr.splitlines()
    assert any(line.startswith("probe: 14 steps;") and "gradients of one rollout in all" in line for line in err)
    assert (
        sum(bool(re.match(r"probe \d+/\d+ \(step \d+\).*: \d+ rollout gradients in ", line)) for line in err)
        == out["probes"]
    )
    assert any(line.startswith("probe: reading sigma²(tau)") for line in err) and any(
        line.startswith("probe: read in ") for line in err
    )
    assert "Warning" not in proc.stderr  # no third-party warning reaches the user
    p = out["predicted"]
    assert "refused" in p or (p["x"] >= p["y"] >= 1 and p["capacity"] >= 16)
    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.experiment_id and {"probe/mu", "probe/rho", "probe/group_correlation"} <= set(run.data.metrics)


@pytest.mark.slow
def test_probe_cli_with_an_lr_sweep_runs_on_policy_at_several_lrs_and_predicts_one(tmp_path):
    over = toy_dict(lr=1e-5)  # the toy's 1e-4 is past its best: accuracy falls within a few steps
    over.pop("budget")
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(over))
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    proc = run_cli(
        [
            "probe",
            "--config",
            str(config),
            "--x",
            "4",
            "--steps",
            "14",
            "--every",
            "2",
            "--sketch",
            "256",
            "--lr-sweep",
            "--target",
            "0.19",
            "--sweep-units",
            "8",
            "--tracking-uri",
            uri,
            "--json",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout.strip().splitlines()[-1])["predicted"]
    sweep = p["lr_sweep"]  # run whether or not the probe's gradients predicted a point
    lrs = [q["lr"] for q in sweep]
    assert len(sweep) >= 3 and lrs == sorted(lrs) and {1e-5, 2e-5, 4e-5} <= {round(lr, 10) for lr in lrs}
    # the first run, at the trial's lr, gets the whole budget; the runs after it 1.5x the cheapest so far, at most that
    first = next(q for q in sweep if round(q["lr"], 10) == 1e-5)
    assert first["budget"] == 8 and all(0 < q["budget"] <= 8 for q in sweep)
    assert "lr" in p["lr_optimum"] or "refused" in p["lr_optimum"]
    if "x" in p:
        assert p["lr"] > 0 and p["lr_source"]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("probe").experiment_id])
    swept = {r.info.run_id: r for r in runs if r.info.run_id in {q["run_id"] for q in sweep}}
    assert len(swept) == len(sweep) and all(r.info.status == "FINISHED" for r in swept.values())
    assert {float(r.data.params["lr"]) for r in swept.values()} == set(lrs)


def test_probe_cli_rejects_bad_input_with_exit_2(tmp_path):
    proc = run_cli(["probe", "--x", "0"], tmp_path)
    assert proc.returncode == 2 and "--x" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli(["probe", "--lr-sweep"], tmp_path)
    assert proc.returncode == 2 and "--target" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
