"""Run the real `workbench` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(
    args: list[str], cwd, env: dict[str, str] | None = None, timeout: float = 900, **kwargs
) -> subprocess.CompletedProcess:
    """`python -m workbench.cli ARGS` in `cwd` with `env` added to the environment; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        **kwargs,
    )


def start_cli(args: list[str], cwd, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """The same command started in the background (to interrupt or kill it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *args], cwd=cwd, env={**os.environ, **(env or {})}, **kwargs
    )
