"""One read task: decode the row changes of ``[start, end)`` from the server.

A ``RangeTask`` carries everything a Spark executor needs (it pickles); the
task opens its own replication connection, so several tasks decode disjoint
ranges of the same binlog in parallel.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture import xa
from mysqlcdc.capture.batchend import EndRule, Found, iter_until, write_found
from mysqlcdc.capture.changes import (ChangeDecoder, HistoryLookup, PassOver, iter_change_batches,
                                      pass_over_enabled)
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.signals import SignalTap
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql
from mysqlcdc.protocol.retry import STATS, RetryPolicy
from mysqlcdc.protocol.stream import ReplicationStream
from mysqlcdc.schema.history import Change, SchemaView
from mysqlcdc.schema.model import TableDef
from mysqlcdc.types import BinlogPosition

__all__ = ["RangeTask", "follow_xa", "read_range", "task_view"]


@dataclass(frozen=True)
class RangeTask:
    settings: ConnectionSettings
    server_id: int
    start: BinlogPosition
    end: BinlogPosition
    tables: TableFilter
    definitions: dict[tuple[str, str], TableDef] = field(default_factory=dict, compare=False)
    batch_rows: int = 8192
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # the schema history as this task needs it; without one, ``definitions`` hold at ``start``
    schema: SchemaView | None = field(default=None, compare=False)
    include_query: bool = False
    emit_rollbacks: bool = False       # op-x records for ROLLBACK (the plugins sink)
    # where this task reports its outages for the driver's progress line (best effort)
    status_path: str | None = None
    # hands the signal table's inserted rows to the driver (capture.signals)
    signals: SignalTap | None = None
    # set: the task finds where its batch ends (``capture.batchend``); ``end`` is the cap
    rule: "EndRule | None" = None
    # XA transactions prepared before ``start`` and still open there (``capture.xa``):
    # xid -> [position of their group, whether they changed a captured table]
    xa_open: dict[str, list] = field(default_factory=dict, compare=False)


def task_view(task: RangeTask) -> SchemaView:
    """The task's schema view (a fixed one from ``definitions`` when it has no history)."""
    if task.schema is not None:
        return task.schema
    versions = {key: [Change(task.start, "bootstrap", key[0], key[1], d)]
                for key, d in task.definitions.items()}
    return SchemaView(versions=versions, batch_start=task.start)


def read_range(task: RangeTask, found: list | None = None) -> Iterator[pa.RecordBatch]:
    """Decode ``[task.start, task.end)`` into envelope record batches. With a ``rule``
    the task finds its end itself; what it found is written to the rule's record and
    appended to ``found``."""
    view = task_view(task)
    lookup = HistoryLookup(view)
    parser = BinlogParser(tables=lookup, include=task.tables, file=task.start.file)
    decoder = ChangeDecoder(parser, lookup, include=task.tables, include_query=task.include_query,
                            emit_rollbacks=task.emit_rollbacks, statements_fatal=True)
    follow_xa(decoder, task, view)
    exact = task.rule is not None and task.rule.cut_events is not None
    stream = ReplicationStream(task.settings, server_id=task.server_id,
                               start=task.rule.cut_from if exact else task.start,
                               reconnect=task.retry,
                               stop_at=None if task.rule is None else task.rule.cap)
    if task.tables is not None and pass_over_enabled():
        PassOver(decoder, task.tables, stream)    # becomes the stream's pass_over
    report = None if task.status_path is None else _status_writer(task.status_path)
    if report is not None:
        STATS.listen(report)
    try:
        if task.rule is None:
            batches = iter_change_batches(stream, decoder, end=task.end,
                                          batch_rows=task.batch_rows)
            yield from (batches if task.signals is None else task.signals.tap(batches))
        else:
            out: list[Found] = []
            batches = iter_until(stream, decoder, task.start, task.rule,
                                 batch_rows=task.batch_rows, out=out)
            yield from (batches if task.signals is None else task.signals.tap(batches))
            if task.rule.record is not None:
                write_found(task.rule.record, out[0])
            if found is not None:
                found.extend(out)
    finally:
        stream.close()
        if report is not None:
            STATS.unlisten(report)


def follow_xa(decoder: ChangeDecoder, task: RangeTask, view: SchemaView) -> None:
    """Let ``decoder`` output the XA transactions whose outcome it meets and whose prepare
    lies before it (``capture.xa``): those its batch inherited, those of an earlier slice
    of its batch, and, looked up in the server's binlog listing, any other."""
    decoder.xa_open = {x: (BinlogPosition.parse(p), bool(rows))
                       for x, (p, rows) in task.xa_open.items()}
    decoder.xa_fetch = lambda xid, a, b: xa.read_prepared(task, view, xid, a, b)
    if task.rule is not None and task.rule.cut_from is not None:
        decoder.xa_search_from = task.start

    def missing(xid: str, file: str, pos: int):
        here = BinlogPosition.of(file, pos)
        conn = connect_sql(task.settings)
        try:
            at = xa.find_prepare(conn, xid, here)
        finally:
            conn.close()
        found = None if at is None else xa.read_prepared(task, view, xid, at, here)
        if found is None:
            raise xa.missing_error(xid, file, pos, "in the server's binlog files before it")
        return found
    decoder.xa_missing = missing


def _status_writer(path: str):
    def write(snapshot: dict) -> None:
        try:
            tmp = f"{path}.tmp"
            with open(tmp, "w") as out:
                json.dump(snapshot, out)
            os.replace(tmp, path)
        except OSError:
            pass    # a folder this executor does not see: the outage is in its log
    return write
