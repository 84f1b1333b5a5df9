"""Faults, in one place: what kind of error an exception is, an error as one line, and patience with a store that
does not answer (docs/faults.md says what the workbench does about each fault).

- The classifiers (`CLASSIFIERS`): a small ordered set of named tests, each reading an exception and, where it says
  so, what caused it (`chain`: `__cause__`, else `__context__`). A kind may be overruled by another (a full disk is
  never an outage: the study stops, `tracking.StoresFull`). `kinds(err)` names every kind an error is, `classify`
  the first; `disk_full`, `lost_connection`, `unreachable`, `out_of_memory` and `missing` ask for one.
- `one_line(err)`: an error as one line (its message's first line, cut to a limit), for logs and failure reasons.
- `Patience`: a call tried again with a pause (doubling to a cap, or fixed) while a classifier says the error is
  transient, for up to a time limit, with one warning when the outage begins. The tracking run
  (`tracking.RunLogger`) keeps one clock for all its calls; the Optuna storage (`study.storage`) gives each call
  its own (`patiently`).

Nothing of the workbench is imported here; SQLAlchemy and MLflow are never imported (their errors are recognised
by name, or through the module an error's own class was loaded from).
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

# ---------------------------------------------------------------- the classifiers


def chain(err: BaseException | None) -> Iterator[BaseException]:
    """`err`, then what caused it (its `__cause__`, else its `__context__`), and so on; each exception once."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


FULL = ("database or disk is full", "no space left on device", "disk full", "disk quota exceeded")
"""What a full disk's error says (SQLite's SQLITE_FULL, ENOSPC, EDQUOT), lower case."""
FULL_ERRNOS = (28, 122)
"""ENOSPC, EDQUOT."""
OUT_OF_MEMORY_TYPES = ("MemoryError", "OutOfMemoryError")
"""Exceptions that say a process ran out of memory itself (host, or CUDA: `torch.OutOfMemoryError`)."""
TRANSIENT_CODES = {"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"}
"""MLflow error codes that say "not now" rather than "no"."""


def _says_full(err: BaseException) -> bool:
    return getattr(err, "errno", None) in FULL_ERRNOS or any(f in str(err).lower() for f in FULL)


def _says_connection_lost(err: BaseException) -> bool:
    """SQLAlchemy's word that the database did not answer (refused, reset, restarting, locked), not that it refused
    the statement. SQLAlchemy is not imported: an error of its own means it is loaded already."""
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is None:
        return False
    return isinstance(err, (exc.OperationalError, exc.InterfaceError)) or (
        isinstance(err, exc.DBAPIError) and bool(getattr(err, "connection_invalidated", False))
    )


def _says_unreachable(err: BaseException) -> bool:
    """The tracking store did not answer: a connection refused or reset, a timeout, a 5xx after MLflow's own
    retries, a database that is restarting or locked; not that it refused what was sent."""
    if isinstance(err, (ConnectionError, TimeoutError, OSError)):
        return True
    name, text = type(err).__name__, str(err)
    if name == "OperationalError":  # SQLAlchemy: the database went away, or is locked
        return True
    if name == "MlflowException":
        return (
            getattr(err, "error_code", "") in TRANSIENT_CODES
            or "API request to" in text
            or "Max retries exceeded" in text
            or "Connection refused" in text
            or "database is locked" in text
        )
    return False


def _says_out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return type(err).__name__ in OUT_OF_MEMORY_TYPES or "out of memory" in text or "can't allocate memory" in text


def _says_missing(err: BaseException) -> bool:
    return getattr(err, "error_code", "") == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(err).lower()


@dataclass(frozen=True)
class Classifier:
    """One kind of fault: its name, and the test of one exception that says it."""

    name: str
    says: Callable[[BaseException], bool]
    chained: bool = True
    """Whether what caused the error is read too (`chain`: Optuna wraps a failed commit's error in its own);
    False: only the exception raised."""
    unless: tuple[str, ...] = ()
    """Kinds that overrule this one (a full disk is not an outage)."""


DISK_FULL, LOST_CONNECTION, UNREACHABLE = "disk_full", "lost_connection", "unreachable"
OUT_OF_MEMORY, MISSING = "out_of_memory", "missing"

CLASSIFIERS: tuple[Classifier, ...] = (
    Classifier(DISK_FULL, _says_full),
    Classifier(LOST_CONNECTION, _says_connection_lost, unless=(DISK_FULL,)),
    Classifier(UNREACHABLE, _says_unreachable, chained=False, unless=(DISK_FULL,)),
    Classifier(OUT_OF_MEMORY, _says_out_of_memory, chained=False),
    Classifier(MISSING, _says_missing, chained=False),
)
"""In order: `classify` names the first that holds."""
_BY_NAME = {c.name: c for c in CLASSIFIERS}


def is_kind(kind: str, err: BaseException | None) -> bool:
    """Whether `err` is a fault of `kind` (one of `CLASSIFIERS`' names)."""
    c = _BY_NAME[kind]
    if err is None or any(is_kind(other, err) for other in c.unless):
        return False
    return any(c.says(e) for e in (chain(err) if c.chained else (err,)))


