"""Raw binlog events between two positions -> envelope record batches.

This is the loop every reader shares: a Spark task reading a replication
stream, ``mysqlcdc decode`` reading local files, and the benchmarks. It feeds
each raw event to the pure decoder, tracks transactions, and appends row
changes to an :class:`EnvelopeBuilder`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol

import pyarrow as pa

from mysqlcdc.binlog.events import RowsEvent, TableMapEvent
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.envelope.builder import EnvelopeBuilder
from mysqlcdc.errors import ConnectionLostError, SchemaError
from mysqlcdc.schema.model import TableDef
from mysqlcdc.capture.transactions import TxnTracker
from mysqlcdc.types import BinlogPosition, binlog_file_number

__all__ = ["RawEventLike", "FileEvent", "ChangeDecoder", "iter_change_batches"]

TableLookup = Callable[[str, str], TableDef | None]


class RawEventLike(Protocol):
    file: str
    pos: int
    data: bytes
    artificial: bool


@dataclass(frozen=True, slots=True)
class FileEvent:
    """A raw event read from a local file (same shape as a stream's RawEvent)."""

    file: str
    pos: int
    data: bytes
    artificial: bool = False


class ChangeDecoder:
    """Decodes raw events into envelope rows and remembers the last boundary."""

    def __init__(self, parser: BinlogParser, tables: TableLookup | None = None) -> None:
        self.parser = parser
        self.tables = tables
        self.builder = EnvelopeBuilder()
        self.tracker = TxnTracker()
        self.keys: dict[int, tuple[str, ...] | None] = {}
        self.boundary: tuple[str, int] | None = None
        self.events = 0
        self._file = ""
        self._file_number = 0

    def feed(self, raw: RawEventLike) -> None:
        """Decode one raw event; artificial ones only update decoder state."""
        events = self.parser.parse(raw.data, raw.pos)
        if raw.artificial:
            return
        if raw.file != self._file:
            self._file, self._file_number = raw.file, binlog_file_number(raw.file)
        self.events += 1
        row_index = 0
        boundary = False
        for ev in events:
            if isinstance(ev, RowsEvent):
                row_index = self._rows(ev, raw, row_index)
                boundary = False
                continue
            if isinstance(ev, TableMapEvent):
                self.keys[ev.table_id] = self._key_columns(ev)
            boundary = self.tracker.observe(ev, raw.file, raw.pos)
        if boundary:
            self.boundary = TxnTracker.next_position(events[-1], raw.file, raw.pos + len(raw.data))

    def _rows(self, ev: RowsEvent, raw: RawEventLike, row_index: int) -> int:
        self.tracker.observe(ev, raw.file, raw.pos)   # opens a txn context if needed
        if ev.rows is None:
            return row_index
        return self.builder.add_rows(
            ev.kind, ev.schema, ev.table, ev.rows, self.keys.get(ev.table_id),
            self.tracker.ctx, raw.file, self._file_number, raw.pos, row_index,
        )

    def _key_columns(self, ev: TableMapEvent) -> tuple[str, ...] | None:
        if ev.primary_key and ev.column_names:
            return tuple(ev.column_names[i] for i in ev.primary_key)
        table = self.tables(ev.schema, ev.table) if self.tables else None
        if table is None:
            return None
        if ev.column_names is None and len(table.columns) != len(ev.column_types):
            raise SchemaError(
                f"{ev.schema}.{ev.table}: the binlog row has {len(ev.column_types)} columns but the "
                f"table definition read from information_schema has {len(table.columns)} "
                f"({', '.join(table.column_names)}); the table changed after these events were "
                "written, so its rows cannot be named safely",
                hint="Set binlog_row_metadata=FULL on the server, or restart the pipeline from a "
                "position after the DDL (the versioned schema history will remove this limit).",
            )
        return table.primary_key or None

    def take(self) -> pa.RecordBatch:
        return self.builder.take()


def iter_change_batches(
    raws: Iterable[RawEventLike],
    decoder: ChangeDecoder,
    *,
    end: BinlogPosition | None = None,
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Yield envelope batches for every event before ``end``.

    With ``end`` set, the input must reach it: running dry before ``end`` raises
    ConnectionLostError, because stopping short would silently lose changes.
    """
    end_key = (end.file_number, end.pos) if end else None
    reached = end is None
    numbers: dict[str, int] = {}
    for raw in raws:
        if end_key and not raw.artificial and (_number(numbers, raw.file), raw.pos) >= end_key:
            reached = True
            break
        decoder.feed(raw)
        if len(decoder.builder) >= batch_rows:
            yield decoder.take()
        boundary = decoder.boundary
        if end_key and boundary and (_number(numbers, boundary[0]), boundary[1]) >= end_key:
            reached = True
            break
    if len(decoder.builder):
        yield decoder.take()
    if not reached:
        raise ConnectionLostError(
            f"binlog stream ended before the end of the range ({end}); nothing after "
            f"{decoder.boundary} was emitted"
        )


def _number(cache: dict[str, int], file: str) -> int:
    """A file's numeric extension, parsed once per file name."""
    n = cache.get(file)
    if n is None:
        n = cache[file] = binlog_file_number(file)
    return n
