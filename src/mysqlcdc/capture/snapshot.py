"""Snapshots: the rows a table already holds, read lock-free in chunks beside the binlog.

The algorithm (watermarks, as in Netflix's DBLog; invariants in docs/DESIGN.md):

1. The snapshot begins at ``S``, the server's binlog position when the pipeline first
   plans. The binlog stream later starts at ``S``: every change from ``S`` on is streamed.
2. Each table is split by its primary key into chunks of ``chunk_rows`` rows whose
   boundaries are probed with keyset queries (``(k1, k2) > (...) ORDER BY k1, k2 LIMIT 1
   OFFSET n``), so integer, string and composite keys are all chunked the same way.
3. A chunk is one Spark read task: it notes the binlog position ``L`` (low watermark),
   selects its rows, notes ``H`` (high watermark) and decodes the binlog ``[L, H)`` for
   that table. Every key changed inside the window is dropped from the chunk: its state
   comes from the stream, whose change events carry whole row images. The remaining rows
   are the table's state at ``H`` (they did not change between ``L`` and ``H``, and the
   SELECT saw them at some point in between).
4. Snapshot rows are envelope records with ``op = r``, ``before`` null, ``file:pos`` = ``H``
   and ``seq = (H.file·10^24) + (H.pos - 1)·10^12 + chunk·10^6 + row``: no binlog event
   starts at ``H - 1`` (events are at least 19 bytes), so the seq sorts after every change
   before ``H`` and before every change at or after ``H``, and stays unique across chunks.

Values are selected as the text the binlog decoder writes for the same column type
(``_select_expression``), so a snapshot row and a streamed row image of the same values
are the same JSON.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pyarrow as pa
import pymysql

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.server import current_position
from mysqlcdc.envelope.model import ARROW_SCHEMA, OP_READ
from mysqlcdc.errors import MissingPrivilegeError, ProtocolError, SchemaError
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql, query
from mysqlcdc.protocol.retry import RetryPolicy
from mysqlcdc.schema.history import SchemaView
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.types import SEQ_FILE, SEQ_POS, BinlogPosition

__all__ = ["SnapshotTable", "ChunkTask", "snapshot_table", "probe_chunks", "read_chunk",
           "SNAPSHOT_MODES", "encode_bound", "decode_bound", "snapshot_seq"]

log = logging.getLogger(__name__)

SNAPSHOT_MODES = ("never", "initial", "initial_only")
MAX_CHUNK_ROWS = 1_000_000           # rows a chunk may hold: the seq keeps 10^6 per chunk
MAX_CHUNKS = 1_000_000               # chunks one snapshot may have (the seq's other 10^6)

_INTEGER = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"}
_FLOAT = {"float", "double", "real"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
             "multipolygon", "geometrycollection", "geomcollection"}


class SnapshotTableError(SchemaError):
    code = "SNAPSHOT_TABLE_FAILED"
    hint = ("Grant SELECT on the table to the capture user, or exclude the table; a table "
            "altered or dropped while its snapshot ran is snapshotted again by a new run.")


def snapshot_seq(high: BinlogPosition, chunk: int, row: int) -> int:
    return high.file_number * SEQ_FILE + (high.pos - 1) * SEQ_POS + chunk * 1_000_000 + row


@dataclass(frozen=True)
class SnapshotTable:
    """A table to snapshot: its current definition and the columns it is chunked by."""

    definition: TableDef
    key: tuple[str, ...]            # chunk (and identity) columns; () = one unchunked task

    @property
    def name(self) -> str:
        return f"{self.definition.db}.{self.definition.name}"


def snapshot_table(definition: TableDef) -> SnapshotTable:
    """The primary key, else the first unique key is not known here: tables without a
    primary key are read as one unchunked task (logged)."""
    key = tuple(c.name for c in definition.columns if c.is_primary_key)
    if not key:
        log.warning("table %s.%s has no primary key: its snapshot is one unchunked read task",
                    definition.db, definition.name)
    return SnapshotTable(definition, key)


# --- chunk boundaries --------------------------------------------------------------

def encode_bound(values: tuple | None) -> list | None:
    """A key tuple as JSON for Spark's offset log (bytes as {"b64": ...})."""
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            out.append({"b64": base64.b64encode(bytes(v)).decode()})
        elif isinstance(v, (int, str)) or v is None:
            out.append(v)
        else:
            out.append(str(v))      # Decimal, date, datetime: their text compares right
    return out


def decode_bound(values: list | None) -> tuple | None:
    if values is None:
        return None
    return tuple(base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in values)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _key_predicate(key: tuple[str, ...], op: str) -> str:
    cols = ", ".join(_q(k) for k in key)
    marks = ", ".join(["%s"] * len(key))
    return f"({cols}) {op} ({marks})"


