"""The change envelope: one record per row change, the same for every sink.

Field meanings are documented in docs/ENVELOPE.md. The Arrow schema here is
exactly what Spark derives from ``ENVELOPE_DDL`` (all fields nullable,
``timestamp`` free), so record batches can be handed to Spark unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from orjson import Fragment

from mysqlcdc.arrowbuild import text_scalar

__all__ = ["ENVELOPE_FIELDS", "ENVELOPE_DDL", "ARROW_SCHEMA", "OP_INSERT", "OP_UPDATE", "OP_DELETE",
           "OP_READ", "OP_TRUNCATE", "OP_SCHEMA", "OP_ROLLBACK", "ROW_OPS", "envelope_json",
           "envelope_json_lines"]

OP_INSERT = "c"
OP_UPDATE = "u"
OP_DELETE = "d"
OP_READ = "r"
OP_TRUNCATE = "t"
# the ``query`` of the ``t`` that follows the ``s`` of a DDL that changed a table's key
# (DESIGN.md decision 33): the rows sinks hold under the old key texts are void, and the
# table is read again; a sink that keys rows by the new definition itself (a mirror) may
# pass it over
REKEY_NOTE = "/* mysqlcdc: the key of this table changed; its rows are read again */"
OP_SCHEMA = "s"      # a DDL changed a table's definition (before/after: the definitions)
# the transaction ended with ROLLBACK although the binlog holds its rows (tables that cannot
# roll back, such as MyISAM); only with the reader's emitRollbacks option (the plugins sink)
OP_ROLLBACK = "x"
ROW_OPS = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_READ)

# (name, spark DDL type, arrow type) in envelope order.
ENVELOPE_FIELDS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("op", "STRING", pa.string()),
    ("db", "STRING", pa.string()),
    ("table", "STRING", pa.string()),
    ("before", "STRING", pa.string()),
    ("after", "STRING", pa.string()),
    ("key", "STRING", pa.string()),
    ("ts_ms", "BIGINT", pa.int64()),
    ("server_id", "BIGINT", pa.int64()),
    ("gtid", "STRING", pa.string()),
    ("txn_id", "STRING", pa.string()),
    ("file", "STRING", pa.string()),
    ("pos", "BIGINT", pa.int64()),
    ("row", "INT", pa.int32()),
    ("seq", "DECIMAL(38,0)", pa.decimal128(38, 0)),
    ("query", "STRING", pa.string()),
    ("moved_key", "STRING", pa.string()),
)

ENVELOPE_DDL = ", ".join(f"`{name}` {ddl}" for name, ddl, _ in ENVELOPE_FIELDS)
ARROW_SCHEMA = pa.schema([pa.field(name, typ, nullable=True) for name, _, typ in ENVELOPE_FIELDS])


def _j(value: Any) -> str:
    """JSON for a scalar (None -> null), as ``envelope_json`` writes it."""
    return "null" if value is None else orjson.dumps(value).decode()


def _raw(text: str | None) -> Fragment | None:
    """Already-JSON text, embedded as is."""
    return None if text is None else Fragment(text)


def envelope_json(row: Mapping[str, Any]) -> bytes:
    """One envelope row (a dict of the columns above) as one JSON object (UTF-8), fields
    in envelope order: ``before``, ``after``, ``key`` and ``moved_key`` embedded as the
    JSON they are (never re-encoded, so values keep their exact text), ``seq`` as a
    decimal string (38 digits do not fit a JSON double). One ``orjson`` call. Kafka's
    ``mysqlcdc`` format and ``mysqlcdc decode --changes`` write this."""
    return orjson.dumps({
        "op": row["op"], "db": row["db"], "table": row["table"], "before": _raw(row["before"]),
        "after": _raw(row["after"]), "key": _raw(row["key"]), "ts_ms": row["ts_ms"],
        "server_id": row["server_id"], "gtid": row["gtid"], "txn_id": row["txn_id"],
        "file": row["file"], "pos": row["pos"], "row": row["row"], "seq": str(row["seq"]),
        "query": row.get("query"), "moved_key": _raw(row.get("moved_key"))})


_TEXT = ("op", "db", "table", "gtid", "txn_id", "file", "query")
# text columns with a handful of values per batch (a batch mostly holds one database, one
# table and one binlog file): their JSON is made once per distinct value
_FEW = frozenset(("op", "db", "table", "file"))
_NUMBERS = ("ts_ms", "server_id", "pos", "row")
_RAW = ("before", "after", "key", "moved_key")
_NEEDS_ESCAPE = r'["\\\x00-\x1f\x7f]'


def envelope_json_lines(batch: pa.RecordBatch, newline: bool = True) -> pa.Array:
    """``envelope_json`` of every row of an envelope batch, each ending in a newline (unless
    ``newline`` is false), built column by column by Arrow (the same text, no Python object
    per value)."""
    cols = {}
    for name in _TEXT:
        column = batch.column(name)
        if name == "txn_id" and column.equals(batch.column("gtid")):
            cols[name] = cols["gtid"]         # MariaDB's transaction id is its GTID
        else:
            cols[name] = _json_text(column, few=name in _FEW)
    null = text_scalar("null")       # scalars, not Python strings: text_scalar's doc
    for name in _NUMBERS:
        cols[name] = pc.fill_null(pc.cast(batch.column(name), pa.string()), null)
    for name in _RAW:
        cols[name] = pc.fill_null(batch.column(name), null)
    cols["seq"] = pc.cast(batch.column("seq"), pa.string())
    parts: list = []
    for i, (name, _, _) in enumerate(ENVELOPE_FIELDS):
        parts.append(text_scalar(("{" if i == 0 else ",") + f'"{name}":'
                                 + ('"' if name == "seq" else "")))
        parts.append(cols[name])
        if name == "seq":
            parts.append(text_scalar('"'))
    parts.append(text_scalar("}\n" if newline else "}"))
    return pc.binary_join_element_wise(*parts, text_scalar(""))


def _json_text(column: pa.Array, few: bool = False) -> pa.Array | pa.Scalar:
    """JSON strings (``null`` for nulls); values that need escaping go through orjson (as in
    ``envelope_json``). A column of one value (or only nulls) gives that text as a scalar,
    which Arrow's join repeats; with ``few`` (a column of few distinct values) each
    distinct value's text is made once."""
    null = text_scalar("null")
    if column.null_count == len(column):
        return null
    if few and isinstance(column, pa.Array):
        if column.null_count == 0 and pc.all(pc.equal(column, column[0])).as_py():
            return text_scalar(_j(column[0].as_py()))
        encoded = pc.dictionary_encode(column)        # nulls stay out of the dictionary
        return pc.fill_null(_json_text(encoded.dictionary).take(encoded.indices), null)
    if pc.any(pc.match_substring_regex(column, _NEEDS_ESCAPE)).as_py():
        return pa.array([_j(v) for v in column.to_pylist()], pa.string())
    quote = text_scalar('"')
    return pc.fill_null(pc.binary_join_element_wise(quote, column, quote, text_scalar("")), null)
