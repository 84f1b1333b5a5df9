"""workbench.tracking: passwords never leave a URL, and every way a run ends is recorded the same way."""

import pytest

from mlflow import MlflowClient

from workbench import tracking


@pytest.mark.parametrize(
    "url, safe",
    [
        (
            "postgresql+psycopg2://alice:s3cret@db.example:5432/optuna",
            "postgresql+psycopg2://alice:***@db.example:5432/optuna",
        ),
        ("postgresql://bob:p%40ss@host/db", "postgresql://bob:***@host/db"),
        ("http://user:pw@127.0.0.1:5000", "http://user:***@127.0.0.1:5000"),
        ("postgresql://carol@host/db", "postgresql://carol@host/db"),  # no password: unchanged
        ("sqlite:////tmp/optuna.db", "sqlite:////tmp/optuna.db"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_hides_only_the_password(url, safe):
    assert tracking.redact_url(url) == safe
    assert "s3cret" not in tracking.redact_url(url) and "p%40ss" not in tracking.redact_url(url)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One real MLflow SQLite store for this module's runs."""
    return f"sqlite:///{tmp_path_factory.mktemp('tracking') / 'mlflow.db'}"


def test_one_client_per_tracking_uri(store):
    assert tracking.client(store) is tracking.client(store)


def _end(tracking_uri, raise_, stopped=tracking.STATUS_STOPPED):
    run = tracking.RunLogger(tracking_uri, "lifecycle")
    with pytest.raises(BaseException) if raise_ else _nothing():
        with tracking.run_lifecycle(run, stopped=stopped):
            run.log_metrics({"m": 1.0}, step=0)
            if raise_:
                raise raise_
    got = tracking.client(tracking_uri).get_run(run.run_id)
    return got.info.status, got.data.tags.get(tracking.STATUS), got.data.tags.get(tracking.FAILURE), got.data.metrics


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_run_lifecycle_records_every_ending(store):
    status, tag, failure, metrics = _end(store, None)
    assert (status, tag, failure) == ("FINISHED", "finished", None) and metrics == {
        "m": 1.0
    }  # buffered metrics flushed
    assert _end(store, tracking.RunStopped("pruned at step 4"), stopped=tracking.STATUS_PRUNED)[:3] == (
        "FINISHED",
        "pruned",
        "pruned at step 4",
    )
    assert _end(store, KeyboardInterrupt())[:3] == ("KILLED", "interrupted", "KeyboardInterrupt")
    assert _end(store, FloatingPointError("loss is nan"))[:3] == ("FAILED", "failed", "FloatingPointError: loss is nan")


def test_kill_run_tree_ends_a_run_and_its_running_children(store):
    parent = tracking.RunLogger(store, "lifecycle")
    child = tracking.RunLogger(store, "lifecycle", parent_run_id=parent.run_id)
    done = tracking.RunLogger(store, "lifecycle", parent_run_id=parent.run_id)
    done.end(tracking.STATUS_FINISHED)
    tracking.kill_run_tree(store, parent.run_id, "worker lost")
    c = tracking.client(store)
    for run_id in (parent.run_id, child.run_id):
        run = c.get_run(run_id)
        assert run.info.status == "KILLED" and run.data.tags[tracking.FAILURE] == "worker lost"
    assert c.get_run(done.run_id).info.status == "FINISHED"  # a finished child is left as it was


def test_a_sqlite_store_keeps_its_artifacts_beside_the_database_not_in_the_working_directory(tmp_path, monkeypatch):
    store_dir, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    store_dir.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a study run from some other directory (a worktree, a scratch dir)
    run = tracking.RunLogger(f"sqlite:///{store_dir / 'mlflow.db'}", "artifacts-here")
    run.log_text("curve", "curve.json")
    run.end(tracking.STATUS_FINISHED)
    assert list(store_dir.glob("mlruns/artifacts-here/*/artifacts/curve.json"))
    assert not (elsewhere / "mlruns").exists()
    assert tracking.artifact_location("postgresql://u:p@host/db", "x") is None  # a server store decides its own


def test_an_experiment_created_by_another_process_between_the_look_and_the_creation_is_used(tmp_path, monkeypatch):
    """Two seeds side by side start their runs together in an empty store: one creates the experiment, the other
    finds it gone missing at its look and taken at its creation (mlflow's UNIQUE constraint): it uses that one."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = tracking.RunLogger(uri, "workbench")
    looks = []
    real_get = MlflowClient.get_experiment_by_name

    def late(self, name):  # the other process's creation lands between this look and this creation
        looks.append(name)
        return None if len(looks) == 1 else real_get(self, name)

    monkeypatch.setattr(MlflowClient, "get_experiment_by_name", late)
    second = tracking.RunLogger(uri, "workbench")
    runs = MlflowClient(uri).search_runs([real_get(MlflowClient(uri), "workbench").experiment_id])
    assert len(looks) == 2 and {r.info.run_id for r in runs} == {first.run_id, second.run_id}
