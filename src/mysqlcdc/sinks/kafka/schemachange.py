"""The schema-change topic: ``op = s`` records as Debezium MySQL's schema change events.

One message per DDL and database (the ``s`` records at one binlog position, one per
table the DDL changed, are grouped as Debezium groups a statement's changes), key
``{"databaseName"}``, value ``{"source", "ts_ms", "databaseName", "schemaName",
"ddl", "tableChanges"}``. Each table change is ``CREATE`` (no definition before),
``DROP`` (none after, the table is the old definition) or ``ALTER``, with the table
as Debezium describes it (``defaultCharsetName``, ``primaryKeyColumnNames``,
``columns`` with JDBC type codes). A rename is one ``ALTER`` whose id names both tables,
``"db"."old","db"."new"``, as Debezium writes it (the envelope's two records of a
rename, the old name's and the new name's, are folded into it).

In the ``mysqlcdc`` format the value is the ``s`` record itself (the envelope as JSON).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import orjson

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.kafka.connect import schema_change_key, schema_change_value
from mysqlcdc.sinks.kafka.debezium import source_json

__all__ = ["schema_change_messages", "table_json", "JDBC_TYPES"]

Row = Mapping[str, Any]

# java.sql.Types codes, as Debezium's MySQL DDL parser assigns them to each type
JDBC_TYPES = {
    "bit": -7, "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "integer": 4,
    "bigint": -5, "float": 6, "real": 7, "double": 8, "decimal": 3, "numeric": 2,
    "char": 1, "varchar": 12, "tinytext": 12, "text": 12, "mediumtext": 12, "longtext": 12,
    "binary": -2, "varbinary": -3, "tinyblob": 2004, "blob": 2004, "mediumblob": 2004,
    "longblob": 2004, "date": 91, "time": 92, "datetime": 93, "timestamp": 2014,
    "year": 4, "enum": 1, "set": 1, "bool": 16, "boolean": 16,
}
_OTHER = 1111          # JSON, spatial types and whatever the parser does not name
_TEMPORAL = {"time", "datetime", "timestamp"}

_KEY_SCHEMA = orjson.dumps(schema_change_key()).decode()
_VALUE_SCHEMA = orjson.dumps(schema_change_value()).decode()


def _length(col: ColumnDef) -> int | None:
    if col.data_type in ("decimal", "numeric"):
        return col.precision
    if col.data_type in _TEMPORAL:
        return col.fsp or None
    return col.length


def column_json(col: ColumnDef, position: int) -> dict:
    type_name = col.data_type.upper() + (" UNSIGNED" if col.unsigned else "")
    labels = list(col.enum_values or col.set_values) or None
    return {
        "name": col.name, "jdbcType": JDBC_TYPES.get(col.data_type, _OTHER), "nativeType": None,
        "typeName": type_name, "typeExpression": type_name,
        "charsetName": None if col.charset in (None, "binary") else col.charset,
        "length": _length(col), "scale": col.scale, "position": position,
        "optional": col.nullable, "autoIncremented": False, "generated": col.generated,
        "comment": None, "defaultValueExpression": None, "enumValues": labels,
    }


def table_json(definition: TableDef) -> dict:
    return {
        "defaultCharsetName": definition.charset,
        "primaryKeyColumnNames": list(definition.primary_key),
        "columns": [column_json(c, i) for i, c in enumerate(definition.columns, 1)],
        "comment": None,
    }


def _definitions(row: Row) -> tuple[TableDef | None, TableDef | None]:
    return tuple(None if row[k] is None else TableDef.from_json(json.loads(row[k]))
                 for k in ("before", "after"))


def _ident(db: str, table: str) -> str:
    return f'"{db}"."{table}"'


def _table_change(row: Row) -> dict:
    before, after = _definitions(row)
    kind = "CREATE" if before is None else "DROP" if after is None else "ALTER"
    ident = _ident(row["db"], row["table"])
    if before is not None and after is not None and (before.db, before.name) != (after.db, after.name):
        ident = f"{_ident(before.db, before.name)},{ident}"      # a rename: "old","new"
    table = after if after is not None else before
    return {"type": kind, "id": ident, "table": None if table is None else table_json(table)}


def _table_changes(group: list[Row]) -> tuple[list[dict], list[str]]:
    """The statement's changes and the tables they name; a rename is one ALTER (the old
    name's own record, a drop, is folded into it) naming the old table, then the new."""
    renamed: dict[tuple[str, str], str] = {}
    for row in group:
        before, after = _definitions(row)
        if before is not None and after is not None and before.name != after.name:
            renamed[(before.db, before.name)] = row["table"]
    changes, names = [], []
    for row in group:
        if row["after"] is None and (row["db"], row["table"]) in renamed:
            continue
        changes.append(_table_change(row))
        old = next((o for (d, o), new in renamed.items() if new == row["table"]), None)
        names += [old, row["table"]] if old is not None else [row["table"]]
    return changes, names


def _groups(rows: Iterable[Row]) -> list[list[Row]]:
    """``s`` records in seq order, grouped by (position, database)."""
    out: dict[tuple, list[Row]] = {}
    for row in sorted(rows, key=lambda r: int(r["seq"])):
        out.setdefault((row["file"], row["pos"], row["db"]), []).append(row)
    return list(out.values())


def _key(db: str, schemas: bool) -> bytes:
    payload = orjson.dumps({"databaseName": db}).decode()
    return (f'{{"schema":{_KEY_SCHEMA},"payload":{payload}}}' if schemas else payload).encode()


def _debezium_value(group: list[Row], prefix: str, now_ms: int, schemas: bool) -> bytes:
    first = group[0]
    changes, names = _table_changes(group)
    tables = ",".join(dict.fromkeys(names))
    payload = (
        f'{{"source":{source_json(first, prefix, tables)},"ts_ms":{now_ms},'
        f'"databaseName":{json.dumps(first["db"])},"schemaName":null,'
        f'"ddl":{json.dumps(first.get("query"))},'
        f'"tableChanges":{orjson.dumps(changes).decode()}}}'
    )
    return (f'{{"schema":{_VALUE_SCHEMA},"payload":{payload}}}' if schemas else payload).encode()


def schema_change_messages(rows: Iterable[Row], *, format: str, prefix: str, schemas: bool,
                           now_ms: int, envelope_value) -> list[tuple[bytes, bytes]]:
    """(key, value) of every schema change among ``rows``, in binlog order.

    ``envelope_value(row)`` encodes a record in the ``mysqlcdc`` format."""
    out = []
    for group in _groups(rows):
        key = _key(group[0]["db"], schemas and format == "debezium")
        if format == "debezium":
            out.append((key, _debezium_value(group, prefix, now_ms, schemas)))
        else:
            out += [(key, envelope_value(r)) for r in group]
    return out
