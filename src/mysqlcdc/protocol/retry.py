"""Riding through source outages: the one retry loop and the one reading of the error tree.

Every place that talks to the source — the driver's planning (offsets, partitions,
schema history), the read tasks' binlog streams, preflight — retries through
:func:`call` (or, for a stream, :class:`Outage` directly). Whether an error is worth
a retry is decided once, by :func:`is_transient`: a mysqlcdc error says so itself
(``transient``), and raw driver errors are classified by their server error code or
socket errno here. Wrong password, missing privilege, a different server: terminal at
once. Refused connections, resets, timeouts, ``Lost connection``, ``server shutdown
in progress``, ``Too many connections``: retried with exponential backoff and jitter
until the outage lasts longer than ``max_wait`` — then one named, *terminal* error.

One outage is logged as two lines per process: when it starts (with the reason and the
next try) and when the source is back (with its length). Counters for progress reports
live in :data:`STATS`.
"""

from __future__ import annotations

import errno
import logging
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

import pymysql

from mysqlcdc.errors import ConfigError, MysqlcdcError, OutageTooLongError
from mysqlcdc.protocol.packet import Disconnected

__all__ = ["RetryPolicy", "Outage", "OutageTooLongError", "is_transient", "call", "STATS",
           "TRANSIENT_SERVER_CODES", "format_duration"]

log = logging.getLogger("mysqlcdc.source")
T = TypeVar("T")