def probe_chunks(conn: pymysql.Connection, table: SnapshotTable, after: tuple | None,
                 chunk_rows: int, count: int) -> tuple[list[tuple[tuple | None, tuple | None]], bool]:
    """Up to ``count`` chunks ``(lo, hi]`` starting after ``after`` (None: the start);
    returns them and whether the table is done (the last chunk is open-ended)."""
    if not table.key:
        return [(None, None)], True
    d = table.definition
    cols = ", ".join(_q(k) for k in table.key)
    chunks: list[tuple[tuple | None, tuple | None]] = []
    lo = after
    for _ in range(count):
        where = f"WHERE {_key_predicate(table.key, '>')} " if lo is not None else ""
        sql = (f"SELECT {cols} FROM {_q(d.db)}.{_q(d.name)} {where}ORDER BY {cols} "
               f"LIMIT 1 OFFSET {chunk_rows - 1}")
        with conn.cursor() as cur:
            try:
                cur.execute(sql, lo if lo is not None else None)
            except pymysql.err.MySQLError as exc:
                raise _table_error(d, exc) from exc
            row = cur.fetchone()
        if row is None:
            chunks.append((lo, None))
            return chunks, True
        chunks.append((lo, tuple(row)))
        lo = tuple(row)
    return chunks, False


def _table_error(d: TableDef, exc: pymysql.err.MySQLError) -> Exception:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if code in (1142, 1143, 1044):
        return MissingPrivilegeError(f"the capture user may not SELECT from {d.db}.{d.name} "
                                     f"for its snapshot ({code}: {exc.args[1]})")
    if code in (1146, 1054, 1049):
        return SnapshotTableError(f"{d.db}.{d.name} changed while it was snapshotted "
                                  f"({code}: {exc.args[1]})")
    from mysqlcdc.protocol.retry import is_transient

    if is_transient(exc):
        from mysqlcdc.errors import ConnectionLostError

        return ConnectionLostError(f"the snapshot query on {d.db}.{d.name} lost its "
                                   f"connection ({code}: {exc.args[1]})")
    return ProtocolError(f"the snapshot query on {d.db}.{d.name} failed ({code}: {exc.args[1]})")


# --- reading a chunk ---------------------------------------------------------------

def _select_expression(c: ColumnDef, mariadb: bool) -> str:
    """SQL that returns the column as the binlog decoder encodes it (docs/ENVELOPE.md)."""
    q, t = _q(c.name), c.data_type
    if t in _INTEGER or t in _FLOAT:
        return q
    if t == "bit":
        return f"CAST({q} AS UNSIGNED)"
    if t in ("decimal", "numeric", "date", "datetime", "time"):
        return f"CAST({q} AS CHAR)"
    if t == "timestamp":
        fsp = c.fsp or 0
        frac = f"'.', LEFT(DATE_FORMAT({q}, '%f'), {fsp}), " if fsp else ""
        zero = "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
        return (f"IF({q} = 0, '{zero}', CONCAT(DATE_FORMAT({q}, '%Y-%m-%dT%H:%i:%s'), "
                f"{frac}'Z'))")
    if t in _GEOMETRY:
        return f"LOWER(HEX({q}))"          # the SRID-prefixed WKB as stored, as hex
    if t in _BINARY or c.charset == "binary":
        return f"REPLACE(TO_BASE64({q}), '\\n', '')"
    return q


def _convert(c: ColumnDef, value: Any, mysql_json: bool) -> Any:
    if value is None:
        return None
    t = c.data_type
    if t == "set":
        return [] if value == "" else value.split(",")
    if t == "json" and mysql_json:
        return json.loads(value)
    if t == "binary" and isinstance(value, str) and c.length:
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return value


@dataclass(frozen=True)
class ChunkTask:
    """One snapshot chunk as a Spark read task (pickles)."""

    settings: ConnectionSettings
    server_id: int
    table: SnapshotTable
    lo: tuple | None
    hi: tuple | None
    chunk: int                       # global chunk number in this snapshot (for seq)
    view: SchemaView | None = field(default=None, compare=False)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    batch_rows: int = 8192


def read_chunk(task: ChunkTask) -> Iterator[pa.RecordBatch]:
    """Select the chunk between two watermarks, drop the keys the binlog changed in
    between, and yield the rest as ``op = r`` envelope rows."""
    from mysqlcdc.protocol import retry

    rows, low, high, server_id, columns = retry.call(
        lambda: _select(task), task.retry, task.settings.address)
    touched = _window_keys(task, low, high) if high > low else set()
    yield from _envelope(task, rows, columns, touched, high, server_id)


