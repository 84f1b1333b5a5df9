"""workbench.faults: what kind of fault an error is (reading what caused it), an error as one line, and patience
with a store that does not answer."""

import errno
import logging
import sqlite3

import pytest

from workbench import faults


def _wrapped(inner: BaseException, outer: BaseException, cause: bool = True) -> BaseException:
    """`outer` raised from `inner` (`raise ... from`), or while handling it (`__context__`)."""
    try:
        try:
            raise inner
        except BaseException:
            if cause:
                raise outer from inner
            raise outer
    except BaseException as err:
        return err


def test_the_classifiers_read_what_caused_an_error():
    full = _wrapped(OSError(errno.ENOSPC, "No space left on device"), RuntimeError("StorageInternalError"))
    assert faults.disk_full(full) and faults.classify(full) == faults.DISK_FULL
    handled = _wrapped(sqlite3.OperationalError("database or disk is full"), ValueError("commit failed"), cause=False)
    assert faults.disk_full(handled)
    assert not faults.disk_full(RuntimeError("loss is nan")) and faults.classify(RuntimeError("loss is nan")) is None


def test_a_database_that_did_not_answer_is_a_lost_connection_unless_its_disk_is_full():
    from sqlalchemy import exc

    refused = exc.OperationalError("SELECT 1", {}, Exception("could not connect to server: Connection refused"))
    wrapped = _wrapped(refused, RuntimeError("optuna: StorageInternalError"))
    assert faults.lost_connection(wrapped) and faults.classify(wrapped) == faults.LOST_CONNECTION
    full = exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))
    assert faults.disk_full(full) and not faults.lost_connection(full) and not faults.unreachable(full)
    assert faults.kinds(full) == [faults.DISK_FULL]
    assert not faults.lost_connection(exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed")))


def test_a_tracking_store_away_is_unreachable_and_a_refusal_is_not():
    assert faults.unreachable(ConnectionRefusedError("Connection refused"))
    assert faults.unreachable(TimeoutError())
    assert not faults.unreachable(ValueError("param changed")) and not faults.unreachable(None)

    class MlflowException(Exception):
        def __init__(self, message, error_code="INTERNAL_ERROR"):
            super().__init__(message)
            self.error_code = error_code

    assert faults.unreachable(MlflowException("busy", "TEMPORARILY_UNAVAILABLE"))
    assert faults.unreachable(MlflowException("API request to http://x/api failed: Max retries exceeded"))
    assert not faults.unreachable(MlflowException("Changing param values is not allowed", "INVALID_PARAMETER_VALUE"))
    assert faults.missing(MlflowException("Run 'abc' not found", "RESOURCE_DOES_NOT_EXIST"))


def test_out_of_memory_is_read_off_the_error_itself():
    assert faults.out_of_memory(MemoryError())
    assert faults.out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not faults.out_of_memory(ValueError("bad shape"))
    assert not faults.out_of_memory(_wrapped(MemoryError(), ValueError("bad shape")))  # only what was raised


def test_an_error_in_one_line():
    err = RuntimeError("the first line\nand a traceback below it")
    assert faults.one_line(err) == "the first line"
    assert faults.one_line(err, typed=True) == "RuntimeError: the first line"
    assert faults.one_line(RuntimeError("x" * 500)) == "x" * 200
    assert faults.one_line(RuntimeError("x" * 500), limit=None) == "x" * 500
    assert faults.one_line(KeyError()) == "KeyError"  # no message: its type
    assert faults.one_line(RuntimeError("\n  spaced\nmore")) == "spaced"


class _Flaky:
    """Fails with `errors` in turn, then returns "ok"."""

    def __init__(self, *errors: BaseException):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_patience_waits_out_a_transient_error_with_one_warning():
    warned = []
    patience = faults.Patience(faults.unreachable, limit_s=5.0, pause_s=0.01, max_pause_s=0.02, warn=warned.append)
    flaky = _Flaky(ConnectionError("reset"), ConnectionError("reset"), ConnectionError("reset"))
    assert patience.call(flaky) == "ok"
    assert flaky.calls == 4 and len(warned) == 1  # one warning for the whole outage
    assert patience.down_since is None and patience.pause == 0.01  # answered: the next outage starts afresh


def test_patience_raises_a_permanent_error_at_once():
    patience = faults.Patience(faults.unreachable, limit_s=60.0, pause_s=10.0)
    flaky = _Flaky(ValueError("refused"))
    with pytest.raises(ValueError, match="refused"):
        patience.call(flaky)
    assert flaky.calls == 1


def test_patience_gives_up_once_the_outage_lasted_its_limit():
    flaky = _Flaky(*[ConnectionError("down")] * 1000)
    with pytest.raises(ConnectionError):
        faults.Patience(faults.unreachable, limit_s=0.05, pause_s=0.01, max_pause_s=0.01).call(flaky)
    assert 2 <= flaky.calls < 1000

    def unavailable(err, lasted):
        return RuntimeError(f"gone for {lasted:.2f} s: {faults.one_line(err)}")

    patience = faults.Patience(faults.unreachable, limit_s=0.0, give_up=unavailable)
    with pytest.raises(RuntimeError, match="^gone for 0.00 s: down$") as raised:
        patience.call(_Flaky(ConnectionError("down")))
    assert raised.value.__suppress_context__


def test_patience_keeps_one_clock_across_calls_and_says_when_the_store_is_back():
    back = []
    patience = faults.Patience(faults.unreachable, limit_s=60.0, pause_s=1.0, max_pause_s=1.0, back=back.append)
    flaky = _Flaky(ConnectionError("down"))
    assert patience.attempt(flaky) == (False, None)
    assert patience.down_since is not None and not back
    assert patience.attempt(flaky) == (True, "ok")
    assert patience.down_since is None and len(back) == 1 and back[0] >= 0


def test_patiently_gives_each_call_its_own_clock(caplog):
    log = logging.getLogger("test_faults")
    flaky = _Flaky(ConnectionError("down"), ConnectionError("down"))
    call = faults.patiently(flaky, faults.unreachable, 5.0, pause_s=0.01, warn=lambda err: log.warning("waiting"))
    with caplog.at_level(logging.WARNING, logger="test_faults"):
        assert call() == "ok"
    assert flaky.calls == 3 and [r.getMessage() for r in caplog.records] == ["waiting"]
