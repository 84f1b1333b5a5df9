"""Progress a person can watch: `logging` for lines, a tqdm bar on a terminal.

Every module logs through `logging.getLogger(__name__)`; the command line attaches one handler that prints the
plain message to stderr (`setup_logging`). Bars (a trial's compute, a study's trials) are drawn only when stderr
is a terminal and no `--json` was asked for; elsewhere the same progress arrives as plain log lines.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

PACKAGES = ("workbench", "analysis")


def setup_logging(quiet: bool = False) -> None:
    """Plain `message` lines on stderr for the workbench's loggers (INFO, or WARNING with `quiet`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in PACKAGES:
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(logging.WARNING if quiet else logging.INFO)
        log.propagate = False


def bars_wanted(json_output: bool = False, quiet: bool = False) -> bool:
    """Bars on an interactive terminal only (plain lines in logs, CI and pipes)."""
    return sys.stderr.isatty() and not json_output and not quiet


def bar(total: float | None, desc: str, unit: str, enabled: bool) -> tqdm:
    """A progress bar on stderr (a no-op object when not `enabled`)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, dynamic_ncols=True, leave=True)


@contextmanager
def bar_safe_logging(enabled: bool) -> Iterator[None]:
    """Route the workbench's log lines around a live bar, so neither breaks the other."""
    if not enabled:
        yield
        return
    with logging_redirect_tqdm(loggers=[logging.getLogger(name) for name in PACKAGES]):
        yield
