"""Kafka Connect schemas as its JSON converter writes them, and the fixed Debezium ones.

A schema is a dict whose keys come in the converter's order: ``type``, then
``fields`` (struct) or ``items`` (array) or ``keys``/``values`` (map), then
``optional``, ``name``, ``version``, ``doc``, ``parameters``, ``default``; a struct
member ends with ``field`` (its name). Serialised once per table definition and
embedded as text in every message, so per-row work never touches a schema.
"""

from __future__ import annotations

from typing import Any

__all__ = ["schema", "member", "struct", "SOURCE", "TRANSACTION_BLOCK", "SNAPSHOT_VALUES",
           "schema_change_key", "schema_change_value", "TXN_KEY", "TXN_VALUE"]

# the values of ``source.snapshot`` (Debezium's SnapshotRecord, lower case)
SNAPSHOT_VALUES = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"


def schema(type_: str, optional: bool = False, *, name: str | None = None,
           version: int | None = None, doc: str | None = None,
           parameters: dict[str, str] | None = None, default: Any = None, **nested) -> dict:
    """One schema; ``nested`` holds ``fields``/``items``/``keys``+``values`` for containers."""
    out: dict[str, Any] = {"type": type_, **nested, "optional": optional}
    for key, value in (("name", name), ("version", version), ("doc", doc),
                       ("parameters", parameters), ("default", default)):
        if value is not None:
            out[key] = value
    return out


def member(field: str, spec: dict) -> dict:
    """``spec`` as the member ``field`` of a struct (``field`` goes last, as the converter does)."""
    return {**spec, "field": field}


def struct(fields: list[dict], optional: bool = False, **kw) -> dict:
    return schema("struct", optional, fields=fields, **kw)


def _plain(type_: str, field: str, optional: bool = False) -> dict:
    return member(field, schema(type_, optional))


def _source_fields() -> list[dict]:
    snapshot = schema("string", True, name="io.debezium.data.Enum", version=1,
                      parameters={"allowed": SNAPSHOT_VALUES}, default="false")
    return [
        _plain("string", "version"), _plain("string", "connector"), _plain("string", "name"),
        _plain("int64", "ts_ms"), member("snapshot", snapshot), _plain("string", "db"),
        _plain("string", "sequence", True), _plain("int64", "ts_us", True),
        _plain("int64", "ts_ns", True), _plain("string", "table", True),
        _plain("int64", "server_id"), _plain("string", "gtid", True), _plain("string", "file"),
        _plain("int64", "pos"), _plain("int32", "row"), _plain("int64", "thread", True),
        _plain("string", "query", True),
        # ours: the envelope's total order, as text (38 digits do not fit an int64)
        _plain("string", "seq", True),
    ]


SOURCE = struct(_source_fields(), name="io.debezium.connector.mysql.Source", version=1)

TRANSACTION_BLOCK = struct(
    [_plain("string", "id"), _plain("int64", "total_order"),
     _plain("int64", "data_collection_order")],
    True, name="event.block", version=1)

TXN_KEY = struct([_plain("string", "id")],
                 name="io.debezium.connector.common.TransactionMetadataKey", version=1)

_COLLECTION = struct([_plain("string", "data_collection"), _plain("int64", "event_count")],
                     True, name="event.collection", version=1)

TXN_VALUE = struct(
    [_plain("string", "status"), _plain("string", "id"), _plain("int64", "event_count", True),
     member("data_collections", schema("array", True, items=_COLLECTION)),
     _plain("int64", "ts_ms")],
    name="io.debezium.connector.common.TransactionMetadataValue", version=1)


def schema_change_key() -> dict:
    return struct([_plain("string", "databaseName")],
                  name="io.debezium.connector.mysql.SchemaChangeKey", version=1)


def _column_schema() -> dict:
    return struct(
        [_plain("string", "name"), _plain("int32", "jdbcType"), _plain("int32", "nativeType", True),
         _plain("string", "typeName"), _plain("string", "typeExpression", True),
         _plain("string", "charsetName", True), _plain("int32", "length", True),
         _plain("int32", "scale", True), _plain("int32", "position"),
         _plain("boolean", "optional", True), _plain("boolean", "autoIncremented", True),
         _plain("boolean", "generated", True), _plain("string", "comment", True),
         _plain("string", "defaultValueExpression", True),
         member("enumValues", schema("array", True, items=schema("string")))],
        name="io.debezium.connector.schema.Column", version=1)


def schema_change_value() -> dict:
    table = struct(
        [_plain("string", "defaultCharsetName", True),
         member("primaryKeyColumnNames", schema("array", True, items=schema("string"))),
         member("columns", schema("array", items=_column_schema())),
         _plain("string", "comment", True)],
        True, name="io.debezium.connector.schema.Table", version=1)
    change = struct([_plain("string", "type"), _plain("string", "id"), member("table", table)],
                    name="io.debezium.connector.schema.Change", version=1)
    return struct(
        [member("source", SOURCE), _plain("int64", "ts_ms"),
         _plain("string", "databaseName", True), _plain("string", "schemaName", True),
         _plain("string", "ddl", True), member("tableChanges", schema("array", items=change))],
        name="io.debezium.connector.mysql.SchemaChangeValue", version=1)
