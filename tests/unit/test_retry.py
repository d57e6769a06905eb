"""The one reading of transient vs terminal, the outage budget, named errors from Spark."""

from __future__ import annotations

import errno
import logging

import pymysql
import pytest

from mysqlcdc.errors import (AuthenticationError, ConnectionLostError, MissingPrivilegeError,
                             OutageTooLongError, ServerUnreachableError, SourceChangedError,
                             from_text)
from mysqlcdc.protocol.packet import Disconnected
from mysqlcdc.protocol.retry import RetryPolicy, call, format_duration, is_transient

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("exc, transient", [
    (ServerUnreachableError("refused"), True),
    (ConnectionLostError("lost"), True),
    (Disconnected("eof"), True),
    (pymysql.err.OperationalError(2003, "Can't connect"), True),
    (pymysql.err.OperationalError(2013, "Lost connection"), True),
    (pymysql.err.OperationalError(1053, "Server shutdown in progress"), True),
    (pymysql.err.OperationalError(1040, "Too many connections"), True),
    (pymysql.err.InterfaceError(0, ""), True),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), True),
    (TimeoutError(), True),
    (AuthenticationError("denied"), False),
    (MissingPrivilegeError("no REPLICATION SLAVE"), False),
    (SourceChangedError("another server"), False),
    (OutageTooLongError("too long"), False),
    (pymysql.err.OperationalError(1045, "Access denied"), False),
    (ValueError("a bug"), False),
])
def test_one_place_decides_what_is_retried(exc, transient):
    assert is_transient(exc) is transient


def test_a_spent_error_is_terminal_even_if_its_kind_is_not():
    err = ConnectionLostError("gave up")
    err.transient = False
    assert not is_transient(err)
    assert not is_transient(pickle_roundtrip(err))


def pickle_roundtrip(err):
    import pickle

    return pickle.loads(pickle.dumps(err))


def test_call_retries_through_an_outage_and_logs_it_twice(caplog):
    tries = iter([ServerUnreachableError("refused"), ConnectionLostError("reset"), None])

    def flaky():
        exc = next(tries)
        if exc is not None:
            raise exc
        return "planned"

    policy = RetryPolicy(initial_delay=0.01, max_delay=0.02, max_wait=5)
    with caplog.at_level(logging.WARNING, logger="mysqlcdc.source"):
        assert call(flaky, policy, "db:3306") == "planned"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "db:3306 unreachable since" in lines[0] and "refused" in lines[0]
    assert "is back after" in lines[1] and "2 failed tries" in lines[1]


def test_call_gives_up_after_max_wait_with_a_terminal_error():
    def down():
        raise ServerUnreachableError("refused")

    with pytest.raises(OutageTooLongError, match=r"db:3306 unreachable for \d") as caught:
        call(down, RetryPolicy(initial_delay=0.01, max_delay=0.05, max_wait=0.3), "db:3306")
    assert caught.value.code == "SERVER_UNREACHABLE" and not caught.value.transient


def test_terminal_errors_are_raised_at_once():
    calls = []

    def denied():
        calls.append(1)
        raise AuthenticationError("wrong password")

    with pytest.raises(AuthenticationError):
        call(denied, RetryPolicy(initial_delay=0.01, max_wait=60), "db:3306")
    assert calls == [1]


def test_attempts_still_limit_an_outage_when_set():
    calls = []

    def down():
        calls.append(1)
        raise ServerUnreachableError("refused")

    with pytest.raises(OutageTooLongError):
        call(down, RetryPolicy(attempts=2, initial_delay=0.001, max_wait=60), "db:3306")
    assert len(calls) == 3


def test_backoff_doubles_to_its_cap_with_jitter():
    policy = RetryPolicy(initial_delay=0.5, max_delay=30, jitter=0.25)
    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (8, 30.0), (20, 30.0)]:
        for _ in range(20):
            assert base * 0.75 <= policy.delay(attempt) <= base * 1.25


def test_durations_read_well():
    assert [format_duration(s) for s in (3.24, 62, 600, 3720)] == ["3.2 s", "1m02s", "10m", "1h02m"]


def test_the_named_error_inside_a_spark_failure_is_rebuilt():
    text = ("org.apache.spark.SparkException: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] ...\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
            "mysqlcdc.errors.OutageTooLongError: [SERVER_UNREACHABLE] source db:3306 unreachable "
            "for 10m (40 tries; last: refused)\n  hint: Start the server.\n SQLSTATE: 38000")
    err = from_text(text)
    assert isinstance(err, OutageTooLongError) and err.code == "SERVER_UNREACHABLE"
    assert err.message == "source db:3306 unreachable for 10m (40 tries; last: refused)"
    assert err.hint == "Start the server."
    assert from_text("java.lang.OutOfMemoryError: heap") is None
