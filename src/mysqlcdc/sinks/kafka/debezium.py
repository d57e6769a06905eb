"""Debezium's change events: key and value as Kafka Connect's JSON converter writes them.

With ``schemas`` on (the converter's default) key and value are each
``{"schema": ..., "payload": ...}``; off, the payload alone. The payload is Debezium
MySQL's envelope ``{"before", "after", "source", "transaction", "op", "ts_ms",
"ts_us", "ts_ns"}`` whose row images hold Debezium's encodings of the values
(:mod:`.typemap`, under the four modes of the settings).

Per table definition a :class:`TableCodec` is built once: the key and envelope
schemas serialised once, and the converters of the columns whose envelope value is
not already Debezium's. A row image is parsed only when its table has such a column;
otherwise the envelope's JSON text is embedded as it is (``orjson.Fragment``), and
each message is one ``orjson.dumps`` call around the pre-serialised parts.

Definitions come from the schema history the source keeps for the sink's query
(``<checkpoint>/mysqlcdc-schema``), in force at each row's position.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

import orjson
from orjson import Fragment

from mysqlcdc.errors import KafkaSchemaUnknownError
from mysqlcdc.schema.model import TableDef
from mysqlcdc.sinks.kafka.connect import SOURCE, TRANSACTION_BLOCK, member, schema, struct
from mysqlcdc.sinks.kafka.typemap import Modes, column_codec

__all__ = ["DebeziumEncoder", "TableCodec", "Definitions", "KafkaSchemaUnknownError",
           "source_block", "source_json", "TXN_ORDER", "TXN_TABLE_ORDER", "VERSION"]

Row = Mapping[str, Any]

# the columns txnorder adds before the shuffle (see :mod:`.txnorder`)
TXN_ORDER = "_mysqlcdc_total_order"
TXN_TABLE_ORDER = "_mysqlcdc_collection_order"

try:
    from importlib.metadata import version as _version

    VERSION = _version("mysqlcdc")
except Exception:  # pragma: no cover - running from a source tree without metadata
    VERSION = "0"


class Definitions(Protocol):
    def at(self, db: str, table: str, file: str, pos: int) -> TableDef | None: ...


def source_block(row: Row, name: str, table: str | None = None) -> dict:
    """Debezium MySQL's ``source`` block for ``row`` (plus ``seq``, the envelope's order)."""
    ts = row["ts_ms"]
    return {
        "version": VERSION, "connector": "mysql", "name": name, "ts_ms": ts,
        "snapshot": "true" if row["op"] == "r" else "false", "db": row["db"], "sequence": None,
        "ts_us": None if ts is None else ts * 1000,
        "ts_ns": None if ts is None else ts * 1_000_000,
        "table": row["table"] if table is None else table, "server_id": row["server_id"],
        "gtid": row["gtid"], "file": row["file"], "pos": row["pos"], "row": row["row"],
        "thread": None, "query": row.get("query"), "seq": str(row["seq"]),
    }


def source_json(row: Row, name: str, table: str | None = None) -> str:
    return orjson.dumps(source_block(row, name, table)).decode()


class TableCodec:
    """Schemas and converters of one table definition (``definition`` None: unknown, for
    TRUNCATE records of a table the history no longer holds)."""

    def __init__(self, prefix: str, db: str, table: str, definition: TableDef | None,
                 modes: Modes) -> None:
        columns = definition.columns if definition is not None else ()
        codecs = {c.name: column_codec(c, modes) for c in columns}
        keys = (definition.primary_key or definition.column_names) if definition else ()
        base = f"{prefix}.{db}.{table}"
        value = struct([codecs[c.name].member(c.name) for c in columns], True, name=f"{base}.Value")
        key = struct([codecs[k].member(k) for k in keys], name=f"{base}.Key")
        envelope = struct(
            [member("before", value), member("after", value), member("source", SOURCE),
             member("transaction", TRANSACTION_BLOCK), member("op", schema("string")),
             member("ts_ms", schema("int64", True)), member("ts_us", schema("int64", True)),
             member("ts_ns", schema("int64", True))],
            name=f"{base}.Envelope", version=2)
        self.key_schema = _dumps(key)
        self.envelope_schema = _dumps(envelope)
        self.columns = frozenset(codecs)
        self._convert = [(n, c.convert) for n, c in codecs.items() if c.convert is not None]
        self._key_convert = [(n, f) for n, f in self._convert if n in set(keys)]

    def image(self, text: str | None) -> Fragment | None:
        """A row image (envelope JSON text) with Debezium's values, as embeddable JSON."""
        return _converted(text, self._convert, self.columns)

    def key(self, text: str | None) -> Fragment | None:
        return _converted(text, self._key_convert, self.columns)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _converted(text: str | None, converters: list[tuple[str, Callable]],
               columns: frozenset[str]) -> Fragment | None:
    if text is None:
        return None
    if not converters:
        return Fragment(text)            # embedded as it is: no parse, no re-encode
    image = orjson.loads(text)
    # an image decoded with this definition has its columns (fewer in MINIMAL images)
    unknown = () if len(image) == len(columns) else image.keys() - columns
    if unknown:
        raise KafkaSchemaUnknownError(f"columns {sorted(unknown)} are not in the table "
                                      "definition the schema history holds for this row")
    for name, convert in converters:
        value = image.get(name)
        if value is not None:
            image[name] = convert(value)
    return Fragment(orjson.dumps(image))


