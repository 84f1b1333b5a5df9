"""studies/trl_quickstart.yaml through the real CLI on TRL's GRPOTrainer (`trainer.kind: trl`), shrunk to a few
steps: the baseline on TRL's stock trainer, uniform replay at y 2 on the workbench's plug-in, the study analysed and
reported like any other."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState

from support.cli import run_cli
from support.servers import require

STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.mark.slow
def test_the_trl_quickstart_runs_end_to_end_and_is_reported(tmp_path):
    require(importlib.util.find_spec("trl") is not None, "TRL (the trl extra)")
    spec = yaml.safe_load((STUDIES / "trl_quickstart.yaml").read_text())
    spec["base"]["budget"] = {"compute_units": 4}
    spec["base"]["eval"]["every_units"] = 2
    spec["base"]["batch_size"], spec["base"]["group_size"] = 32, 8
    spec.update(
        seeds=1,
        lr_sweep=None,
        n_trials=2,
        storage=f"sqlite:///{tmp_path / 'optuna.db'}",
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
    )
    path = tmp_path / "trl_quickstart.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False))
    proc = run_cli(["study", "run", str(path)], tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = optuna.load_study(study_name="trl_quickstart", storage=spec["storage"]).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    client = MlflowClient(spec["tracking_uri"])
    exp = client.get_experiment_by_name("trl_quickstart")
    seeds = client.search_runs([exp.experiment_id], filter_string="tags.`workbench.kind` = 'seed'")
    trainers = sorted(r.data.tags["workbench.trl_trainer"] for r in seeds)
    assert trainers == ["LedgerGRPOTrainer", "ReplayGRPOTrainer"]  # on-policy stock TRL; y 2 through the plug-in
    replayed = next(r for r in seeds if r.data.tags["workbench.trl_trainer"] == "ReplayGRPOTrainer")
    assert replayed.data.metrics["final/replay_ratio"] == pytest.approx(2.0, rel=0.1)

    out = tmp_path / "report"
    report = run_cli(["report", str(path), "--bootstrap", "5", "--out", str(out)], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    with open(out / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    assert "on-policy baseline (trial 0)" in (out / "report.md").read_text()
