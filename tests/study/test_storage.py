"""Optuna storages: the embedded SQLite default works across processes (WAL), and a bad storage stops with one
line that names it without its password."""

import sqlite3
import time

import optuna
import pytest
from support.servers import free_port

from workbench.config import ConfigError
from workbench.study.storage import PatientRDBStorage, open_storage


def test_sqlite_storage_is_created_in_wal_mode(tmp_path):
    path = tmp_path / "sub" / "optuna.db"
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="s", storage=storage)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_storage_that_is_not_a_url_names_the_field():
    with pytest.raises(ConfigError, match="^storage: not a storage URL"):
        open_storage("optuna.db")


def test_an_unreachable_server_is_one_line_without_the_password(monkeypatch):
    from workbench.study import storage

    # the message after the wait, not the wait: a server that never comes back is given 3 s here, not OUTAGE_S
    monkeypatch.setattr(storage, "OUTAGE_S", 3.0)
    url = f"postgresql+psycopg2://alice:s3cret@127.0.0.1:{free_port()}/optuna"
    with pytest.raises(ConfigError) as err:
        open_storage(url)
    message = str(err.value)
    assert message.startswith("storage: cannot open postgresql+psycopg2://alice:***@127.0.0.1")
    assert "s3cret" not in message and "\n" not in message


CLAIM = """
import sys, time, optuna
from workbench.study.storage import PatientRDBStorage, open_storage
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, start, plain = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "plain"
storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}}) if plain else open_storage(url)
study = optuna.load_study(study_name="s", storage=storage)
while time.time() < start:
    pass
print(" ".join(str(study.ask().number) for _ in range(5)))
"""


def _claims(tmp_path, plain: bool) -> list[int]:
    import subprocess
    import sys
    import time

    url = f"sqlite:///{tmp_path / ('plain' if plain else 'ours')}.db"
    study = optuna.create_study(study_name="s", storage=open_storage(url))
    for i in range(20):
        study.enqueue_trial({"i": i})  # enqueued trials: claimed by reading WAITING, then writing RUNNING
    start = time.time() + 8  # every process loaded and waiting, then all claim at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM, url, str(start), "plain" if plain else "ours"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    return [int(n) for p in procs for n in p.communicate(timeout=120)[0].split()]


def test_workers_claiming_enqueued_trials_at_once_never_get_the_same_one(tmp_path):
    claimed = _claims(tmp_path, plain=False)
    assert len(claimed) == 20 and len(set(claimed)) == 20, sorted(claimed)


def test_a_heartbeat_that_cannot_be_written_is_one_warning_line_not_a_thread_traceback(tmp_path, monkeypatch, caplog):
    def full(self, trial_id):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(optuna.storages.RDBStorage, "record_heartbeat", full)
    storage = PatientRDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=10)
    study = optuna.create_study(study_name="s", storage=storage)
    trial_id = study.ask()._trial_id
    storage.record_heartbeat(trial_id)  # raises nothing: Optuna's heartbeat thread would print its traceback
    assert [r.getMessage() for r in caplog.records if r.name == "workbench.study.storage"] == [
        "storage: a heartbeat was not recorded (database or disk is full)"
    ]


def test_a_trial_that_never_had_a_heartbeat_is_failed_a_grace_period_after_it_was_first_seen(tmp_path):
    """Its worker died before its first heartbeat was written (the disk filled as the trial started): Optuna's own
    check skips a trial without a heartbeat, so it stayed RUNNING and a resumed study waited for it for good."""
    storage = open_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(study_name="s", storage=storage)
    silent = study.ask()  # RUNNING, no heartbeat: `ask` starts none
    beating = study.ask()
    storage.record_heartbeat(beating._trial_id)

    optuna.storages.fail_stale_trials(study)  # first seen silent: not yet
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.RUNNING] * 2
    time.sleep(1.2)
    storage.record_heartbeat(beating._trial_id)  # still alive
    optuna.storages.fail_stale_trials(study)
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {silent.number: optuna.trial.TrialState.FAIL, beating.number: optuna.trial.TrialState.RUNNING}
