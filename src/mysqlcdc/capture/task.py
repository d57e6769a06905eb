"""One read task: decode the row changes of ``[start, end)`` from the server.

A ``RangeTask`` carries everything a Spark executor needs (it pickles); the
task opens its own replication connection, so several tasks decode disjoint
ranges of the same binlog in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.changes import ChangeDecoder, HistoryLookup, iter_change_batches
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.protocol.stream import ReplicationStream, RetryPolicy
from mysqlcdc.schema.history import Change, SchemaView
from mysqlcdc.schema.model import TableDef
from mysqlcdc.types import BinlogPosition

__all__ = ["RangeTask", "read_range", "task_view"]

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


def task_view(task: RangeTask) -> SchemaView:
    """The task's schema view (a fixed one from ``definitions`` when it has no history)."""
    if task.schema is not None:
        return task.schema
    versions = {key: [Change(task.start, "bootstrap", key[0], key[1], d)]
                for key, d in task.definitions.items()}
    return SchemaView(versions=versions, batch_start=task.start)


def read_range(task: RangeTask) -> Iterator[pa.RecordBatch]:
    """Decode ``[task.start, task.end)`` into envelope record batches."""
    view = task_view(task)
    lookup = HistoryLookup(view)
    parser = BinlogParser(tables=lookup, include=task.tables, file=task.start.file)
    decoder = ChangeDecoder(parser, lookup, include=task.tables, include_query=task.include_query)
    stream = ReplicationStream(task.settings, server_id=task.server_id, start=task.start,
                               reconnect=task.retry)
    try:
        yield from iter_change_batches(stream, decoder, end=task.end, batch_rows=task.batch_rows)
    finally:
        stream.close()