def kinds(err: BaseException | None) -> list[str]:
    """Every kind of fault `err` is, in `CLASSIFIERS`' order."""
    return [c.name for c in CLASSIFIERS if is_kind(c.name, err)]


def classify(err: BaseException | None) -> str | None:
    """The first kind of fault `err` is (`CLASSIFIERS`' order); None: none of them (a bug, a refusal)."""
    return next((c.name for c in CLASSIFIERS if is_kind(c.name, err)), None)


def disk_full(err: BaseException | None) -> bool:
    """Whether `err` (or what caused it) says a disk is full (SQLite's SQLITE_FULL, ENOSPC, EDQUOT)."""
    return is_kind(DISK_FULL, err)


def lost_connection(err: BaseException | None) -> bool:
    """Whether `err` (or what caused it) is SQLAlchemy's word that the database did not answer, not that it refused
    the statement, nor that its disk is full."""
    return is_kind(LOST_CONNECTION, err)


def unreachable(err: BaseException | None) -> bool:
    """Whether `err` says the tracking store did not answer (a connection refused or reset, a timeout, a 5xx after
    MLflow's own retries, a database that is restarting or locked), not that it refused what was sent, nor that
    its disk is full (that stops a study: `tracking.StoresFull`)."""
    return is_kind(UNREACHABLE, err)


def out_of_memory(err: BaseException | None) -> bool:
    """Whether a failure is out of memory (host or CUDA; its process may keep what it held)."""
    return is_kind(OUT_OF_MEMORY, err)


def missing(err: BaseException | None) -> bool:
    """Whether `err` says what was asked for does not exist (MLflow's RESOURCE_DOES_NOT_EXIST, "not found")."""
    return is_kind(MISSING, err)


# ---------------------------------------------------------------- one line


def one_line(err: BaseException, limit: int | None = 200, typed: bool = False) -> str:
    """`err` in one line: the first line of its message (the type's name where it has none), `Type: line` when
    `typed`, cut to `limit` characters (None: not cut)."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    if typed:
        line = f"{type(err).__name__}: {line}"
    elif not line:
        line = type(err).__name__
    return line if limit is None else line[:limit]


# ---------------------------------------------------------------- patience


@dataclass
class Patience:
    """One outage's clock: a call is tried (`attempt`) and, while it fails with an error `transient` says is one, tried
    again (`call`) after a pause that starts at `pause_s` and is multiplied by `factor` up to `max_pause_s`, until
    the outage has lasted `limit_s`; then the error is raised (or `give_up`'s). An error `transient` does not
    accept is raised at once. The outage begins as its first failed try began and ends at the next try that returns;
    `warn(err)` runs once as it begins, `back(seconds)` as it ends."""

    transient: Callable[[BaseException], bool]
    limit_s: float
    pause_s: float = 0.5
    max_pause_s: float = 8.0
    factor: float = 2.0
    from_try: bool = False
    """How long the outage has lasted, read as each try begins (True: a try begun within `limit_s` that fails after
    it is still waited out) or as its failure is seen (False)."""
    warn: Callable[[BaseException], None] | None = None
    give_up: Callable[[BaseException, float], BaseException] | None = None
    """The error raised instead once the outage has lasted `limit_s` (from the last error and the seconds it
    lasted; raised `from None`); None: the last error itself."""
    back: Callable[[float], None] | None = None
    down_since: float | None = field(default=None, init=False)
    """When the outage began (None: the last try returned)."""
    pause: float = field(default=0.0, init=False)
    """The pause before the next try."""

    def __post_init__(self) -> None:
        self.pause = self.pause_s

    def attempt(self, fn: Callable[..., Any], *args, **kwargs) -> tuple[bool, Any]:
        """`fn(*args, **kwargs)` once: (True, what it returned), or (False, None) when it failed with a transient
        error within the limit (the failure counts into the outage)."""
        began = time.monotonic()
        try:
            value = fn(*args, **kwargs)
        except Exception as err:
            if not self.transient(err):
                raise
            first = self.down_since is None
            if first:
                self.down_since = began
            lasted = (began if self.from_try else time.monotonic()) - self.down_since
            if lasted >= self.limit_s:
                if self.give_up is None:
                    raise
                raise self.give_up(err, lasted) from None
            if first and self.warn is not None:
                self.warn(err)
            return False, None
        if self.down_since is not None:
            if self.back is not None:
                self.back((began if self.from_try else time.monotonic()) - self.down_since)
            self.down_since, self.pause = None, self.pause_s
        return True, value

    def call(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """`fn(*args, **kwargs)`, tried until it returns, through an outage of up to `limit_s`."""
        while True:
            done, value = self.attempt(fn, *args, **kwargs)
            if done:
                return value
            time.sleep(self.pause)
            self.pause = min(self.pause * self.factor, self.max_pause_s)


def patiently(fn: Callable[..., Any], transient: Callable[[BaseException], bool], limit_s: float, **kwargs):
    """`fn`, each call of it waited out through an outage of its own (a fresh `Patience(transient, limit_s,
    **kwargs)` per call, so calls from several threads never share a clock)."""

    @functools.wraps(fn)
    def call(*args, **kw):
        return Patience(transient, limit_s, **kwargs).call(fn, *args, **kw)

    return call
