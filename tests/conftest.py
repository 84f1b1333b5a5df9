"""Shared fixtures: a per-session cache for the embedded checkpoint, a toy-size trial config, a real MLflow store.

Helpers (toy configs and specs, the CLI runner, real servers) live in `tests/support/`.
"""

from __future__ import annotations

import os

import pytest

from support.cores import pin_worker, pinned, turn, widened

# The vLLM backend's tests run in the vLLM environment only (`make test-vllm`): the main suite never imports vllm.
collect_ignore = [] if os.environ.get("WORKBENCH_VLLM_TESTS") == "1" else ["backends/vllm_engine"]


def pytest_configure(config):
    """Under pytest-xdist each worker keeps to its own cores (tests/support/cores.py), before torch starts in it."""
    pin_worker(os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


@pytest.fixture(autouse=True)
def all_cores(request, tmp_path_factory):
    """A test marked `all_cores` runs on every core of the machine, not its worker's share, while no other worker's
    test runs; `all_cores(alone=False)`: on every core, beside the other workers' tests (a test that only names
    cores, as one that checks `--devices` or pins a child, and times nothing; tests/support/cores.py)."""
    marker = request.node.get_closest_marker("all_cores")
    if not pinned():
        yield
        return
    with turn(
        tmp_path_factory.getbasetemp().parent / "cores.lock", marker is not None and marker.kwargs.get("alone", True)
    ):
        before = widened() if marker is not None else None
        try:
            yield
        finally:
            if before:
                os.sched_setaffinity(0, before)


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """Point the embedded-checkpoint cache at a session directory (tests never touch ~/.cache)."""
    path = tmp_path_factory.mktemp("workbench-cache")
    old = os.environ.get("WORKBENCH_CACHE")
    os.environ["WORKBENCH_CACHE"] = str(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    yield path
    if old is None:
        os.environ.pop("WORKBENCH_CACHE", None)
    else:
        os.environ["WORKBENCH_CACHE"] = old


@pytest.fixture
def tracking_uri(tmp_path):
    """A real MLflow SQLite store in the test's directory."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
