"""Progress of the analysis's long phases (`workbench report` fits a model hundreds of times): a log line when a
phase starts and when it ends, and over the refits a bar on a terminal or, off one, a line every few seconds
(`workbench.progress`)."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, TypeVar

from workbench import progress

log = logging.getLogger(__name__)
T = TypeVar("T")


@contextmanager
def phase(what: str) -> Iterator[None]:
    """`what ...` when the phase starts, `what: done in N s` when it ends."""
    start = time.perf_counter()
    log.info("%s ...", what)
    yield
    log.info("%s: done in %.0f s", what, time.perf_counter() - start)


def counted(items: Iterable[T], total: int, what: str, bar: bool) -> Iterator[T]:
    """`items`, counted as they are taken (`workbench.progress.Ticker`: a bar when `bar`, else a line every few
    seconds, and one when done); nothing is said of an empty loop."""
    if total == 0:
        yield from items
        return
    with progress.Ticker(total, what, "fits", bar, log) as ticker:
        for item in items:
            yield item
            ticker.update()
