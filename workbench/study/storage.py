"""Optuna storages: the embedded SQLite default, PostgreSQL for scale-out, journal files.

- `sqlite:///PATH` (default `./optuna.db`): put in WAL mode with a long busy timeout, so a few local worker
  processes share it without "database is locked"; heartbeats detect killed workers. Every transaction begins
  IMMEDIATE (`serialize_sqlite`): Optuna claims a waiting trial by reading its state and then writing RUNNING, and
  SQLite ignores the row lock it asks for, so two workers starting together both claimed the same enqueued trial
  and trained it twice (measured: both workers of a fresh study ran trial 0, seed after seed).
- `postgresql+psycopg2://user:pass@host:port/db`: any number of workers on any machines; heartbeats too.
- `journal:///PATH`: Optuna's JournalFileBackend (safe for local processes) but without heartbeats, so a
  SIGKILLed worker's trial stays RUNNING until `workbench study status --fail-stale` or a later run marks it.

URLs are printed and logged only through `redact_url` (no passwords).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import optuna

from workbench import faults
from workbench.config import ConfigError
from workbench.tracking import redact_url

DEFAULT_HEARTBEAT = 10
DEFAULT_GRACE = 30
OUTAGE_S = 120.0
"""How long a storage call waits out a database that does not answer (a PostgreSQL restart, a failover) before
the error is raised."""
log = logging.getLogger(__name__)


def _patient(method, outage_s: float):
    """`method`, each call retried with back-off (0.5 s doubling to 8 s) while the database does not answer
    (`faults.lost_connection`), up to `outage_s`; a statement the database refuses is raised at once."""

    def warn(err: BaseException) -> None:
        log.warning(
            f"storage: the database did not answer ({faults.one_line(err)}); trying again for up to {outage_s:g} s"
        )

    return faults.patiently(method, faults.lost_connection, outage_s, pause_s=0.5, max_pause_s=8.0, warn=warn)


def _heartbeat_in_one_line(record):
    """`record_heartbeat`, run by Optuna's heartbeat thread, where an error would print a thread traceback beside the
    study's own one-line stop (a full disk, a database gone past `OUTAGE_S`): the missed beat is one warning line, and
    the trial's own next write meets the same error and stops the study in one line."""

    @functools.wraps(record)
    def call(*args, **kwargs):
        try:
            return record(*args, **kwargs)
        except Exception as err:
            log.warning(f"storage: a heartbeat was not recorded ({faults.one_line(err)})")

    return call


class PatientRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose every storage call waits out a database restart (`OUTAGE_S`): each worker survives
    a PostgreSQL restart mid-study (its pooled connections are checked before use, `pool_pre_ping`, and a call cut
    off by the restart is made again). A write the database committed just as the connection dropped is made again
    too; Optuna's writes are states and values set to the same thing, so that is the same write."""

    def __init__(self, *args, outage_s: float = OUTAGE_S, **kwargs):
        super().__init__(*args, **kwargs)
        self._outage_s = outage_s
        self._silent: dict[int, float] = {}
        self._patch()

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's stale trials (a heartbeat older than the grace period) and the running trials that never had a
        heartbeat and still have none a grace period after this process first saw them. Optuna skips those: a
        worker whose first heartbeat could not be written (the disk filled as its trial started) leaves a trial
        RUNNING for good, and a resumed study waits for it forever (measured: `study run` hung past 900 s). A live
        worker writes its first heartbeat as its trial starts, so only a dead one's trial stays silent that long.
        (Seen, not started: the time is this process's clock, never compared with another machine's.)"""
        stale = super()._get_stale_trial_ids(study_id)
        grace = self.grace_period if self.grace_period is not None else 2 * (self.heartbeat_interval or 0)
        now, silent = time.monotonic(), self._never_beat(study_id)
        self._silent = {t: self._silent.get(t, now) for t in silent}
        return stale + [t for t, seen in self._silent.items() if now - seen > grace and t not in stale]

    def _never_beat(self, study_id: int) -> list[int]:
        """The study's running trials without a heartbeat row."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(self.scoped_session) as session:
            rows = (
                session.query(models.TrialModel.trial_id)
                .outerjoin(
                    models.TrialHeartbeatModel, models.TrialHeartbeatModel.trial_id == models.TrialModel.trial_id
                )
                .filter(models.TrialModel.study_id == study_id)
                .filter(models.TrialModel.state == optuna.trial.TrialState.RUNNING)
                .filter(models.TrialHeartbeatModel.trial_heartbeat_id.is_(None))
                .all()
            )
        return [r[0] for r in rows]

    def _patch(self) -> None:
        for name in PATIENT:
            if hasattr(type(self), name):
                setattr(self, name, _patient(getattr(type(self), name).__get__(self), self._outage_s))
        self.record_heartbeat = _heartbeat_in_one_line(self.record_heartbeat)

    def __getstate__(self):
        state = super().__getstate__()
        for name in PATIENT:
            state.pop(name, None)
        return state

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        self._silent = {}
        self._patch()


