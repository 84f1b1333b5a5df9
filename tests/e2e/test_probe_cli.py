"""`workbench probe` through the real CLI into a real MLflow store."""

import json

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
    proc = run_cli(["probe", "--config", str(config), "--x", "4", "--steps", "14", "--every", "2", "--sketch", "256",
                    "--tracking-uri", uri, "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["probes"] >= 3 and out["noise"] and "predicted" in out
    p = out["predicted"]
    assert "refused" in p or (p["x"] >= p["y"] >= 1 and p["capacity"] >= 16)
    run = MlflowClient(uri).get_run(out["run_id"])
    assert run.info.experiment_id and {"probe/mu", "probe/rho", "probe/gamma"} <= set(run.data.metrics)


def test_probe_cli_rejects_bad_input_with_exit_2(tmp_path):
    proc = run_cli(["probe", "--x", "0"], tmp_path)
    assert proc.returncode == 2 and "--x" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
