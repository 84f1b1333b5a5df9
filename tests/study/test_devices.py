"""`--devices`: parsing, the split among workers, and what a worker process confines itself to."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workbench.config import ConfigError
from workbench.study import devices
from workbench.study.devices import parse_devices, per_trial, split_devices, worker_env


@pytest.mark.parametrize(
    "text, ids",
    [
        ("0,1,2,3", [0, 1, 2, 3]),
        ("0-3", [0, 1, 2, 3]),
        ("4-5,0,2-2", [4, 5, 0, 2]),
        (" 7 ", [7]),
    ],
)
def test_parse_devices(text, ids):
    assert parse_devices(text) == ids


@pytest.mark.parametrize(
    "text, message",
    [
        ("0,0", "0 listed twice"),
        ("0-2,1", "1 listed twice"),
        ("3-1", "runs backwards"),
        ("a", "expected ids like"),
        ("-1", "expected ids like"),
        ("0,,1", "expected ids like"),
    ],
)
def test_bad_devices_are_one_line_errors_naming_the_option(text, message):
    with pytest.raises(ConfigError) as err:
        parse_devices(text)
    assert str(err.value).startswith("--devices: ") and message in str(err.value) and "\n" not in str(err.value)


def test_one_device_per_synchronous_trial_and_w_plus_t_per_asynchronous_one():
    assert per_trial({}) == 1
    assert per_trial({"pipeline": {"mode": "sync", "generators": 3}}) == 1
    assert per_trial({"pipeline": {"mode": "async"}}) == 2
    assert per_trial({"pipeline": {"mode": "async", "generators": 6, "trainers": 2}}) == 8


def test_split_gives_each_worker_its_own_disjoint_group():
    assert split_devices(list(range(8)), 8, 1) == [[i] for i in range(8)]
    assert split_devices(list(range(8)), 2, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_devices([0, 1, 2, 3, 4], 2, 1) == [[0, 1], [2, 3]]  # the spare device is left unused
    groups = split_devices(list(range(16)), 4, 3)
    assert all(len(g) == 4 for g in groups) and len({d for g in groups for d in g}) == 16


def test_too_few_devices_is_one_line_with_the_numbers():
    with pytest.raises(ConfigError) as err:
        split_devices([0], 2, 1)
    assert str(err.value) == "--devices: 1 device(s) for 2 worker(s) x 1 (1 per trial: one); give at least 2"
    with pytest.raises(ConfigError) as err:
        split_devices([0, 1, 2], 2, 2)
    assert "x 2 (2 per trial: W + T); give at least 4" in str(err.value)


def test_worker_env_sets_the_thread_count_and_leaves_the_gpus_to_the_worker():
    assert worker_env([2, 3], "cuda") == {}  # the worker counts its ids within the mask it inherits (`apply`)
    assert worker_env([0, 1, 2], "cpu") == {"OMP_NUM_THREADS": "3"}


@pytest.mark.parametrize(
    "inherited, ids, names",
    [
        (None, [2, 3], "2,3"),  # no mask: CUDA's own indices
        ("4,5,6,7", [0, 1], "4,5"),  # a scheduler's mask: indices count within it
        ("4,5,6,7", [3], "7"),
        ("GPU-aa, GPU-bb", [1], "GPU-bb"),  # UUIDs, as Slurm and Kubernetes may give them
    ],
)
def test_gpu_ids_count_within_the_inherited_cuda_visible_devices(monkeypatch, inherited, ids, names):
    monkeypatch.setattr(devices, "_INHERITED", {"value": inherited})
    assert devices.gpu_names(ids) == names
    assert devices.describe(ids, "cuda") == {"kind": "cuda", "devices": ids, "visible": names}


def test_gpu_ids_beyond_the_inherited_mask_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(devices, "_INHERITED", {"value": "4,5"})
    with pytest.raises(ConfigError) as err:
        devices.gpu_names([1, 2])
    assert str(err.value) == (
        "--devices: 2 beyond the 2 GPU(s) this process may use (CUDA_VISIBLE_DEVICES=4,5; --devices counts within it)"
    )


def _apply_in_child(ids: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = (
        "import json, os; from workbench.study.devices import apply; "
        f"seen = apply([{ids}]); print(json.dumps(seen)); print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is a Linux API")
@pytest.mark.all_cores(alone=False)  # core 0, whichever xdist worker runs it
def test_apply_on_a_cpu_pins_the_process_to_its_cores():
    """In a fresh process (as a worker is): pinned to core 0; an inherited CUDA_VISIBLE_DEVICES naming one GPU
    still names it (a CPU build leaves it alone; a CUDA build maps id 0 to it, and sees no GPU here)."""
    import json

    proc = _apply_in_child("0", {"CUDA_VISIBLE_DEVICES": "5"})
    assert proc.returncode == 0, proc.stderr
    seen, visible = proc.stdout.strip().splitlines()
    seen = json.loads(seen)
    assert seen["kind"] == "cpu" and seen["devices"] == [0] and seen["affinity"] == [0]
    assert visible == "5"
    assert seen["pid"] != os.getpid()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is a Linux API")
def test_apply_refuses_a_core_the_process_may_not_use():
    proc = _apply_in_child("10000")
    assert proc.returncode != 0 and "--devices: core(s) 10000 not available here" in proc.stderr
