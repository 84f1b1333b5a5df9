import os
import platform
import subprocess
import sys

import pytest

PROBE = "from workbench.backends.allocator import keep_freed_memory as k; print(k(), k())"


def _probe(**env) -> str:
    clean = {
        key: value for key, value in os.environ.items() if not key.startswith("MALLOC_") and key != "WORKBENCH_MALLOC"
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, check=True, capture_output=True, text=True
    ).stdout.split()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_thresholds_are_raised_once_per_process():
    assert _probe() == ["True", "True"]


def test_the_users_own_allocator_settings_are_left_alone():
    assert _probe(WORKBENCH_MALLOC="default") == ["False", "False"]
    assert _probe(MALLOC_TRIM_THRESHOLD_="1000") == ["False", "False"]
