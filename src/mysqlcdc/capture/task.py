"""One read task: decode the row changes of ``[start, end)`` from the server.

A ``RangeTask`` carries everything a Spark executor needs (it pickles); the
task opens its own replication connection, so several tasks decode disjoint
ranges of the same binlog in parallel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.changes import ChangeDecoder, iter_change_batches
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql
from mysqlcdc.protocol.stream import ReplicationStream, RetryPolicy
from mysqlcdc.schema.introspect import load_tables
from mysqlcdc.schema.model import TableDef
from mysqlcdc.types import BinlogPosition

__all__ = ["RangeTask", "read_range", "TableCatalog"]

log = logging.getLogger(__name__)


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


class TableCatalog:
    """Table definitions known at the pipeline's start, asked again on a miss.

    A table that appears after the start is read from ``information_schema``
    when its first TABLE_MAP arrives. (Definitions at event time across DDL
    are the schema history's job; see README "Limits".)
    """

    def __init__(self, settings: ConnectionSettings, known: dict[tuple[str, str], TableDef],
                 tables: TableFilter) -> None:
        self.settings = settings
        self.known = dict(known)
        self.tables = tables
        self._asked: set[tuple[str, str]] = set()

    def __call__(self, db: str, table: str) -> TableDef | None:
        key = (db, table)
        found = self.known.get(key)
        if found is None and key not in self._asked and self.tables(db, table):
            self._asked.add(key)
            found = self._fetch(db, table)
        return found

    def _fetch(self, db: str, table: str) -> TableDef | None:
        conn = connect_sql(self.settings)
        try:
            defs = load_tables(conn, lambda d, t: (d, t) == (db, table))
        finally:
            conn.close()
        found = defs.get((db, table))
        if found is None:
            log.warning("table %s.%s is gone from information_schema; columns are named @1, @2, ...",
                        db, table)
        else:
            self.known[(db, table)] = found
        return found


def read_range(task: RangeTask) -> Iterator[pa.RecordBatch]:
    """Decode ``[task.start, task.end)`` into envelope record batches."""
    catalog = TableCatalog(task.settings, task.definitions, task.tables)
    parser = BinlogParser(tables=catalog, include=task.tables, file=task.start.file)
    decoder = ChangeDecoder(parser, catalog)
    stream = ReplicationStream(task.settings, server_id=task.server_id, start=task.start,
                               reconnect=task.retry)
    try:
        yield from iter_change_batches(stream, decoder, end=task.end, batch_rows=task.batch_rows)
    finally:
        stream.close()