class DebeziumEncoder:
    """Key, value and key-change header of a row in Debezium's format (one per task)."""

    def __init__(self, *, prefix: str, schemas: bool, modes: Modes,
                 definitions: Definitions) -> None:
        self.prefix, self.schemas, self.modes = prefix, schemas, modes
        self.definitions = definitions
        self._at: dict[tuple, TableCodec] = {}
        self._by_def: dict[tuple, TableCodec] = {}

    def codec(self, row: Row) -> TableCodec:
        where = (row["db"], row["table"], row["file"], row["pos"])
        codec = self._at.get(where)
        if codec is None:
            codec = self._at[where] = self._lookup(row)
        return codec

    def _lookup(self, row: Row) -> TableCodec:
        db, table = row["db"], row["table"]
        definition = self.definitions.at(db, table, row["file"], row["pos"])
        if definition is None and row["op"] != "t":
            raise KafkaSchemaUnknownError(
                f"no definition of {db}.{table} at {row['file']}:{row['pos']} in the schema "
                f"history (op {row['op']}, seq {row['seq']})")
        ident = (db, table, definition)
        codec = self._by_def.get(ident)
        if codec is None:
            codec = self._by_def[ident] = TableCodec(self.prefix, db, table, definition,
                                                     self.modes)
        return codec

    def _wrap(self, schema: bytes, payload: Any) -> bytes:
        if self.schemas:
            return orjson.dumps({"schema": Fragment(schema), "payload": payload})
        return orjson.dumps(payload)

    def key(self, row: Row) -> bytes | None:
        if row["key"] is None:
            return None
        codec = self.codec(row)
        return self._wrap(codec.key_schema, codec.key(row["key"]))

    def moved_key(self, row: Row) -> bytes:
        """The other half's key for the ``__debezium.newkey``/``oldkey`` header (payload)."""
        return orjson.dumps(self.codec(row).key(row["moved_key"]))

    def value(self, row: Row, now_ns: int) -> bytes:
        codec = self.codec(row)
        return self._wrap(codec.envelope_schema, {
            "before": codec.image(row["before"]), "after": codec.image(row["after"]),
            "source": source_block(row, self.prefix), "transaction": _transaction(row),
            "op": row["op"], "ts_ms": now_ns // 1_000_000, "ts_us": now_ns // 1000,
            "ts_ns": now_ns})


def _transaction(row: Row) -> dict | None:
    """``{id, total_order, data_collection_order}`` when the orders were computed (the
    transaction topic is on), else null; snapshot reads belong to no transaction."""
    total = row.get(TXN_ORDER)
    if total is None or row["op"] == "r":
        return None
    return {"id": row["txn_id"], "total_order": total,
            "data_collection_order": row[TXN_TABLE_ORDER]}