# Server or client error numbers that a later try may not see: connection refused/lost,
# server shutting down, connection killed, too many connections, net read/write errors,
# a client disconnected for inactivity.
TRANSIENT_SERVER_CODES = frozenset({
    1040, 1053, 1077, 1152, 1153, 1158, 1159, 1160, 1161, 1317, 1927,
    2002, 2003, 2006, 2013, 2055, 4031,
})
_TRANSIENT_ERRNOS = frozenset({
    errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN,
})


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying through one outage.

    The n-th retry waits ``min(max_delay, initial_delay * multiplier**(n-1))``, with
    ±25 % jitter. The outage ends the pipeline once it has lasted ``max_wait`` seconds,
    or after ``attempts`` failures in a row when that is set (None: no count limit).
    """

    attempts: int | None = None
    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    max_wait: float | None = 600.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if ((self.attempts is not None and self.attempts < 0) or self.initial_delay < 0
                or self.max_delay < 0 or self.multiplier < 1
                or (self.max_wait is not None and self.max_wait < 0)):
            raise ConfigError(f"invalid retry policy {self!r}: counts and delays must be >= 0, "
                              "the multiplier >= 1")

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier ** max(0, attempt - 1))
        if self.jitter:
            base *= 1.0 + self.jitter * (2.0 * random.random() - 1.0)
        return max(0.0, base)

    def exhausted(self, failures: int, elapsed: float) -> bool:
        if self.attempts is not None and failures > self.attempts:
            return True
        return self.max_wait is not None and elapsed >= self.max_wait


def is_transient(exc: BaseException) -> bool:
    """Would the same call, tried later, possibly succeed? The only place that decides."""
    if isinstance(exc, MysqlcdcError):
        return bool(exc.transient)
    if isinstance(exc, Disconnected):
        return True
    if isinstance(exc, pymysql.err.MySQLError):
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in TRANSIENT_SERVER_CODES:
            return True
        # pymysql raises InterfaceError(0, '') for a connection it has already closed.
        return isinstance(exc, pymysql.err.InterfaceError) and code in (0, None)
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, EOFError)):
        return True
    if isinstance(exc, OSError):
        return exc.errno in _TRANSIENT_ERRNOS
    return False


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s" if sec else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class _Stats:
    """This process's reconnect counters (read by progress reports)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reconnects = 0           # outages survived
        self.retries = 0              # failed tries in all outages
        self.outage_since: float | None = None   # wall clock of the current outage
        self._open = 0
        self._listeners: list[Callable[[dict], None]] = []

    def listen(self, fn: Callable[[dict], None]) -> None:
        """Call ``fn(snapshot)`` whenever an outage begins or ends."""
        with self._lock:
            self._listeners.append(fn)

    def unlisten(self, fn: Callable[[dict], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _notify(self) -> None:
        snap = self.snapshot()
        for fn in list(self._listeners):
            try:
                fn(snap)
            except Exception:   # noqa: BLE001 - a report must never break a retry
                log.debug("outage listener failed", exc_info=True)

    def begin(self, wall: float) -> None:
        with self._lock:
            self._open += 1
            if self.outage_since is None:
                self.outage_since = wall
        self._notify()

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    def end(self, survived: bool) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)
            if survived:
                self.reconnects += 1
            if not self._open:
                self.outage_since = None
        self._notify()

    def snapshot(self) -> dict:
        with self._lock:
            since = self.outage_since
            return {"reconnects": self.reconnects, "retries": self.retries,
                    "outage_since": since, "written": time.time()}


STATS = _Stats()


class Outage:
    """One outage of one connection: counts failures, sleeps the backoff, logs its start
    and end once, and raises :class:`OutageTooLongError` when the budget is spent."""

    def __init__(self, policy: RetryPolicy, address: str, what: str = "source") -> None:
        self.policy, self.address, self.what = policy, address, what
        self.failures = 0
        self.started: float | None = None
        self._wall = 0.0

    @property
    def active(self) -> bool:
        return self.started is not None

    def failed(self, exc: BaseException, *, position: object = None) -> None:
        """Record a failed try; sleep before the next, or raise if the budget is spent."""
        now = time.monotonic()
        reason = _reason(exc)
        if self.started is None:
            self.started, self._wall = now, time.time()
            STATS.begin(self._wall)
        self.failures += 1
        STATS.retried()
        elapsed = now - self.started
        if self.policy.exhausted(self.failures, elapsed):
            STATS.end(survived=False)
            self.started = None
            at = f" at {position}" if position is not None else ""
            raise OutageTooLongError(
                f"{self.what} {self.address} unreachable for {format_duration(elapsed)} "
                f"({self.failures} tries{at}; last: {reason})") from exc
        pause = self.policy.delay(self.failures)
        if self.policy.max_wait is not None:
            pause = min(pause, max(0.0, self.policy.max_wait - elapsed) + 0.05)
        if self.failures == 1:
            log.warning("%s %s unreachable since %s (%s); retrying in %.1f s", self.what,
                        self.address, time.strftime("%H:%M:%S", time.localtime(self._wall)),
                        reason, pause)
        else:
            log.debug("%s %s: try %d failed (%s); next in %.1f s", self.what, self.address,
                      self.failures, reason, pause)
        time.sleep(pause)

    def recovered(self) -> None:
        """The source answered: close the outage (one log line if there was one)."""
        if self.started is None:
            return
        length = time.monotonic() - self.started
        log.warning("%s %s is back after %s (%d failed tries)", self.what, self.address,
                    format_duration(length), self.failures)
        STATS.end(survived=True)
        self.started, self.failures = None, 0


def call(fn: Callable[[], T], policy: RetryPolicy, address: str, *,
         what: str = "source", on_retry: Callable[[], None] | None = None) -> T:
    """``fn()``, retried through transient errors under ``policy``.

    ``on_retry`` runs before each new try (e.g. to drop a broken connection)."""
    outage = Outage(policy, address, what)
    while True:
        try:
            result = fn()
        except BaseException as exc:   # noqa: BLE001 - classified below, re-raised if terminal
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) or not is_transient(exc):
                raise
            outage.failed(exc)
            if on_retry is not None:
                on_retry()
            continue
        outage.recovered()
        return result


def _reason(exc: BaseException) -> str:
    if isinstance(exc, MysqlcdcError):
        text = exc.message
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(str(text).split())
    return text if len(text) <= 160 else text[:157] + "..."
