"""A ``foreachBatch`` function cut short by its query's stop, told to Spark in few words.

Stopping a query (Ctrl-C, SIGTERM, a stop through ``mysqlcdc serve``) interrupts its
stream thread while the sink's Python function may be inside a call into the JVM. The
call fails with a ``Py4JJavaError`` whose text carries the whole Java stack, and Spark
decides whether the query failed or was stopped by matching that text with a regular
expression that recurses once per character (``(.|\\r\\n|\\r|\\n)*``): a long text
overflows the stream thread's stack, and the JVM prints a ``StackOverflowError`` of a
thousand regex frames where the stop should be silent. The wrapper raises the same
verdict in one line instead, so Spark reads it as the stop it is.
"""

from __future__ import annotations

import functools
from typing import Callable

__all__ = ["quiet_on_stop", "interruption", "QueryInterrupted"]

# what Spark's stream execution takes for "interrupted by stop" in a Python error
_CALL = "py4j.protocol.Py4JJavaError: An error occurred while calling"
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


class QueryInterrupted(Exception):
    """The sink's batch function was interrupted by the query's stop."""


def interruption(err: BaseException) -> QueryInterrupted | None:
    """``err`` in one line when it is a call into the JVM that the query's stop
    interrupted, else None."""
    if type(err).__name__ not in ("Py4JJavaError", "Py4JError", "Py4JNetworkError"):
        return None
    try:
        text = str(err)
    except Exception:   # noqa: BLE001 - the JVM may be gone already
        return None
    name = next((n for n in _INTERRUPTIONS if n in text), None)
    if name is None and "[SPARK_JOB_CANCELLED]" in text and " was stopped" in text:
        name = f"{_INTERRUPTIONS[0]} (its job was cancelled)"    # a job the stop cancelled
    if name is None:
        return None
    return QueryInterrupted(f"{_CALL} a sink's batch: {name} (the query was stopped)")


def quiet_on_stop(fn: Callable) -> Callable:
    """``fn`` (a ``foreachBatch`` function) raising :func:`interruption`'s one line where
    it would raise an interrupted JVM call's stack."""

    @functools.wraps(fn)
    def run(df, batch_id):
        try:
            return fn(df, batch_id)
        except Exception as err:
            short = interruption(err)
            if short is None:
                raise
        raise short          # outside the handler: the long error is not chained to it

    return run
