"""Real servers for the scale-out tests: a throwaway PostgreSQL cluster and an MLflow tracking server, both on 127.0.0.1.

On a developer machine without PostgreSQL the tests that need it skip; under CI (`CI=true`) they fail instead,
since `.ci/run` installs the server.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest


def require(condition: bool, what: str) -> None:
    """Skip when a real component is missing, except under CI where that is a failure."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is required under CI (.ci/run installs it)")
    pytest.skip(f"{what} not available")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:  # initdb refuses root
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@contextlib.contextmanager
def postgres_server(databases=("optuna", "mlflow")):
    """Start a PostgreSQL cluster on 127.0.0.1 (trust auth); yields {"port", "url": {db: sqlalchemy URL}}."""
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    require(initdb is not None and pg_ctl is not None, "PostgreSQL server (initdb, pg_ctl)")
    root = Path(tempfile.mkdtemp(prefix="wb-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres"]), check=True, capture_output=True
    )
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=200"
    subprocess.run(
        _as_postgres([pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"]),
        check=True,
        capture_output=True,
    )
    try:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            for db in databases:
                cur.execute(f"CREATE DATABASE {db}")
        conn.close()

        def restart(down_s: float = 0.0) -> None:
            """Stop the server (fast: open connections are cut), wait `down_s`, start it again on its port."""
            subprocess.run(
                _as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]), check=True, capture_output=True
            )
            time.sleep(down_s)
            subprocess.run(
                _as_postgres([pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"]),
                check=True,
                capture_output=True,
            )

        yield {
            "port": port,
            "url": {db: f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{db}" for db in databases},
            "restart": restart,
        }
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, timeout: float = 120, port: int | None = None):
    """An MLflow tracking server on 127.0.0.1 (one worker, no job runner), on `port` (default: a free one: a server
    stopped and started again on its port is the same server to its clients); yields its http URI."""
    port = port or free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--backend-store-uri",
            backend_uri,
            "--artifacts-destination",
            str(artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            time.sleep(0.5)
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
