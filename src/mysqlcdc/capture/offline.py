"""Decoding local binlog files, with no server: for ``mysqlcdc decode`` and bench.

File names in a sequence advance by ROTATE events exactly as on the server,
so ``seq`` values match what a live pipeline assigns to the same changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Iterable, Iterator, TextIO

import pyarrow as pa

from mysqlcdc.binlog.events import Event
from mysqlcdc.binlog.file import iter_binlog_file
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.changes import ChangeDecoder, FileEvent, iter_change_batches
from mysqlcdc.schema.model import TableDef

__all__ = ["iter_file_events", "iter_file_batches", "event_record", "print_events"]


def iter_file_events(paths: Iterable[str]) -> Iterator[FileEvent]:
    """Raw events of local files in order, named by each file's base name."""
    for path in paths:
        name = os.path.basename(path)
        for pos, data in iter_binlog_file(path):
            yield FileEvent(name, pos, bytes(data))


def iter_file_batches(
    paths: Iterable[str],
    *,
    tables: Callable[[str, str], TableDef | None] | dict | None = None,
    include: Callable[[str, str], bool] | None = None,
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Envelope record batches of every row change in local binlog files."""
    if isinstance(tables, dict):
        known = tables
        lookup = lambda db, t: known.get((db, t))  # noqa: E731
    else:
        lookup = tables
    parser = BinlogParser(tables=lookup, include=include)
    decoder = ChangeDecoder(parser, lookup)
    yield from iter_change_batches(iter_file_events(paths), decoder, batch_rows=batch_rows)


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


def print_events(paths: list[str], out: TextIO) -> int:
    """Write one JSON line per decoded event; returns the number of events."""
    parser = BinlogParser()
    count = 0
    for raw in iter_file_events(paths):
        parser.file = raw.file
        for ev in parser.parse(raw.data, raw.pos):
            out.write(json.dumps(event_record(raw.file, raw.pos, ev), ensure_ascii=False,
                                 default=str) + "\n")
            count += 1
    return count
