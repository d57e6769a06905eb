"""Debezium's change events: key and value as Kafka Connect's JSON converter writes them.

With ``schemas`` on (the converter's default) key and value are each
``{"schema": ..., "payload": ...}``; off, the payload alone. The payload is Debezium
MySQL's envelope ``{"before", "after", "source", "transaction", "op", "ts_ms",
"ts_us", "ts_ns"}`` whose row images hold Debezium's encodings of the values
(:mod:`.typemap`, under the four modes of the settings).

Per table definition a :class:`TableCodec` is built once: the key and envelope
schemas serialised to text, and the converters of the columns whose envelope value
is not already Debezium's. A row image is parsed only when its table has such a
column; otherwise the envelope's JSON text is embedded as it is.

Definitions come from the schema history the source keeps for the sink's query
(``<checkpoint>/mysqlcdc-schema``), in force at each row's position.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Protocol

import orjson

from mysqlcdc.errors import SchemaError
from mysqlcdc.schema.model import TableDef
from mysqlcdc.sinks.kafka.connect import SOURCE, TRANSACTION_BLOCK, member, schema, struct
from mysqlcdc.sinks.kafka.typemap import Modes, column_codec

__all__ = ["DebeziumEncoder", "TableCodec", "Definitions", "KafkaSchemaUnknownError",
           "source_json", "TXN_ORDER", "TXN_TABLE_ORDER", "VERSION"]

Row = Mapping[str, Any]

# the columns txnorder adds before the shuffle (see :mod:`.txnorder`)
TXN_ORDER = "_mysqlcdc_total_order"
TXN_TABLE_ORDER = "_mysqlcdc_collection_order"

try:
    from importlib.metadata import version as _version

    VERSION = _version("mysqlcdc")
except Exception:  # pragma: no cover - running from a source tree without metadata
    VERSION = "0"


class KafkaSchemaUnknownError(SchemaError):
    code = "KAFKA_SCHEMA_UNKNOWN"
    hint = ("The kafka sink reads table definitions from the source's schema history: run it "
            "through `mysqlcdc run` (or give the source's schemaHistory folder to "
            "KafkaSettings.history_dir); the batch is replayed when the pipeline runs again.")


class Definitions(Protocol):
    def at(self, db: str, table: str, file: str, pos: int) -> TableDef | None: ...


def _j(value: Any) -> str:
    return "null" if value is None else json.dumps(value)


def source_json(row: Row, name: str, table: str | None = None) -> str:
    """Debezium MySQL's ``source`` block for ``row`` (plus ``seq``, the envelope's order)."""
    ts = row["ts_ms"]
    snapshot = "true" if row["op"] == "r" else "false"
    return (
        f'{{"version":{_j(VERSION)},"connector":"mysql","name":{_j(name)},"ts_ms":{_j(ts)},'
        f'"snapshot":"{snapshot}","db":{_j(row["db"])},"sequence":null,'
        f'"ts_us":{_j(None if ts is None else ts * 1000)},'
        f'"ts_ns":{_j(None if ts is None else ts * 1_000_000)},'
        f'"table":{_j(row["table"] if table is None else table)},'
        f'"server_id":{_j(row["server_id"])},"gtid":{_j(row["gtid"])},"file":{_j(row["file"])},'
        f'"pos":{_j(row["pos"])},"row":{_j(row["row"])},"thread":null,'
        f'"query":{_j(row.get("query"))},"seq":"{row["seq"]}"}}'
    )


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

    def image(self, text: str | None) -> str:
        """A row image (envelope JSON text) with Debezium's values, as JSON text."""
        return _converted(text, self._convert, self.columns)

    def key(self, text: str | None) -> str:
        return _converted(text, self._key_convert, self.columns)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _converted(text: str | None, converters: list[tuple[str, Callable]],
               columns: frozenset[str]) -> str:
    if text is None:
        return "null"
    if not converters:
        return text
    image = orjson.loads(text)
    unknown = image.keys() - columns
    if unknown:
        raise KafkaSchemaUnknownError(f"columns {sorted(unknown)} are not in the table "
                                      "definition the schema history holds for this row")
    for name, convert in converters:
        value = image.get(name)
        if value is not None:
            image[name] = convert(value)
    return orjson.dumps(image).decode()


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

    def _wrap(self, schema_text: str, payload: str) -> bytes:
        if self.schemas:
            return f'{{"schema":{schema_text},"payload":{payload}}}'.encode()
        return payload.encode()

    def key(self, row: Row) -> bytes | None:
        if row["key"] is None:
            return None
        codec = self.codec(row)
        return self._wrap(codec.key_schema, codec.key(row["key"]))

    def moved_key(self, row: Row) -> bytes:
        """The other half's key for the ``__debezium.newkey``/``oldkey`` header (payload)."""
        return self.codec(row).key(row["moved_key"]).encode()

    def value(self, row: Row, now_ns: int) -> bytes:
        codec = self.codec(row)
        payload = (
            f'{{"before":{codec.image(row["before"])},"after":{codec.image(row["after"])},'
            f'"source":{source_json(row, self.prefix)},"transaction":{_transaction(row)},'
            f'"op":"{row["op"]}","ts_ms":{now_ns // 1_000_000},"ts_us":{now_ns // 1000},'
            f'"ts_ns":{now_ns}}}'
        )
        return self._wrap(codec.envelope_schema, payload)


def _transaction(row: Row) -> str:
    """``{id, total_order, data_collection_order}`` when the orders were computed (the
    transaction topic is on), else null; snapshot reads belong to no transaction."""
    total = row.get(TXN_ORDER)
    if total is None or row["op"] == "r":
        return "null"
    return (f'{{"id":{_j(row["txn_id"])},"total_order":{total},'
            f'"data_collection_order":{row[TXN_TABLE_ORDER]}}}')
