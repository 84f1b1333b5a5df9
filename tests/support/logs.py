"""Capture what the workbench logs (its loggers may not propagate to pytest's root handler after a CLI run)."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator


@contextlib.contextmanager
def captured_logs(name: str = "workbench") -> Iterator[list[logging.LogRecord]]:
    """Every record logged under `name` (DEBUG and up) while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
