"""Snapshots: the rows a table already holds, read lock-free in chunks beside the binlog.

The algorithm (watermarks, as in Netflix's DBLog; invariants in docs/DESIGN.md):

1. Each table is split into chunks by a *chunk key*. A single integer key whose values
   are dense (at most ``_EVEN_MAX_SPREAD`` key values per row, from its MIN, MAX and the
   server's row estimate) is cut into even key ranges, computed without reading the
   table; any other key (string, composite, sparse) by keyset probes (``(k1, k2) >
   (...) ORDER BY k1, k2 LIMIT 2 OFFSET n``). The chunk key is the primary key; for a table without one the
   user's ``chunk_keys`` entry, else its first unique key over NOT NULL columns, else
   none: the table is one unchunked read (logged). Rows whose chunk key holds a NULL
   (a user-named nullable key) are one more chunk of their own.
2. A chunk is one Spark read task: it notes the binlog position ``L`` (low watermark),
   reads the table's definition and selects its rows, notes ``H`` (high watermark) and
   decodes the binlog ``[L, H)`` for that table. Every key changed inside the window is
   dropped from the chunk: its state comes from the stream, whose change events carry
   whole row images. The remaining rows are the table's state at ``H`` (they did not
   change between ``L`` and ``H``, and the SELECT saw them in between). A DDL or a
   TRUNCATE of the table inside the window reads the chunk again; a table dropped before
   its chunk is read has nothing to read.
3. Snapshot rows are envelope records with ``op = r``, ``before`` null, ``file:pos`` =
   ``H`` and ``seq = (H.file·10^24) + (H.pos - 1)·10^12 + (chunk mod 10^6)·10^6 + row``:
   no binlog event starts at ``H - 1`` (events are at least 19 bytes), so the seq sorts
   after every change before ``H`` and before every change at or after ``H``. Chunks
   read at the same ``H`` differ in their chunk number; a chunk of more than 10^6 rows
   (an unchunked table, the NULL-key rows) reserves ``UNCHUNKED_SPAN`` numbers.
4. ``query`` marks the rows (docs/ENVELOPE.md): ``snapshot`` or ``backfill`` (on
   demand), and on the last row of a table's last chunk ``...:last_in_table`` (or
   ``snapshot:last`` on the last row of the whole initial snapshot).

Values are selected as text the server formats for the column type
(``_select_expression``) and turned into the JSON the binlog decoder writes for the
same value a column at a time (``envelope.textrows``), from a result set read without
a Python object per value (``protocol.resultset``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from mysqlcdc.arrowbuild import array, int32_array, int64_array, repeat, scalar
from mysqlcdc.capture.server import current_position
from mysqlcdc.envelope.model import ARROW_SCHEMA, OP_READ
from mysqlcdc.envelope.textrows import fragments, object_texts
from mysqlcdc.errors import (ConnectionLostError, MissingPrivilegeError, ProtocolError,
                             SchemaError, SnapshotRequestError, SnapshotTableError,
                             SnapshotTimeoutError)
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql, query
from mysqlcdc.protocol.packet import Disconnected
from mysqlcdc.protocol.resultset import ResultError, read_text_result
from mysqlcdc.protocol.retry import RetryPolicy, TRANSIENT_SERVER_CODES
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.types import SEQ_FILE, SEQ_POS, BinlogPosition

__all__ = ["SnapshotTable", "ChunkTask", "Piece", "snapshot_table", "probe_chunks", "read_chunk",
           "SNAPSHOT_MODES", "encode_bound", "decode_bound", "snapshot_seq", "SnapshotTableError",
           "CHUNK_SLOTS", "UNCHUNKED_SPAN", "MAX_CHUNK_ROWS"]

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("never", "initial", "initial_only", "when_needed")
MAX_CHUNK_ROWS = 1_000_000           # rows a chunk may hold: the seq keeps 10^6 per chunk
CHUNK_SLOTS = 1_000_000              # chunk numbers the seq tells apart (taken modulo)
UNCHUNKED_SPAN = 1000                # chunk numbers an unchunked read reserves: 10^9 rows
_EVEN_MAX_SPREAD = 2.0               # integer keys per row up to which chunks are even ranges
_ATTEMPTS = 5                        # reads of a chunk whose table changed in its window
_CHUNK_BATCH_ROWS = 32768            # rows per Arrow batch of a chunk (it is in memory anyway)
_TIMEOUT_CODES = frozenset({1969, 3024})       # MariaDB max_statement_time, MySQL's
_GONE_CODES = frozenset({1146, 1049})          # no such table / database
_CHANGED_CODES = frozenset({1054})             # a column of the select list is gone
_PRIVILEGE_CODES = frozenset({1142, 1143, 1044})
_FILTER_CODES = frozenset({1054, 1064, 1305, 1582, 1583, 1584})   # unknown column, syntax, function

_INTEGER = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_FLOAT = {"float"}
_DOUBLE = {"double", "real", "double precision"}
_NUMERIC = _INTEGER | _FLOAT | _DOUBLE | {"decimal", "numeric", "year", "bit"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
             "multipolygon", "geometrycollection", "geomcollection"}


def snapshot_seq(high: BinlogPosition, chunk: int, row: int) -> int:
    return (high.file_number * SEQ_FILE + (high.pos - 1) * SEQ_POS
            + (chunk % CHUNK_SLOTS) * 1_000_000 + row)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# --- which columns a table is chunked by --------------------------------------------

@dataclass(frozen=True)
class SnapshotTable:
    """A table to snapshot: its definition and the columns it is chunked by."""

    definition: TableDef
    key: tuple[str, ...]            # chunk key columns; () = one unchunked read
    nullable: bool = False          # a chunk key column may hold NULL

    @property
    def name(self) -> str:
        return f"{self.definition.db}.{self.definition.name}"

    def column(self, name: str) -> ColumnDef:
        return next(c for c in self.definition.columns if c.name == name)


def snapshot_table(definition: TableDef, keys: dict[str, tuple[str, ...]] | None = None,
                   chunk_key: tuple[str, ...] | None = None) -> SnapshotTable:
    """The chunk key: ``chunk_key`` (the user's), else the primary key (in index order
    when ``keys`` has it), else the first unique key over NOT NULL columns, else none
    (one unchunked read, logged)."""
    d, keys = definition, keys or {}
    nullable = {c.name for c in d.columns if c.nullable}
    if chunk_key:
        missing = [k for k in chunk_key if k not in d.column_names]
        if missing:
            raise SnapshotTableError(f"chunk key {list(chunk_key)} of {d.db}.{d.name} names "
                                     f"no column {missing} (columns: {list(d.column_names)})")
        return SnapshotTable(d, tuple(chunk_key), bool(nullable & set(chunk_key)))
    if d.primary_key:
        return SnapshotTable(d, keys.get("PRIMARY") or d.primary_key)
    for name, cols in keys.items():
        if name != "PRIMARY" and not nullable & set(cols):
            log.info("table %s.%s has no primary key: its snapshot is chunked by unique key "
                     "%s %s", d.db, d.name, name, list(cols))
            return SnapshotTable(d, cols)
    if (d.db, d.name) not in _WARNED:     # the planner asks again at every batch it plans
        _WARNED.add((d.db, d.name))
        log.warning("table %s.%s has no primary key and no unique key over NOT NULL columns: "
                    "its snapshot is one unchunked read task (name a chunk key for it in "
                    "source.snapshot.chunk_keys to split it)", d.db, d.name)
    return SnapshotTable(d, ())


_WARNED: set[tuple[str, str]] = set()


# --- chunk boundaries --------------------------------------------------------------

def encode_bound(values: tuple | None) -> list | None:
    """A key tuple (the server's text of each value) as JSON for Spark's offset log."""
    if values is None:
        return None
    out: list = []
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            try:
                out.append(bytes(v).decode("utf-8"))
            except UnicodeDecodeError:
                import base64

                out.append({"b64": base64.b64encode(bytes(v)).decode()})
        else:
            out.append(v)
    return out


def decode_bound(values: list | None) -> tuple | None:
    if values is None:
        return None
    import base64

    return tuple(base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in values)


def _literal(column: ColumnDef, value) -> str:
    """``value`` (the server's text of a key value, or an int) as an SQL literal that
    compares with ``column`` the way the column's own values compare."""
    if isinstance(value, int):
        return str(value)
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if column.data_type in _NUMERIC and _is_number(raw):
        return raw.decode("ascii")
    if column.data_type in _BINARY or column.charset == "binary":
        return "X'" + raw.hex() + "'"
    text = raw.decode("utf-8", "surrogateescape")
    return "'" + pymysql.converters.escape_string(text) + "'"


def _is_number(raw: bytes) -> bool:
    return bool(raw) and all(c in b"0123456789+-.eE" for c in raw)


def _key_expression(column: ColumnDef) -> str:
    """How a chunk-key column is selected when probing: text that round-trips."""
    q = _q(column.name)
    if column.data_type == "bit":
        return f"CAST({q} AS UNSIGNED)"
    if column.data_type in _FLOAT:
        return f"({q} + 0e0)"
    return q


def _after(table: SnapshotTable, bound: tuple) -> str:
    """``key > bound`` in the keyset's lexicographic order, written out column by column
    (``a > x OR (a = x AND b > y)``) so every server uses the index range."""
    cols = [table.column(k) for k in table.key]
    lits = [_literal(c, v) for c, v in zip(cols, bound)]
    terms = []
    for i in range(len(cols)):
        eq = [f"{_q(cols[j].name)} = {lits[j]}" for j in range(i)]
        terms.append("(" + " AND ".join([*eq, f"{_q(cols[i].name)} > {lits[i]}"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def _range_where(table: SnapshotTable, lo: tuple | None, hi: tuple | None, nulls: bool,
                 where: str | None) -> str:
    parts = []
    if nulls:
        parts.append("(" + " OR ".join(f"{_q(k)} IS NULL" for k in table.key) + ")")
    else:
        if lo is not None:
            parts.append(_after(table, lo))
        if hi is not None:
            parts.append(f"NOT {_after(table, hi)}")
        if table.nullable:
            parts.extend(f"{_q(k)} IS NOT NULL" for k in table.key)
    if where:
        parts.append(f"({where})")
    return (" WHERE " + " AND ".join(parts)) if parts else ""


@dataclass(frozen=True)
class Piece:
    """One chunk as probed: keys in ``(lo, hi]`` (None: open), or ``nulls``: the rows
    whose chunk key holds a NULL, or (no key at all) the whole table."""

    lo: tuple | None
    hi: tuple | None
    nulls: bool = False
    whole: bool = False


def probe_chunks(conn: pymysql.Connection, table: SnapshotTable, after: tuple | None,
                 chunk_rows: int, count: int, where: str | None = None
                 ) -> tuple[list[Piece], bool]:
    """Up to ``count`` chunks starting after ``after`` (None: the start); returns them
    and whether the table is done (its last chunk is among them). A table whose chunk
    key may hold NULL gets one more chunk for those rows when it is done. A dense integer
    key (``_even_step``) gets even key ranges; a ``where`` filter, any other key, probes."""
    if not table.key:
        return [Piece(None, None, whole=True)], True
    even = _even_step(conn, table, chunk_rows) if where is None else None
    if even is not None:
        return _even_pieces(after, count, *even)
    d = table.definition
    cols = ", ".join(_key_expression(table.column(k)) for k in table.key)
    order = ", ".join(_q(k) for k in table.key)
    pieces: list[Piece] = []
    lo, done = after, False
    while len(pieces) < count:
        sql = (f"SELECT {cols} FROM {_q(d.db)}.{_q(d.name)}"
               f"{_range_where(table, lo, None, False, where)} ORDER BY {order} "
               f"LIMIT 2 OFFSET {chunk_rows - 1}")
        rows = _text_rows(conn, sql, d, where)
        if len(rows) < 2:                # at most chunk_rows rows left: the last chunk
            pieces.append(Piece(lo, None))
            done = True
            break
        hi = rows[0]
        pieces.append(Piece(lo, hi))
        lo = hi
    if done and table.nullable:
        pieces.append(Piece(None, None, nulls=True))
    return pieces, done


def _even_step(conn, table: SnapshotTable,
               chunk_rows: int) -> tuple[int, int | None, int | None] | None:
    """For a single integer chunk key whose values are dense enough: the width of a chunk's
    key range and the key's current minimum and maximum (None, None: the table is empty),
    so chunks are even key ranges, computed instead of probed. None: probe instead
    (another key, too sparse a key, no row estimate).

    A range of ``step`` distinct integers holds at most ``step`` rows whatever the estimate
    says, and ``step`` is at most ``_EVEN_MAX_SPREAD × chunk_rows``: a wrong row estimate
    (InnoDB's is a sample) makes chunks uneven, never larger than that bound."""
    if len(table.key) != 1 or table.nullable:
        return None
    column = table.column(table.key[0])
    if column.data_type not in _INTEGER:
        return None
    d = table.definition
    q = _q(column.name)
    bounds = _text_rows(conn, f"SELECT MIN({q}), MAX({q}) FROM {_q(d.db)}.{_q(d.name)}", d)
    if not bounds or bounds[0][0] is None:
        return chunk_rows, None, None    # empty: one open chunk reads what is there by then
    low, high = int(bounds[0][0]), int(bounds[0][1])
    estimate = _text_rows(conn, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                          f"TABLE_SCHEMA = {_string(d.db)} AND TABLE_NAME = {_string(d.name)}",
                          d)
    rows = int(estimate[0][0]) if estimate and estimate[0][0] is not None else 0
    if rows <= 0:
        return None
    spread = (high - low + 1) / rows           # key values per row (>= 1 if the estimate held)
    if spread > _EVEN_MAX_SPREAD:
        return None
    return max(1, int(chunk_rows * max(1.0, spread))), low, high


def _even_pieces(after: tuple | None, count: int, step: int, low: int | None,
                 high: int | None) -> tuple[list[Piece], bool]:
    """Up to ``count`` chunks of ``step`` key values after ``after`` (None: the first is
    open below); the one that reaches ``high`` is open above, so it also reads keys
    inserted past the maximum since. An empty table (``high`` None) is that one chunk."""
    if high is None:
        return [Piece(after, None)], True
    lo, edge = after, (int(after[0]) if after is not None else low - 1)
    pieces: list[Piece] = []
    while len(pieces) < count:
        if edge + step >= high:
            pieces.append(Piece(lo, None))
            return pieces, True
        edge += step
        hi = (str(edge).encode(),)
        pieces.append(Piece(lo, hi))
        lo = hi
    return pieces, False


def _string(text: str) -> str:
    return "'" + pymysql.converters.escape_string(text) + "'"


def _text_rows(conn, sql: str, d: TableDef, where: str | None = None) -> list[tuple]:
    """The rows of a small query, each value the server's text (bytes)."""
    try:
        result = read_text_result(conn, sql)
    except ResultError as exc:
        raise _table_error(d, exc.error.code, exc.error.message, where) from exc
    except Disconnected as exc:
        raise ConnectionLostError(f"the snapshot probe of {d.db}.{d.name} lost its "
                                  f"connection ({exc})") from exc
    return list(zip(*[c.to_pylist() for c in result.columns])) if result.rows else []


def _table_error(d: TableDef, code: int, message: str, where: str | None = None) -> Exception:
    if where and code in _FILTER_CODES:
        return SnapshotRequestError(f"the server refuses the filter {where!r} on {d.db}.{d.name} "
                                    f"({code}: {message})")
    if code in _PRIVILEGE_CODES:
        return MissingPrivilegeError(f"the capture user may not SELECT from {d.db}.{d.name} "
                                     f"for its snapshot ({code}: {message})",
                                     hint=f"GRANT SELECT ON `{d.db}`.`{d.name}` TO the capture "
                                     "user, or exclude the table from source.tables.")
    if code in _GONE_CODES | _CHANGED_CODES:
        return SnapshotTableError(f"{d.db}.{d.name} changed while it was snapshotted "
                                  f"({code}: {message})")
    if code in TRANSIENT_SERVER_CODES:
        return ConnectionLostError(f"the snapshot query on {d.db}.{d.name} lost its "
                                   f"connection ({code}: {message})")
    return ProtocolError(f"the snapshot query on {d.db}.{d.name} failed ({code}: {message})",
                         hint="Read the server's message; for a --where filter, fix the "
                         "filter and request the snapshot again.")


# --- reading a chunk ---------------------------------------------------------------

def _select_expression(c: ColumnDef, mariadb: bool) -> tuple[str, str]:
    """SQL returning the column as text, and the ``envelope.textrows`` kind that turns
    that text into the JSON the binlog decoder writes for it (docs/ENVELOPE.md)."""
    q, t = _q(c.name), c.data_type
    if t in _INTEGER:
        return q, "number"
    if t in ("year", "bit"):
        return f"CAST({q} AS UNSIGNED)", "number"
    if t in _FLOAT:
        return f"({q} + 0e0)", "float"            # its exact value: the text has 6 digits
    if t in _DOUBLE:
        return q, "double"
    if t in ("decimal", "numeric", "date", "datetime", "time"):
        return q, "quoted"                        # the text protocol's text is the value's
    if t == "timestamp":
        return q, "timestamp"                     # in UTC: the session's time zone
    if t in _GEOMETRY:
        return f"LOWER(HEX({q}))", "quoted"      # the SRID-prefixed WKB as stored, as hex
    if t in _BINARY or c.charset == "binary":
        return f"REPLACE(TO_BASE64({q}), '\\n', '')", "quoted"
    if t == "set":
        return q, "set"
    if t == "json" and not mariadb:
        return q, "json"
    return q, "string"


@dataclass(frozen=True)
class ChunkTask:
    """One snapshot chunk as a Spark read task (pickles)."""

    settings: ConnectionSettings
    server_id: int
    table: SnapshotTable
    lo: tuple | None
    hi: tuple | None
    chunk: int                       # chunk number in this pipeline's snapshots (for seq)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    batch_rows: int = 8192
    nulls: bool = False              # the rows whose chunk key holds a NULL
    where: str | None = None         # an on-demand request's filter
    kind: str = "snapshot"           # snapshot | backfill
    last: str = ""                   # "table": the table's last chunk; "snapshot": the last of all
    timeout_s: float | None = None   # the SELECT's time limit (None: the server's)
    rows_hint: int = 50_000          # rows a chunk holds about (for splitting a timed-out one)


@dataclass
class _Read:
    columns: list[pa.Array]
    definition: TableDef
    low: BinlogPosition
    high: BinlogPosition
    server_id: int
    mariadb: bool


class _Changed(Exception):
    """The table's definition changed (or it was truncated) during the chunk's window."""


class _TimedOut(Exception):
    """The chunk's SELECT ran past its time limit."""


def read_chunk(task: ChunkTask, _after_low=None) -> Iterator[pa.RecordBatch]:
    """Select the chunk between two watermarks, drop the keys the binlog changed in
    between, and yield the rest as ``op = r`` envelope rows. ``_after_low`` (tests only)
    runs between the low watermark and the SELECT."""
    counter = [0]
    yield from _read_range(task, task.lo, task.hi, counter, 0, _after_low)


def _read_range(task: ChunkTask, lo, hi, counter: list[int], depth: int,
                after_low) -> Iterator[pa.RecordBatch]:
    from mysqlcdc.protocol import retry

    for attempt in range(_ATTEMPTS):
        try:
            read = retry.call(lambda: _select(task, lo, hi, after_low), task.retry,
                              task.settings.address)
        except _TimedOut:
            yield from _split(task, lo, hi, counter, depth, after_low)
            return
        if read is None:
            log.warning("%s is gone: its snapshot chunk %d has nothing to read (the stream "
                        "carries the DROP)", task.table.name, task.chunk)
            return
        touched = retry.call(lambda: _window(task, read), task.retry, task.settings.address)
        if touched is not None:
            yield from _envelope(task, read, touched, counter)
            return
        log.info("%s changed while chunk %d was read (attempt %d); reading it again",
                 task.table.name, task.chunk, attempt + 1)
    raise SnapshotTableError(f"{task.table.name} changed its definition (or was truncated) "
                             f"during each of {_ATTEMPTS} reads of snapshot chunk {task.chunk}")


def _split(task: ChunkTask, lo, hi, counter, depth, after_low) -> Iterator[pa.RecordBatch]:
    """A chunk whose SELECT timed out is read in two halves, each between watermarks of
    its own (same chunk number: its rows keep counting), down to single rows."""
    rows = max(1, task.rows_hint >> (depth + 1))
    mid = None
    if task.table.key and not task.nulls and depth < 40:
        conn = _connect(task)
        try:
            while mid is None and rows >= 1:
                pieces, _ = _probe_within(conn, task, lo, hi, rows)
                mid = pieces
                rows //= 2
        finally:
            conn.close()
    if mid is None:
        raise SnapshotTimeoutError(
            f"the snapshot SELECT of {task.table.name} (chunk {task.chunk}) ran past its time "
            f"limit{'' if task.timeout_s is None else f' of {task.timeout_s:g} s'}"
            + ("" if task.table.key and not task.nulls else
               " and cannot be split (no chunk key for these rows)"))
    log.warning("snapshot chunk %d of %s timed out: reading it in two parts", task.chunk,
                task.table.name)
    yield from _read_range(task, lo, mid, counter, depth + 1, after_low)
    yield from _read_range(task, mid, hi, counter, depth + 1, after_low)


def _probe_within(conn, task: ChunkTask, lo, hi, rows: int):
    """The key ``rows`` rows into ``(lo, hi]`` (None: fewer rows there)."""
    t, d = task.table, task.table.definition
    cols = ", ".join(_key_expression(t.column(k)) for k in t.key)
    order = ", ".join(_q(k) for k in t.key)
    sql = (f"SELECT {cols} FROM {_q(d.db)}.{_q(d.name)}"
           f"{_range_where(t, lo, hi, False, task.where)} ORDER BY {order} "
           f"LIMIT 1 OFFSET {rows - 1}")
    found = _text_rows(conn, sql, d)
    if not found or (hi is not None and tuple(found[0]) == tuple(_as_bytes(hi))):
        return None, False
    return found[0], True


def _as_bytes(values: tuple) -> tuple:
    return tuple(v.encode() if isinstance(v, str) else v for v in values)


def _connect(task: ChunkTask):
    conn = connect_sql(task.settings)
    query(conn, "SET time_zone = '+00:00'")
    return conn


def _select(task: ChunkTask, lo, hi, after_low) -> _Read | None:
    """L, the definition, the SELECT, H; None when the table no longer exists."""
    from mysqlcdc.schema.introspect import load_table

    d0 = task.table.definition
    conn = _connect(task)
    try:
        version = str(query(conn, "SELECT VERSION()")[0][0]).lower()
        mariadb = "mariadb" in version
        server_id = int(query(conn, "SELECT @@server_id")[0][0])
        low = current_position(conn)
        if after_low is not None:
            after_low()
        definition = load_table(conn, d0.db, d0.name)
        if definition is None:
            _gone_or_hidden(conn, d0)            # information_schema hides what we may not read
            return None
        exprs = [_select_expression(c, mariadb) for c in definition.columns]
        sql = (f"SELECT {', '.join(f'{e} AS {_q(c.name)}' for (e, _), c in zip(exprs, definition.columns))}"
               f" FROM {_q(d0.db)}.{_q(d0.name)}"
               f"{_range_where(task.table, lo, hi, task.nulls, task.where)}")
        try:
            if task.timeout_s is not None:
                _limit(conn, task.timeout_s, mariadb)
            result = read_text_result(conn, sql)
            if task.timeout_s is not None:
                _limit(conn, 0, mariadb)
        except ResultError as exc:
            code = exc.error.code
            if code in _TIMEOUT_CODES:
                raise _TimedOut() from exc
            if code in _GONE_CODES:
                return None
            if code in _CHANGED_CODES and not task.where:
                raise SnapshotTableError(
                    f"{d0.name}: a chunk key column of {task.table.name} is gone "
                    f"({code}: {exc.error.message})") from exc
            raise _table_error(d0, code, exc.error.message, task.where) from exc
        except Disconnected as exc:
            raise ConnectionLostError(f"the snapshot query on {task.table.name} lost its "
                                      f"connection ({exc})") from exc
        high = current_position(conn)
        return _Read(result.columns, definition, low, high, server_id, mariadb)
    finally:
        conn.close()


def _gone_or_hidden(conn, d: TableDef) -> None:
    """Returns when the table does not exist; raises when it does but may not be read."""
    try:
        read_text_result(conn, f"SELECT 1 FROM {_q(d.db)}.{_q(d.name)} LIMIT 0")
    except ResultError as exc:
        if exc.error.code in _GONE_CODES:
            return
        raise _table_error(d, exc.error.code, exc.error.message) from exc
    raise SnapshotTableError(f"{d.db}.{d.name} answers a SELECT but information_schema does "
                             "not describe its columns to the capture user")


def _limit(conn, seconds: float, mariadb: bool) -> None:
    """The session's statement time limit (0: none) for the chunk's SELECT only."""
    if mariadb:
        query(conn, f"SET SESSION max_statement_time = {seconds:.3f}")
    else:
        query(conn, f"SET SESSION max_execution_time = {int(seconds * 1000)}")


class _DdlWatch:
    """Marks a DDL, TRUNCATE or DROP of one table (or an unreadable DDL) in the window."""

    def __init__(self, db: str, table: str) -> None:
        self.key, self.changed = (db, table), False

    def query(self, ev) -> None:
        from mysqlcdc.schema.ddl import classify, targets

        kind = classify(ev.query)
        if kind == "ignore":
            return
        found = targets(ev.query, ev.schema or None)
        if kind == "database" or found is None or self.key in found:
            self.changed = True


def _window(task: ChunkTask, read: _Read) -> set[str] | None:
    """The key texts of the table's rows changed in ``[L, H)``; None when a DDL or a
    TRUNCATE of the table lies in it (the chunk must be read again)."""
    from mysqlcdc.binlog.parser import BinlogParser
    from mysqlcdc.capture.changes import (ChangeDecoder, PassOver, iter_change_batches,
                                          pass_over_enabled)
    from mysqlcdc.capture.filters import TableFilter
    from mysqlcdc.protocol.stream import ReplicationStream

    if read.high <= read.low:
        return set()
    d = read.definition
    only = TableFilter.exact(d.db, d.name)
    watch = _DdlWatch(d.db, d.name)

    def lookup(db: str, table: str) -> TableDef | None:
        return d if (db, table) == (d.db, d.name) else None

    parser = BinlogParser(tables=lookup, include=only, file=read.low.file)
    decoder = ChangeDecoder(parser, lookup, include=only, ddl=watch, statements_fatal=True)

    def xa_before_window(xid: str, file: str, pos: int) -> None:
        # an XA transaction prepared before the window commits in it: which keys it
        # changed is not known here, so the chunk is read again, as after a DDL
        watch.changed = True
        return None
    decoder.xa_missing = xa_before_window
    # server id 0: a bounded read the server never blocks, that displaces no other reader
    stream = ReplicationStream(task.settings, server_id=0, start=read.low,
                               reconnect=task.retry, stop_at=read.high)
    if pass_over_enabled():
        PassOver(decoder, only, stream)   # other tables' transactions (DESIGN.md decision 27)
    touched: set[str] = set()
    try:
        for batch in iter_change_batches(stream, decoder, end=read.high):
            touched.update(k for k in batch.column("key").to_pylist() if k is not None)
            touched.update(k for k in batch.column("moved_key").to_pylist() if k is not None)
            if watch.changed:
                return None
    except SchemaError:
        return None                  # rows that no longer fit the definition: it changed
    finally:
        stream.close()
    return None if watch.changed else touched


# --- envelope rows -----------------------------------------------------------------

def _envelope(task: ChunkTask, read: _Read, touched: set[str],
              counter: list[int]) -> Iterator[pa.RecordBatch]:
    d = read.definition
    names = list(d.column_names)
    kinds = [_select_expression(c, read.mariadb)[1] for c in d.columns]
    frags = [fragments(col, kind) for col, kind in zip(read.columns, kinds)]
    after = object_texts(names, frags)
    identity = d.primary_key
    if identity:
        at = {n: i for i, n in enumerate(names)}
        key = object_texts(list(identity), [frags[at[k]] for k in identity])
    else:
        key = after
    n = len(after)
    if touched and n:
        keep = pc.invert(pc.is_in(key, value_set=array(sorted(touched), pa.string())))
        after, key = after.filter(keep), key.filter(keep)
        n = len(after)
    if not n:
        return
    first = counter[0]
    counter[0] += n
    marks = _marks(task, n, last_part=task.hi is None or task.nulls)
    seq = _seqs(task, read.high, first, n)
    txn = f"{task.kind}:{d.db}.{d.name}:{task.chunk}"
    ts_ms = int(time.time() * 1000)
    step = max(task.batch_rows, _CHUNK_BATCH_ROWS)      # few, large batches: Spark ingests
    for start in range(0, n, step):                      # them faster (bench/snapshot_bench)
        stop = min(n, start + step)
        yield _batch(d, after[start:stop], key[start:stop], seq[start:stop],
                     marks[start:stop], read, txn, ts_ms, first + start)


def _marks(task: ChunkTask, n: int, last_part: bool) -> pa.Array:
    """``query`` of each row: the kind, and on the last row of a table's last chunk
    ``:last_in_table`` (``snapshot:last`` when it ends the whole initial snapshot)."""
    if not (task.last and last_part):
        return repeat(task.kind, pa.string(), n)
    last = ("snapshot:last" if task.last == "snapshot" and task.kind == "snapshot"
            else f"{task.kind}:last_in_table")
    return pa.concat_arrays([repeat(task.kind, pa.string(), n - 1), array([last], pa.string())])


def _seqs(task: ChunkTask, high: BinlogPosition, first: int, n: int) -> pa.Array:
    """``snapshot_seq`` of rows ``first .. first+n-1``: a chunk of more than 10^6 rows
    runs on into the chunk numbers it reserved."""
    rows = np.arange(first, first + n, dtype=np.int64)
    if first + n > 1_000_000 * (UNCHUNKED_SPAN if (not task.table.key or task.nulls) else 1):
        raise SnapshotTableError(f"snapshot chunk {task.chunk} of {task.table.name} holds more "
                                 f"rows than its seq range; name a chunk key for the table in "
                                 f"source.snapshot.chunk_keys")
    chunks = (task.chunk + rows // 1_000_000) % CHUNK_SLOTS
    low = chunks * 1_000_000 + rows % 1_000_000                  # < 10^12: fits int64
    base = high.file_number * SEQ_FILE + (high.pos - 1) * SEQ_POS
    return pc.add(scalar(base, pa.decimal128(36, 0)),
                  int64_array(low).cast(pa.decimal128(19, 0))).cast(pa.decimal128(38, 0))


def _batch(d: TableDef, after: pa.Array, key: pa.Array, seq: pa.Array, marks: pa.Array,
           read: _Read, txn: str, ts_ms: int, first_row: int) -> pa.RecordBatch:
    m = len(after)

    def const(value, typ):
        return repeat(value, typ, m)

    columns = {
        "op": const(OP_READ, pa.string()), "db": const(d.db, pa.string()),
        "table": const(d.name, pa.string()), "before": pa.nulls(m, pa.string()),
        "after": after, "key": key, "ts_ms": const(ts_ms, pa.int64()),
        "server_id": const(read.server_id, pa.int64()), "gtid": pa.nulls(m, pa.string()),
        "txn_id": const(txn, pa.string()), "file": const(read.high.file, pa.string()),
        "pos": const(read.high.pos, pa.int64()),
        "row": int32_array(np.arange(first_row, first_row + m)),
        "seq": seq, "query": marks, "moved_key": pa.nulls(m, pa.string()),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