def awaiting_silent(study: optuna.Study) -> bool:
    """Whether a running trial that never had a heartbeat is still within its grace period (`fail_stale_trials`
    fails it once that has passed): a worker waits that out before it calls the study done, so that a finished
    study holds no trial left RUNNING by a worker that died as the trial started."""
    storage = getattr(study._storage, "_backend", study._storage)
    return bool(getattr(storage, "_silent", None))


PATIENT = [n for n in dir(optuna.storages.BaseStorage) if not n.startswith("_") and n != "remove_session"] + [
    "record_heartbeat",
    "_create_new_trial",
    "_get_best_trial_id",
    "_get_stale_trial_ids",
    "_get_trials",
    "_set_trial_param",
]
"""The storage calls Optuna makes (its BaseStorage interface, the heartbeat, and what its cache calls)."""


def default_storage_url() -> str:
    return f"sqlite:///{Path.cwd() / 'optuna.db'}"


def _sqlite_path(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


def prepare_sqlite(path: Path) -> None:
    """Create the file's directory and switch the database to WAL (persistent in the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path, timeout=60) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def serialize_sqlite(engine) -> None:
    """Make every transaction on `engine` (SQLite) take the database's write lock when it begins, so that a read
    and the write that depends on it (claiming a WAITING trial) are one atomic step across processes. The driver's
    own transaction handling is switched off so that SQLAlchemy's `begin` is the one that runs (SQLAlchemy's
    documented recipe for pysqlite); pooled connections are dropped so that every connection gets both hooks."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()


def open_storage(
    url: str,
    heartbeat_interval: int = DEFAULT_HEARTBEAT,
    grace_period: int = DEFAULT_GRACE,
    on_stale_trial: Callable | None = None,
):
    """An Optuna storage for `url`, with heartbeats where the backend supports them."""
    if url.startswith("journal:///"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url[len("journal:///") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    sqlite_path = _sqlite_path(url)
    engine_kwargs: dict = {}
    if sqlite_path is not None:
        prepare_sqlite(sqlite_path)
        engine_kwargs = {"connect_args": {"timeout": 120}}
    elif url.startswith("postgresql"):
        engine_kwargs = {"pool_pre_ping": True}
    elif "://" not in url:
        raise ConfigError(f"storage: not a storage URL: {redact_url(url)}")
    try:
        storage = _patient(PatientRDBStorage, OUTAGE_S)(  # a worker that starts while the database restarts waits
            url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            heartbeat_stale_trial_callback=on_stale_trial,
        )
        if sqlite_path is not None:
            serialize_sqlite(storage.engine)
        return storage
    except Exception as err:  # connection refused, bad driver, bad URL: one clear line, password removed
        detail = faults.one_line(err, limit=None)  # cut once the password is out: no part of it is left
        password = urlsplit(url).password
        if password:
            detail = detail.replace(password, "***")
        raise ConfigError(f"storage: cannot open {redact_url(url)} ({detail[:300]})") from None
