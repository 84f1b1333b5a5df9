"""Progress a person can watch: `logging` for lines, a tqdm bar on a terminal.

Every module logs through `logging.getLogger(__name__)`; the command line attaches one handler that prints the
plain message to stderr (`setup_logging`). Bars (a trial's compute, a study's trials) are drawn only when stderr
is a terminal and no `--json` was asked for; elsewhere the same progress arrives as plain log lines.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

PACKAGES = ("workbench", "analysis")
LINE_EVERY_S = 10.0
"""Off a terminal, how often a long phase says where it is (a line at most this often, and one when it ends)."""


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


class Ticker:
    """Progress through `total` items of one phase: a tqdm bar on a terminal (`bars`), else a line on `logger` at most
    every `LINE_EVERY_S` seconds; a closing line either way, with the phase's time. `note` (set by `update`) is shown
    after the count: the phase's latest reading (a held-out accuracy, say)."""

    def __init__(self, total: int, desc: str, unit: str, bars: bool, logger: logging.Logger):
        self.total, self.desc, self.unit, self.log = total, desc, unit, logger
        self.done, self.note = 0, ""
        self.start = self.last = time.monotonic()
        self._bar = bar(total, desc, unit, enabled=True) if bars else None

    def update(self, n: int = 1, note: str | None = None) -> None:
        self.done += n
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.update(n)
            if note is not None:
                self._bar.set_postfix_str(note, refresh=False)
        elif time.monotonic() - self.last >= LINE_EVERY_S:
            self.last = time.monotonic()
            self.log.info(
                f"{self.desc}: {self.done}/{self.total} {self.unit}{self._note()}, {self.last - self.start:.0f} s"
            )

    def _note(self) -> str:
        return f", {self.note}" if self.note else ""

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self.log.info(f"{self.desc}: {self.done} {self.unit} in {time.monotonic() - self.start:.1f} s{self._note()}")

    def __enter__(self) -> "Ticker":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        elif self._bar is not None:
            self._bar.close()


@contextmanager
def heartbeat(what: str, logger: logging.Logger, every: float | None = None) -> Iterator[None]:
    """While the block runs a call that reports nothing itself (a compile), a line `what: N s so far` on `logger`
    every `every` seconds (default `LINE_EVERY_S`), from a thread; then one line with the time it took."""
    every = LINE_EVERY_S if every is None else every
    start, done = time.monotonic(), threading.Event()

    def beat() -> None:
        while not done.wait(every):
            logger.info(f"{what}: {time.monotonic() - start:.0f} s so far")

    thread = threading.Thread(target=beat, name="workbench-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    logger.info(f"{what}: done in {time.monotonic() - start:.0f} s")