def _select(task: ChunkTask):
    d = task.table.definition
    conn = connect_sql(task.settings)
    try:
        version = str(query(conn, "SELECT VERSION()")[0][0]).lower()
        mariadb = "mariadb" in version
        server_id = int(query(conn, "SELECT @@server_id")[0][0])
        query(conn, "SET time_zone = '+00:00'")
        columns = list(d.columns)
        exprs = ", ".join(f"{_select_expression(c, mariadb)} AS {_q(c.name)}" for c in columns)
        where, params = [], []
        if task.table.key and task.lo is not None:
            where.append(_key_predicate(task.table.key, ">"))
            params.extend(task.lo)
        if task.table.key and task.hi is not None:
            where.append(_key_predicate(task.table.key, "<="))
            params.extend(task.hi)
        if params:      # pymysql formats the statement: the select list's % must be %%
            exprs = exprs.replace("%", "%%")
        sql = f"SELECT {exprs} FROM {_q(d.db)}.{_q(d.name)}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        low = current_position(conn)
        with conn.cursor() as cur:
            try:
                cur.execute(sql, params or None)
            except pymysql.err.MySQLError as exc:
                raise _table_error(d, exc) from exc
            rows = cur.fetchall()
        high = current_position(conn)
        mysql_json = not mariadb
        out = [{c.name: _convert(c, v, mysql_json) for c, v in zip(columns, r)} for r in rows]
        return out, low, high, server_id, columns
    finally:
        conn.close()


def _window_keys(task: ChunkTask, low: BinlogPosition, high: BinlogPosition) -> set[str]:
    """The keys of the table that changed in ``[low, high)``, as envelope key text."""
    from mysqlcdc.capture.task import RangeTask, read_range

    d = task.table.definition
    window = RangeTask(settings=task.settings, server_id=task.server_id, start=low, end=high,
                       tables=TableFilter.exact(d.db, d.name), schema=task.view,
                       retry=task.retry, definitions={(d.db, d.name): d})
    touched: set[str] = set()
    for batch in read_range(window):
        ops = batch.column("op").to_pylist()
        for key, op, moved in zip(batch.column("key").to_pylist(), ops,
                                  batch.column("moved_key").to_pylist()):
            if op in ("c", "u", "d", "r"):
                touched.add(_norm(key))
                if moved:
                    touched.add(_norm(moved))
            elif op in ("t", "s"):
                raise SnapshotTableError(
                    f"{d.db}.{d.name} was {'truncated' if op == 't' else 'altered'} while "
                    f"its chunk was read (between {low} and {high})",
                    hint="Run the pipeline again: the chunk is read again after the change.")
    return touched


def _norm(key_text: str) -> str:
    return json.dumps(json.loads(key_text), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def _envelope(task: ChunkTask, rows: list[dict], columns: list[ColumnDef], touched: set[str],
              high: BinlogPosition, server_id: int) -> Iterator[pa.RecordBatch]:
    from mysqlcdc.envelope.builder import _encode

    d = task.table.definition
    key_cols = task.table.key or tuple(c.name for c in columns)
    ts_ms = int(time.time() * 1000)
    txn = f"snapshot:{d.db}.{d.name}:{task.chunk}"
    out: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
    n = 0
    for image in rows:
        key = {k: image.get(k) for k in key_cols}
        key_text = _encode(key)
        if touched and _norm(key_text) in touched:
            continue
        out["op"].append(OP_READ)
        out["db"].append(d.db)
        out["table"].append(d.name)
        out["before"].append(None)
        out["after"].append(_encode(image))
        out["key"].append(key_text)
        out["ts_ms"].append(ts_ms)
        out["server_id"].append(server_id)
        out["gtid"].append(None)
        out["txn_id"].append(txn)
        out["file"].append(high.file)
        out["pos"].append(high.pos)
        out["row"].append(n)
        out["seq"].append(snapshot_seq(high, task.chunk, n))
        out["query"].append(None)
        out["moved_key"].append(None)
        n += 1
        if len(out["op"]) >= task.batch_rows:
            yield _batch(out)
            out = {name: [] for name in ARROW_SCHEMA.names}
    if out["op"]:
        yield _batch(out)


def _batch(cols: dict[str, list]) -> pa.RecordBatch:
    from decimal import Decimal

    arrays = []
    for f in ARROW_SCHEMA:
        values = cols[f.name]
        if f.name == "seq":
            values = [Decimal(v) for v in values]
        arrays.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
