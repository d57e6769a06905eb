"""Decoding local binlog files, with no server: for ``mysqlcdc decode`` and bench.

File names in a sequence advance by ROTATE events exactly as on the server,
so ``seq`` values match what a live pipeline assigns to the same changes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Callable, Iterable, Iterator, TextIO

import numpy as np
import pyarrow as pa

from mysqlcdc.binlog.events import Event, QueryEvent
from mysqlcdc.binlog.file import iter_binlog_file
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.binlog.rowsdecode import ROWS_CODES
from mysqlcdc.capture.changes import ChangeDecoder, FileEvent
from mysqlcdc.collector import fewer_collections
from mysqlcdc.envelope.model import envelope_json_lines
from mysqlcdc.errors import SchemaError
from mysqlcdc.schema.ddl import Catalog, classify
from mysqlcdc.schema.model import TableDef

__all__ = ["iter_file_events", "iter_file_batches", "event_record", "print_events",
           "print_changes", "FileSchema"]

_ROWS_CODES = ROWS_CODES


class _DefaultCharsets(dict):
    """Databases the files never created: the server's compiled-in default charset."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def get(self, key, fallback=None):
        return super().get(key, self.default)

    def __missing__(self, key):
        return self.default


class FileSchema:
    """Table definitions learned from the DDL in the files themselves.

    With no server to ask, a table is known from the CREATE TABLE in the files
    on, and follows every later DDL (a statement that cannot be applied with
    certainty forgets the table: its columns are then named ``@1``, ``@2`` ...).
    A database the files did not create is assumed to have the server's
    compiled-in default charset (utf8mb4 from MySQL 8.0, latin1 before and on
    MariaDB); a charset in the TABLE_MAP's metadata always wins over it.
    """

    def __init__(self, parser: BinlogParser) -> None:
        self.parser = parser
        self.catalog: Catalog | None = None

    def __call__(self, db: str, table: str) -> TableDef | None:
        return None if self.catalog is None else self.catalog.tables.get((db, table))

    def query(self, ev: QueryEvent) -> None:
        if classify(ev.query) == "ignore":
            return
        if self.catalog is None:
            fde = self.parser.fde
            version = fde.server_version if fde is not None else ""
            major = int(version.split(".")[0]) if version[:1].isdigit() else 0
            default = "utf8mb4" if major >= 8 and "mariadb" not in version.lower() else "latin1"
            self.catalog = Catalog(databases=_DefaultCharsets(default), server_charset=default,
                                   explicit_defaults_for_timestamp=major >= 8)
        try:
            self.catalog.execute(ev.query, ev.schema or None)
        except SchemaError as e:
            for key in getattr(e, "tables", None) or ():
                self.catalog.tables.pop(key, None)


def iter_file_events(paths: Iterable[str]) -> Iterator[FileEvent]:
    """Raw events of local files in order, named by each file's base name."""
    for name, pos, data, _ in _raw_events(list(paths)):
        yield FileEvent(name, pos, bytes(data))


def _raw_events(paths: list[str], start: int | None = None,
                stop: int | None = None) -> Iterator[tuple[str, int, bytes, bool]]:
    """``(file, pos, bytes, in range)`` of every event of local files, in order, as
    ``mysqlbinlog --start-position/--stop-position`` bound them: events of the first
    file before ``start`` are out of range (still read: they set up the decoder, e.g. the
    FORMAT_DESCRIPTION and a transaction's TABLE_MAP), and reading ends at the first event
    of the last file at or after ``stop``."""
    last = len(paths) - 1
    for i, path in enumerate(paths):
        name = os.path.basename(path)
        for pos, data in iter_binlog_file(path):
            if i == last and stop is not None and pos >= stop:
                return
            yield name, pos, data, start is None or i > 0 or pos >= start


