"""The Python worker daemon of mysqlcdc's Spark sessions (``spark.python.daemon.module``):
PySpark's own, quiet about a task the JVM stopped.

When a streaming query stops (Ctrl-C, SIGTERM, a failed sink) Spark interrupts its
running tasks and closes their sockets. A Python worker that is still writing then meets
a closed socket, and PySpark's daemon prints the ``BrokenPipeError`` or
``ConnectionResetError`` with its traceback to the pipeline's terminal, although nothing
went wrong that the stop did not cause. This module runs PySpark's daemon unchanged but
for that: a worker whose socket the JVM closed ends without a word. Every other error is
left to PySpark (and through it to Spark, which fails the task).

It is imported by a fresh interpreter for every executor, so it imports PySpark's
daemon and nothing of mysqlcdc beyond this package's (lazy) ``__init__``.
"""

from __future__ import annotations

import pyspark.daemon as _daemon

_worker = _daemon.worker


def quiet_worker(sock, authenticated):
    """PySpark's ``worker``; a socket closed by the JVM ends the worker (code 1) quietly."""
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1


_daemon.worker = quiet_worker

if __name__ == "__main__":
    _daemon.manager()
