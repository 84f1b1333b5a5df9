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


_BARS = [True]
"""Whether this process may draw bars at all (`setup_logging`): not a study's slot process, whose worker shares its
terminal with other slots."""


def setup_logging(quiet: bool = False, prefix: str = "", bars: bool = True) -> None:
    """Plain `message` lines on stderr for the workbench's loggers (INFO, or WARNING with `quiet`), each after
    `prefix` (a study's slot process names its slot: the lines of seeds run side by side interleave); `bars`
    False: plain lines even on a terminal."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(prefix.replace("%", "%%") + "%(message)s"))
    for name in PACKAGES:
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(logging.WARNING if quiet else logging.INFO)
        log.propagate = False
    _BARS[0] = bars


def bars_wanted(json_output: bool = False, quiet: bool = False) -> bool:
    """Bars on an interactive terminal only (plain lines in logs, CI and pipes, and in a study's slot processes)."""
    return _BARS[0] and sys.stderr.isatty() and not json_output and not quiet


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
    at least every `every` seconds (default `LINE_EVERY_S`), from a thread; then one line with the time it took.
    The thread speaks after half of `every`: a compile holding the interpreter wakes it late (3 s was seen on 2
    busy cores), and no silence may outlast `every`."""
    every = LINE_EVERY_S if every is None else every
    start, done = time.monotonic(), threading.Event()

    def beat() -> None:
        while not done.wait(0.5 * every):
            logger.info(f"{what}: {time.monotonic() - start:.0f} s so far")

    thread = threading.Thread(target=beat, name="workbench-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    logger.info(f"{what}: done in {time.monotonic() - start:.0f} s")


class Activity:
    """What a trial is doing right now, for `watch`: a phase (`begin`: generating, training, evaluating ...) and its
    count so far (`advance`: tokens decoded, micro-batches trained, prompts evaluated). Set from the hot loops by plain
    attribute writes (no lock: a reader may see a count one update old, which a progress line can afford)."""

    def __init__(self):
        self.phase, self.unit, self.done, self.total = "", "", 0, None
        self.since = time.monotonic()

    def begin(self, phase: str, unit: str = "", total: int | None = None) -> None:
        self.phase, self.unit, self.done, self.total, self.since = phase, unit, 0, total, time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n

    def describe(self) -> str:
        """`generating: 2,304 tokens (192 tokens/s), 12 s`."""
        took = time.monotonic() - self.since
        if not self.unit:
            return f"{self.phase}, {took:.0f} s"
        of = f"/{self.total:,}" if self.total is not None else ""
        rate = f" ({self.done / took:,.0f} {self.unit}/s)" if took > 0 and self.total is None and self.done else ""
        return f"{self.phase}: {self.done:,}{of} {self.unit}{rate}, {took:.0f} s"


ACTIVITY = Activity()
"""The process's current activity (one trial at a time runs in a process)."""


class _LastLine(logging.Filter):
    """Notes when the workbench last printed a line."""

    def __init__(self):
        super().__init__()
        self.at = time.monotonic()

    def filter(self, record: logging.LogRecord) -> bool:
        self.at = time.monotonic()
        return True


@contextmanager
def watch(logger: logging.Logger, every: float | None = None) -> Iterator[None]:
    """While the block runs (a trial), a line from `ACTIVITY` on `logger` whenever the workbench printed nothing for
    `every` seconds (default `LINE_EVERY_S`): a slow step is told from a hung one, in every phase."""
    every = LINE_EVERY_S if every is None else every
    last, done = _LastLine(), threading.Event()
    handlers = {h for name in PACKAGES for h in logging.getLogger(name).handlers}
    for h in handlers:
        h.addFilter(last)

    def beat() -> None:  # looks twice a second, speaks after half of `every`: a wake-up late by up to 5 s of a 10 s
        # period (a compile held the interpreter ~3 s past 80% of it on 2 busy cores) still leaves no silence past `every`
        while not done.wait(min(0.5, every / 4)):
            if time.monotonic() - last.at >= 0.5 * every and ACTIVITY.phase:
                last.at = time.monotonic()  # where no handler prints (a library caller), one line per period
                logger.info(ACTIVITY.describe())

    thread = threading.Thread(target=beat, name="workbench-activity", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        for h in handlers:
            h.removeFilter(last)
        ACTIVITY.begin("")
