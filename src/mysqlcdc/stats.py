"""Counters of things that went wrong and were (or were not) survived: sink delivery
retries and failures. A metric for ``mysqlcdc serve`` to show, kept apart from the
sinks' logic: a sink calls :func:`count` where it retries or gives up.

Counters live in the process that counts. Sinks that write from ``foreachBatch`` (the
mirrors, the changelog tables, Delta) run in the driver, the service's own process, and
are read directly. Those that write from executor tasks (Kafka) run in Python workers:
when ``MYSQLCDC_STATS_DIR`` is set in the environment the JVM (and so every worker) was
started with, each process also keeps its totals in ``<dir>/<host>-<pid>-<id>.json``,
which :func:`totals` adds up. ``mysqlcdc serve`` sets it before it starts Spark.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from pathlib import Path

__all__ = ["count", "totals", "ENV", "save_process_file", "process_files"]

ENV = "MYSQLCDC_STATS_DIR"
_PROCESS = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
_COUNTS: dict[tuple[str, str, str], int] = {}
_LOCK = threading.Lock()


def count(kind: str, pipeline: str, sink: str, n: int = 1) -> None:
    """Add ``n`` to counter ``kind`` (``sink_retries``, ``sink_errors``) of a sink."""
    with _LOCK:
        key = (kind, pipeline or "", sink or "")
        _COUNTS[key] = _COUNTS.get(key, 0) + n
        data = [[*k, v] for k, v in sorted(_COUNTS.items())]
    folder = os.environ.get(ENV)
    if folder:
        save_process_file(folder, data)


def save_process_file(folder: str | os.PathLike, data: object) -> None:
    """This process's totals as ``<folder>/<host>-<pid>-<id>.json``, replaced whole (best
    effort: a folder this process cannot write to loses the numbers, never the data)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = Path(folder) / f"{_PROCESS}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass


def process_files(folder: str | os.PathLike, *, skip_own: bool = False):
    """The parsed content of every process's file in ``folder``."""
    for path in Path(folder).glob("*.json"):
        if skip_own and path.stem == _PROCESS:
            continue
        try:
            yield json.loads(path.read_text())
        except (OSError, ValueError):
            continue


def totals() -> dict[tuple[str, str, str], int]:
    """Every counter: this process's, plus the other processes' files in ``$ENV``."""
    with _LOCK:
        out = dict(_COUNTS)
    folder = os.environ.get(ENV)
    if not folder:
        return out
    for rows in process_files(folder, skip_own=True):
        for kind, pipeline, sink, n in rows:
            key = (kind, pipeline, sink)
            out[key] = out.get(key, 0) + int(n)
    return out