def iter_file_batches(
    paths: Iterable[str],
    *,
    tables: Callable[[str, str], TableDef | None] | dict | None = None,
    include: Callable[[str, str], bool] | None = None,
    batch_rows: int = 8192,
    columnar: bool = True,
    start: int | None = None,
    stop: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Envelope record batches of every row change in local binlog files.

    Without ``tables``, definitions come from the DDL in the files (:class:`FileSchema`).
    ``columnar=False`` takes the reference path (see ``ChangeDecoder``). ``start`` and
    ``stop`` bound the events by position as ``mysqlbinlog`` does (see ``_raw_events``):
    rows events before ``start`` are passed over, the rest still sets the decoder up.
    """
    fewer_collections()       # the row images a batch keeps are no cycle's part
    follower = None
    if isinstance(tables, dict):
        known = tables
        lookup = lambda db, t: known.get((db, t))  # noqa: E731
    else:
        lookup = tables
    parser = BinlogParser(tables=lookup, include=include)
    if lookup is None:
        follower = parser.tables = lookup = FileSchema(parser)
    decoder = ChangeDecoder(parser, lookup, ddl=follower, columnar=columnar)
    decoder.xa_missing = _xa_not_in_files
    # the loop of ``iter_change_batches`` without an end, on (pos, bytes) pairs: no
    # object per raw event
    feed, builder = decoder.feed_raw, decoder.builder
    paths = list(paths)
    if start is None and stop is None:
        for path in paths:
            name = os.path.basename(path)
            for pos, data in iter_binlog_file(path):
                if feed(name, pos, data) and len(builder) >= batch_rows:
                    yield decoder.take()
    else:
        for name, pos, data, in_range in _raw_events(paths, start, stop):
            if not in_range and data[4] in _ROWS_CODES:
                continue
            if feed(name, pos, data) and len(builder) >= batch_rows:
                yield decoder.take()
    if len(builder):
        yield decoder.take()


def _xa_not_in_files(xid: str, file: str, pos: int) -> None:
    """An XA COMMIT whose prepare is in none of the files decoded: there is nothing to
    show for it (the files begin after the transaction's rows)."""
    logging.getLogger(__name__).warning(
        "XA COMMIT %s at %s:%d: its XA PREPARE is not in the files decoded, so its row "
        "changes are not shown", xid, file, pos)
    return None


def print_changes(paths: list[str], out: TextIO, *,
                  include: Callable[[str, str], bool] | None = None,
                  start: int | None = None, stop: int | None = None) -> int:
    """Write one JSON line per row change, the envelope the pipeline writes
    (``envelope_json``), decoded column by column; returns the number of lines."""
    count = 0
    binary = getattr(out, "buffer", None)
    for batch in iter_file_batches(paths, include=include, start=start, stop=stop):
        lines = envelope_json_lines(batch)
        if binary is not None:          # the lines' bytes as Arrow holds them, in one write
            out.flush()
            _, offsets, data = lines.buffers()
            ends = np.frombuffer(offsets, np.int32)
            binary.write(memoryview(data)[ends[lines.offset]:ends[lines.offset + len(lines)]])
        else:
            out.write("".join(lines.to_pylist()))
        count += batch.num_rows
    return count


def _jsonable(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def event_record(file: str, pos: int, ev: Event) -> dict:
    """One decoded event as a JSON-ready dict (header fields flattened)."""
    record = {"file": file, "pos": pos, "event": type(ev).__name__}
    record.update(dataclasses.asdict(ev.header))
    for f in dataclasses.fields(ev):
        if f.name != "header":
            record[f.name] = _jsonable(getattr(ev, f.name))
    return record


def print_events(paths: list[str], out: TextIO, *,
                 include: Callable[[str, str], bool] | None = None,
                 start: int | None = None, stop: int | None = None) -> int:
    """Write one JSON line per decoded event (rows decoded one by one, the reference
    decoder's view); returns the number of events. ``include``: TABLE_MAP and rows events
    of other tables are left out; ``start``/``stop`` as in ``iter_file_batches``."""
    parser = BinlogParser(include=include)
    parser.tables = follower = FileSchema(parser)
    count = 0
    for name, pos, data, in_range in _raw_events(paths, start, stop):
        parser.file = name
        if not in_range and data[4] in _ROWS_CODES:
            continue
        for ev in parser.parse(bytes(data), pos):
            if isinstance(ev, QueryEvent):
                follower.query(ev)
            if not in_range or (include is not None and _other_table(ev, include)):
                continue
            out.write(json.dumps(event_record(name, pos, ev), ensure_ascii=False,
                                 default=str) + "\n")
            count += 1
    return count


def _other_table(ev: Event, include: Callable[[str, str], bool]) -> bool:
    schema, table = getattr(ev, "schema", None), getattr(ev, "table", None)
    return isinstance(table, str) and isinstance(schema, str) and not include(schema, table)
