"""`workbench study pack` / `unpack`: a stopped study moved to another place through one file, resumed there, read
the same; refusals in one line (exit 2) with nothing recorded lost."""

from __future__ import annotations

import io
import json
import tarfile

import optuna
import pytest
from mlflow import MlflowClient
from optuna.trial import TrialState

from workbench import tracking
from workbench.config import ConfigError
from workbench.study.pack import Stores, pack, unpack
from support.cli import run_cli
from support.toy import toy_spec


def curves(uri: str, name: str) -> dict[str, list]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`workbench.kind` = 'seed'")
    return {r.info.run_id: tracking.curve_from_history(client, r.info.run_id) for r in runs}


@pytest.mark.slow
def test_a_packed_study_resumes_elsewhere_and_reads_the_same(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    first = toy_spec(here, n_trials=2)
    assert run_cli(["study", "run", str(first)], here).returncode == 0
    out = tmp_path / "toy.tar.xz"
    proc = run_cli(["study", "pack", str(first), "--out", str(out)], here)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {out}" in proc.stdout and "2 complete" in proc.stdout

    second = toy_spec(there, n_trials=3)  # the same study, its stores in another folder
    proc = run_cli(["study", "unpack", str(second), "--from", str(out)], there)
    assert proc.returncode == 0, proc.stderr[-2000:]
    uri_here, uri_there = f"sqlite:///{here / 'mlflow.db'}", f"sqlite:///{there / 'mlflow.db'}"
    before = curves(uri_here, "toy")
    assert before and curves(uri_there, "toy") == before  # every run's evaluations, read against its ledger
    client = MlflowClient(uri_there)
    run_id = next(iter(before))
    assert client.get_run(run_id).info.artifact_uri.startswith((there / "mlruns").resolve().as_uri())
    assert json.loads(open(client.download_artifacts(run_id, tracking.CURVE_ARTIFACT, str(tmp_path))).read())
    assert not client.get_metric_history(run_id, "train/loss")  # a history the analysis does not read: dropped
    assert (
        client.get_run(run_id).data.metrics["train/loss"]
        == MlflowClient(uri_here).get_run(run_id).data.metrics["train/loss"]
    )  # its last value kept

    proc = run_cli(["study", "run", str(second)], there)  # resumes: one more trial, the two packed ones kept
    assert proc.returncode == 0, proc.stderr[-2000:]
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{there / 'optuna.db'}")
    assert len([t for t in study.get_trials() if t.state == TrialState.COMPLETE]) == 3
    recorded = len(study.get_trials())

    again = run_cli(["study", "unpack", str(second), "--from", str(out)], there)  # never over a store
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        f"workbench: error: study unpack: {there / 'optuna.db'} exists; unpack writes only where the study has no"
        " store (move it away to restore the pack)"
    ]
    assert len(optuna.load_study(study_name="toy", storage=f"sqlite:///{there / 'optuna.db'}").get_trials()) == recorded


def test_pack_refuses_a_running_study_and_unpack_a_file_that_is_not_a_pack(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="toy", storage=storage)
    study.ask()  # a trial RUNNING
    (tmp_path / "mlflow.db").touch()
    stores = Stores.of(storage, f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(ConfigError, match=r"^study pack: study toy has trials running \(0\): stop it first"):
        pack(study, stores, tmp_path / "toy.tar.xz")
    assert not (tmp_path / "toy.tar.xz").exists()

    evil = tmp_path / "evil.tar.xz"
    with tarfile.open(evil, "w:xz") as tar:
        data = b"{}"
        info = tarfile.TarInfo("../outside.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    elsewhere = Stores.of(f"sqlite:///{tmp_path / 'b' / 'optuna.db'}", f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}")
    with pytest.raises(ConfigError, match=r"^study unpack: '../outside.txt' is not part of a study pack$"):
        unpack(evil, "toy", elsewhere)
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ConfigError, match=r"^storage: pack and unpack move SQLite files"):
        Stores.of("postgresql+psycopg2://u:secret@127.0.0.1/db", "sqlite:///m.db")
