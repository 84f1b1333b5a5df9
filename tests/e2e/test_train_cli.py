"""End to end: `workbench train` through the real CLI into a real MLflow store, asserting on what was logged."""

import json

import mlflow
import pytest
import yaml
from mlflow import MlflowClient

from support.cli import run_cli
from support.toy import toy_dict

STEP_KEYS = [
    "eval/accuracy",
    "eval/pass_at_k",
    "policy/entropy",
    "train/reward_mean",
    "compute/units",
    "compute/gen_tokens",
    "compute/train_tokens",
    "compute/gen_seconds",
    "compute/train_seconds",
    "compute/mu",
    "replay/buffer_size",
    "replay/fresh",
    "replay/age_mean",
    "replay/age_max",
    "replay/uses_mean",
    "offpolicy/ratio_mean",
    "offpolicy/clip_frac",
]


@pytest.mark.slow
def test_train_cli_logs_params_step_and_final_metrics(tmp_path):
    config = tmp_path / "toy.yaml"
    config.write_text(
        yaml.safe_dump(toy_dict(replay={"ratio": 2, "capacity": 48}, budget={"compute_units": None, "steps": 6}))
    )
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    proc = run_cli(
        ["train", "--config", str(config), "--set", "eval.every=3", "--tracking-uri", uri, "--json"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    run_id = last["run_id"]
    assert last["metrics"]["final/steps"] == 6
    assert "step     3" in proc.stderr  # progress lines

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["workbench"], filter_string=f"attributes.run_id = '{run_id}'")
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == "FINISHED"
    assert row["params.replay.ratio"] == "2.0" and row["params.replay.capacity"] == "48"
    assert row["params.replay.horizon"] == "null" and row["params.batch_size"] == "16"
    assert row["params.objective.name"] == "ppo_clip" and row["params.eval.every"] == "3"

    client = MlflowClient(uri)
    for key in STEP_KEYS:
        history = client.get_metric_history(run_id, key)
        assert history, key
    units = client.get_metric_history(run_id, "compute/units")
    train_steps = sorted({m.step for m in client.get_metric_history(run_id, "replay/fresh")})
    assert train_steps == list(range(6))
    evals = sorted(m.step for m in client.get_metric_history(run_id, "eval/accuracy"))
    assert evals == [0, 3, 6]
    assert [m.value for m in sorted(units, key=lambda m: (m.step, m.timestamp))] == sorted(m.value for m in units)
    fresh = {m.step: m.value for m in client.get_metric_history(run_id, "replay/fresh")}
    assert sum(fresh.values()) == client.get_metric_history(run_id, "compute/gen_rollouts")[-1].value
    assert all(m.value >= 1 for m in client.get_metric_history(run_id, "replay/uses_mean"))
    final = client.get_run(run_id).data.metrics
    for key in ("final/accuracy", "final/best_accuracy", "final/compute_units", "final/censored"):
        assert key in final
    assert final["final/compute_units"] == pytest.approx(last["metrics"]["final/compute_units"])
    assert ("final/compute_to_target" in final) == (final["final/censored"] == 0.0)
    hist = json.loads(open(client.download_artifacts(run_id, "replay/age_histogram.json", str(tmp_path))).read())
    assert sum(hist["age_counts"].values()) == 6 * 16


@pytest.mark.slow
def test_train_cli_honours_mlflow_tracking_uri_and_jsonl_tasks(tmp_path):
    data = tmp_path / "problems.jsonl"
    assert run_cli(["sample-data", str(data), "--n", "60"], tmp_path).returncode == 0
    uri = f"sqlite:///{tmp_path / 'env.db'}"
    overrides = ["task.name=jsonl", f"task.path={data}", "task.n_eval=16", "eval.pass_k_prompts=4", "batch_size=8"]
    overrides += ["group_size=4", "budget.compute_units=null", "budget.steps=2", "eval.every=2", "model.hidden_size=32"]
    overrides += ["model.num_layers=1", "model.intermediate_size=64", "model.num_heads=2", "model.warm_start.steps=5"]
    proc = run_cli(
        ["train", "--json", "--quiet", *sum((["--set", o] for o in overrides), [])],
        tmp_path,
        {"MLFLOW_TRACKING_URI": uri},
    )
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]
    assert MlflowClient(uri).get_run(run_id).data.params["task.name"] == "jsonl"
    assert not (tmp_path / "mlflow.db").exists()


def test_malformed_jsonl_exits_2_naming_file_and_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "q", "answer": "#### 1"}\n{oops\n')
    proc = run_cli(
        [
            "train",
            "--set",
            "task.name=jsonl",
            "--set",
            f"task.path={data}",
            "--set",
            "task.n_eval=1",
            "--set",
            "eval.pass_k_prompts=1",
        ],
        tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"workbench: error: {data}:2: invalid JSON (Expecting property name enclosed in double quotes)"
    ]
