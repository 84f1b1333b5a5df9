"""Optuna storages: the embedded SQLite default works across processes (WAL), and a bad storage stops with one
line that names it without its password."""

import sqlite3

import optuna
import pytest
from support.servers import free_port

from workbench.config import ConfigError
from workbench.study.storage import open_storage


def test_sqlite_storage_is_created_in_wal_mode(tmp_path):
    path = tmp_path / "sub" / "optuna.db"
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="s", storage=storage)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_storage_that_is_not_a_url_names_the_field():
    with pytest.raises(ConfigError, match="^storage: not a storage URL"):
        open_storage("optuna.db")


def test_an_unreachable_server_is_one_line_without_the_password():
    url = f"postgresql+psycopg2://alice:s3cret@127.0.0.1:{free_port()}/optuna"
    with pytest.raises(ConfigError) as err:
        open_storage(url)
    message = str(err.value)
    assert message.startswith("storage: cannot open postgresql+psycopg2://alice:***@127.0.0.1")
    assert "s3cret" not in message and "\n" not in message
