"""Does a TABLE_MAP fit a table definition? Column count and column types.

The binlog names no columns unless the server writes full metadata, so the
history's definition is checked against what the TABLE_MAP does carry: how many
columns there are and each one's storage type. A mismatch means the history is
wrong for this table at this position, and its rows must not be decoded with it.
"""

from __future__ import annotations

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.columns import real_type
from mysqlcdc.schema.model import TableDef

__all__ = ["table_map_mismatch", "table_map_problem"]

_STRINGS = {C.MYSQL_TYPE_STRING, C.MYSQL_TYPE_VAR_STRING, C.MYSQL_TYPE_VARCHAR}
_BLOBS = {C.MYSQL_TYPE_BLOB, C.MYSQL_TYPE_TINY_BLOB, C.MYSQL_TYPE_MEDIUM_BLOB,
          C.MYSQL_TYPE_LONG_BLOB}

# information_schema DATA_TYPE -> the storage types a TABLE_MAP may show for it
_ACCEPTS: dict[str, set[int]] = {
    "tinyint": {C.MYSQL_TYPE_TINY}, "bool": {C.MYSQL_TYPE_TINY},
    "smallint": {C.MYSQL_TYPE_SHORT}, "mediumint": {C.MYSQL_TYPE_INT24},
    "int": {C.MYSQL_TYPE_LONG}, "integer": {C.MYSQL_TYPE_LONG},
    "bigint": {C.MYSQL_TYPE_LONGLONG},
    "float": {C.MYSQL_TYPE_FLOAT}, "double": {C.MYSQL_TYPE_DOUBLE},
    "decimal": {C.MYSQL_TYPE_NEWDECIMAL, C.MYSQL_TYPE_DECIMAL},
    "date": {C.MYSQL_TYPE_DATE, C.MYSQL_TYPE_NEWDATE},
    "datetime": {C.MYSQL_TYPE_DATETIME, C.MYSQL_TYPE_DATETIME2},
    "timestamp": {C.MYSQL_TYPE_TIMESTAMP, C.MYSQL_TYPE_TIMESTAMP2},
    "time": {C.MYSQL_TYPE_TIME, C.MYSQL_TYPE_TIME2},
    "year": {C.MYSQL_TYPE_YEAR},
    "bit": {C.MYSQL_TYPE_BIT},
    "char": _STRINGS, "varchar": _STRINGS, "binary": _STRINGS, "varbinary": _STRINGS,
    "enum": {C.MYSQL_TYPE_ENUM, C.MYSQL_TYPE_STRING},
    "set": {C.MYSQL_TYPE_SET, C.MYSQL_TYPE_STRING},
    "tinytext": _BLOBS, "text": _BLOBS, "mediumtext": _BLOBS, "longtext": _BLOBS,
    "tinyblob": _BLOBS, "blob": _BLOBS, "mediumblob": _BLOBS, "longblob": _BLOBS,
    "json": _BLOBS | {C.MYSQL_TYPE_JSON},
    "geometry": {C.MYSQL_TYPE_GEOMETRY}, "point": {C.MYSQL_TYPE_GEOMETRY},
    "linestring": {C.MYSQL_TYPE_GEOMETRY}, "polygon": {C.MYSQL_TYPE_GEOMETRY},
    "multipoint": {C.MYSQL_TYPE_GEOMETRY}, "multilinestring": {C.MYSQL_TYPE_GEOMETRY},
    "multipolygon": {C.MYSQL_TYPE_GEOMETRY}, "geometrycollection": {C.MYSQL_TYPE_GEOMETRY},
    "geomcollection": {C.MYSQL_TYPE_GEOMETRY},
    "inet6": _STRINGS, "inet4": _STRINGS | {C.MYSQL_TYPE_LONG}, "uuid": _STRINGS,
    "vector": {C.MYSQL_TYPE_VECTOR} | _STRINGS | _BLOBS,
}


def table_map_mismatch(column_types: bytes, column_metas: tuple[int, ...],
                       table: TableDef) -> str | None:
    """Why ``table`` cannot describe a TABLE_MAP's columns, or None if it can.

    Types the history does not know (a server's newer type) are not held against it.
    """
    if len(column_types) != len(table.columns):
        return (f"the binlog has {len(column_types)} columns, the history "
                f"{len(table.columns)} ({', '.join(table.column_names)})")
    for i, (code, meta, col) in enumerate(zip(column_types, column_metas, table.columns)):
        accepted = _ACCEPTS.get(col.data_type)
        if accepted is None:
            continue
        real = real_type(code, meta)[0] if code == C.MYSQL_TYPE_STRING else code
        if code not in accepted and real not in accepted:
            return (f"column {i + 1} ({col.name}) is {col.column_type or col.data_type} in the "
                    f"history but has binlog type {real}")
    return None


def table_map_problem(event, definition: TableDef | None) -> str | None:
    """Why the rows after the TABLE_MAP ``event`` cannot be decoded with ``definition``
    (the history's version of its table there), or None when they can. A TABLE_MAP
    that names its columns (``binlog_row_metadata=FULL``) decodes by its own metadata
    and is never a problem. The one check of the driver's schema keeper and of read
    tasks that check their own range."""
    if event.column_names is not None:
        return None
    if definition is None:
        return ("the history has no definition of this table here (it was created by a "
                "statement the history did not see)")
    why = table_map_mismatch(event.column_types, event.column_metas, definition)
    return None if why is None else f"the TABLE_MAP disagrees with the history: {why}"
