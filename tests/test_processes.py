"""workbench.processes: spawned children, a process confined to its devices, process trees killed to the last
grandchild, a set of processes stopped whatever state they are in."""

import os
import subprocess
import sys
import time

import pytest

from workbench import processes

CHILD_OF_CHILD = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie, killed and waiting for its parent to reap it, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process trees are read from Linux's /proc")
def test_kill_tree_kills_a_child_of_a_child():
    parent = subprocess.Popen([sys.executable, "-c", CHILD_OF_CHILD])
    try:
        deadline = time.monotonic() + 30
        while not processes.descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (grandchild,) = processes.descendants(parent.pid)
        assert processes.resident_mib(parent.pid) > 0
        processes.kill_tree(parent.pid)
        assert parent.wait(timeout=10) == -9
        deadline = time.monotonic() + 10
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)
    finally:
        parent.kill()


def _confined(queue, kind, devices, visible, threads) -> None:
    processes.confine(kind, devices, visible, threads)
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    queue.put((os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("OMP_NUM_THREADS"), affinity))


def _run_confined(*args):
    queue = processes.SPAWN.Queue()
    proc = processes.SPAWN.Process(target=_confined, args=(queue, *args))
    proc.start()
    try:
        return queue.get(timeout=60)
    finally:
        proc.join(10)


def test_confine_sets_a_spawned_process_s_gpus_and_threads(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    visible, threads, _ = _run_confined("cuda", (0, 1), "4,5", 3)
    assert (visible, threads) == ("4,5", "3")
    visible, _, _ = _run_confined("cuda", (0, 1, 2, 3), None, None)  # one slot of all the worker's GPUs
    assert visible == "4,5,6,7"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API here")
def test_confine_pins_a_process_to_its_cores():
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    _, _, affinity = _run_confined("cpu", (core,), None, None)
    assert affinity == [core] and os.sched_getaffinity(0) == before  # the child pinned, its parent as it was


def _threads_after_torch(queue) -> None:
    import torch

    processes.confine(None, threads=2)
    queue.put((torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")))


def test_confine_sets_the_thread_count_of_a_process_where_torch_has_started():
    queue = processes.SPAWN.Queue()
    proc = processes.SPAWN.Process(target=_threads_after_torch, args=(queue,))
    proc.start()
    try:
        assert queue.get(timeout=120) == (2, "2")
    finally:
        proc.join(10)


def _sleep_ignoring_sigterm(ready) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


def _exit_soon(ready) -> None:
    ready.set()
    time.sleep(0.1)


def test_stop_waits_for_those_that_exit_and_kills_the_rest():
    # each child says when it is running (a spawned child can take seconds to start on a loaded machine, and
    # SIGTERM before the handler is set would end the stubborn one early)
    ready = [processes.SPAWN.Event(), processes.SPAWN.Event()]
    stubborn = processes.SPAWN.Process(target=_sleep_ignoring_sigterm, args=(ready[0],), daemon=True)
    polite = processes.SPAWN.Process(target=_exit_soon, args=(ready[1],), daemon=True)
    stubborn.start(), polite.start()
    assert all(e.wait(60) for e in ready), "a child did not start within 60 s"
    looks = []
    t0 = time.monotonic()
    processes.stop([polite, stubborn], wait_s=3.0, terminate_s=0.2, while_waiting=lambda: looks.append(1))
    assert time.monotonic() - t0 < 10 and looks
    assert polite.exitcode == 0 and stubborn.exitcode == -9  # SIGTERM ignored: killed
