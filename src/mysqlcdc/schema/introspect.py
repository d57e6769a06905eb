"""Table definitions as the server describes them now: the only SQL about tables.

``load_tables`` reads ``information_schema.COLUMNS`` (and the primary key from
``KEY_COLUMN_USAGE``) in one pass per query, never per table, so a server with
thousands of tables costs two round trips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pymysql

from mysqlcdc.errors import ProtocolError
from mysqlcdc.protocol.connection import query
from mysqlcdc.schema.model import ColumnDef, TableDef, with_system_period

__all__ = ["SYSTEM_SCHEMAS", "load_tables", "load_table", "load_keys", "load_databases",
           "load_transaction_versioned",
           "load_server_charset", "load_server_settings", "parse_labels", "charset_of_collation"]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_SKIP = ", ".join(f"'{s}'" for s in sorted(SYSTEM_SCHEMAS))

_COLUMNS_SQL = f"""
SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE,
       c.CHARACTER_SET_NAME, c.IS_NULLABLE, c.CHARACTER_MAXIMUM_LENGTH, c.NUMERIC_PRECISION,
       c.NUMERIC_SCALE, c.DATETIME_PRECISION, c.EXTRA, t.TABLE_COLLATION, t.TABLE_TYPE,
       c.GENERATION_EXPRESSION
FROM information_schema.COLUMNS c
JOIN information_schema.TABLES t
  ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
WHERE c.TABLE_SCHEMA NOT IN ({_SKIP}) AND t.TABLE_TYPE <> 'VIEW'
ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION
"""

_PRIMARY_SQL = f"""
SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME
FROM information_schema.KEY_COLUMN_USAGE
WHERE CONSTRAINT_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN ({_SKIP})
"""

Include = Callable[[str, str], bool]


def load_tables(conn: pymysql.Connection, include: Include | None = None
                ) -> dict[tuple[str, str], TableDef]:
    """Every base table outside the system schemas that ``include(db, table)`` accepts.

    Columns come in ordinal order. Binary string columns get charset ``"binary"``
    (information_schema leaves it NULL for them); other non-string columns None.
    """
    primary = {(db, t, col) for db, t, col in query(conn, _PRIMARY_SQL)}
    columns: dict[tuple[str, str], list[ColumnDef]] = {}
    charsets: dict[tuple[str, str], str | None] = {}
    versioned: set[tuple[str, str]] = set()
    named: set[tuple[str, str]] = set()
    for db, table, *rest in query(conn, _COLUMNS_SQL):
        if include is not None and not include(db, table):
            continue
        column = _period_role(_column(rest[:10], is_primary_key=(db, table, rest[0]) in primary),
                              rest[12])
        columns.setdefault((db, table), []).append(column)
        charsets[(db, table)] = charset_of_collation(rest[10])
        if str(rest[11]) == _VERSIONED:
            versioned.add((db, table))
        if column.system is not None:
            named.add((db, table))
    # WITH SYSTEM VERSIONING alone hides its row_start/row_end from information_schema;
    # named period columns are listed, marked by _period_role
    tables = {key: TableDef(key[0], key[1], tuple(cols), charset=charsets[key])
              for key, cols in columns.items()}
    return {key: with_system_period(t) if key in versioned and key not in named else t
            for key, t in tables.items()}


_VERSIONED = "SYSTEM VERSIONED"
_PERIOD_EXPRESSIONS = {"ROW START": "row_start", "ROW END": "row_end"}


def _period_role(column: ColumnDef, expression) -> ColumnDef:
    """A named period column (``GENERATED ALWAYS AS ROW START``/``END``) marked as such."""
    role = _PERIOD_EXPRESSIONS.get(str(expression or "").upper())
    return column if role is None else replace(column, system=role)




_TABLE_COLUMNS_SQL = """
SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE,
       c.CHARACTER_SET_NAME, c.IS_NULLABLE, c.CHARACTER_MAXIMUM_LENGTH, c.NUMERIC_PRECISION,
       c.NUMERIC_SCALE, c.DATETIME_PRECISION, c.EXTRA, t.TABLE_COLLATION, c.COLUMN_KEY,
       t.TABLE_TYPE, c.GENERATION_EXPRESSION
FROM information_schema.COLUMNS c
JOIN information_schema.TABLES t
  ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
WHERE c.TABLE_SCHEMA = {db} AND c.TABLE_NAME = {table} AND t.TABLE_TYPE <> 'VIEW'
ORDER BY c.ORDINAL_POSITION
"""

_KEYS_SQL = """
SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = {db} AND TABLE_NAME = {table} AND NON_UNIQUE = 0 AND SUB_PART IS NULL
ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX
"""


def _literal(conn: pymysql.Connection, text: str) -> str:
    return conn.escape(text)


_TRANSACTION_PERIODS_SQL = f"""
SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.COLUMNS
WHERE GENERATION_EXPRESSION = 'ROW END' AND DATA_TYPE = 'bigint'
  AND TABLE_SCHEMA NOT IN ({_SKIP})
ORDER BY 1, 2
"""


def load_transaction_versioned(conn: pymysql.Connection) -> list[tuple[str, str]]:
    """MariaDB's tables versioned by transaction ids (``BIGINT UNSIGNED GENERATED ALWAYS
    AS ROW END``), as (db, table): the server logs their changes as statements, even
    under ``binlog_format=ROW``, so the binlog holds none of their rows."""
    return [(str(db), str(table)) for db, table in query(conn, _TRANSACTION_PERIODS_SQL)]


def load_table(conn: pymysql.Connection, db: str, table: str) -> TableDef | None:
    """One table's definition now (None when it does not exist), in one round trip:
    ``load_tables`` for a single table, without reading every table's columns."""
    rows = query(conn, _TABLE_COLUMNS_SQL.format(db=_literal(conn, db),
                                                 table=_literal(conn, table)))
    if not rows:
        return None
    primary = load_keys(conn, db, table).get("PRIMARY", ()) if any(
        str(r[11]).upper() == "PRI" for r in rows) else ()
    columns = tuple(_period_role(_column(list(r[:10]), is_primary_key=str(r[0]) in primary),
                                 r[13]) for r in rows)
    hidden = str(rows[0][12]) == _VERSIONED and not any(c.system for c in columns)
    found = TableDef(db, table, columns, charset=charset_of_collation(rows[0][10]))
    return with_system_period(found) if hidden else found


def load_keys(conn: pymysql.Connection, db: str, table: str) -> dict[str, tuple[str, ...]]:
    """The table's unique indexes over whole columns (``PRIMARY`` first), each with its
    columns in index order."""
    keys: dict[str, tuple[str, ...]] = {}
    for name, column in query(conn, _KEYS_SQL.format(db=_literal(conn, db),
                                                     table=_literal(conn, table))):
        keys[str(name)] = keys.get(str(name), ()) + (str(column),)
    return keys


_DATABASES_SQL = f"""
SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA
WHERE SCHEMA_NAME NOT IN ({_SKIP})
"""


def load_databases(conn: pymysql.Connection) -> dict[str, str | None]:
    """Every database outside the system schemas -> its default character set."""
    return {str(name): (str(cs).lower() if cs else None) for name, cs in query(conn, _DATABASES_SQL)}


def load_server_charset(conn: pymysql.Connection) -> str:
    """``character_set_server``: the default of a new database that names none."""
    return str(query(conn, "SELECT @@global.character_set_server")[0][0]).lower()


def load_server_settings(conn: pymysql.Connection) -> dict:
    """What decides a new column's definition beyond the DDL text, as Catalog fields.

    ``utf8_name`` is what the server calls ``utf8`` (``utf8mb3`` or, with old_mode
    changes or older servers, something else); ``explicit_defaults_for_timestamp``
    decides whether a TIMESTAMP without NULL/NOT NULL is nullable.
    """
    (charset, explicit, lower, utf8), = query(
        conn, "SELECT @@global.character_set_server, @@global.explicit_defaults_for_timestamp, "
              "@@lower_case_table_names, CHARSET(CONVERT('' USING utf8))")
    return {"server_charset": str(charset).lower(),
            "explicit_defaults_for_timestamp": bool(int(explicit)),
            "lower_case_table_names": int(lower),
            "utf8_name": str(utf8).lower()}


def charset_of_collation(collation: str | None) -> str | None:
    """``utf8mb4_general_ci`` -> ``utf8mb4``; ``binary`` -> ``binary``."""
    if not collation:
        return None
    return str(collation).split("_", 1)[0].lower()


_LENGTH_TYPES = frozenset({"char", "varchar", "binary", "varbinary"})
_FSP_TYPES = frozenset({"time", "datetime", "timestamp"})


def _column(row: list, *, is_primary_key: bool) -> ColumnDef:
    (name, data_type, column_type, charset, nullable, char_len, num_precision, num_scale,
     dt_precision, extra) = row
    data_type, column_type = str(data_type).lower(), str(column_type)
    extra = str(extra or "").upper()
    labels = parse_labels(column_type) if data_type in ("enum", "set") else ()
    if charset is None and data_type in _BINARY_TYPES:
        charset = "binary"
    length = None
    if data_type in _LENGTH_TYPES and char_len is not None:
        length = int(char_len)
    elif data_type == "bit" and num_precision is not None:
        length = int(num_precision)
    decimal = data_type == "decimal"
    return ColumnDef(
        name=str(name), data_type=data_type,
        unsigned=" unsigned" in column_type.lower(),
        charset=None if charset is None else str(charset),
        enum_values=labels if data_type == "enum" else (),
        set_values=labels if data_type == "set" else (),
        is_primary_key=is_primary_key, nullable=str(nullable).upper() == "YES",
        column_type=column_type, length=length,
        precision=int(num_precision) if decimal and num_precision is not None else None,
        scale=int(num_scale) if decimal and num_scale is not None else None,
        fsp=int(dt_precision or 0) if data_type in _FSP_TYPES else None,
        invisible="INVISIBLE" in extra,
        generated="GENERATED" in extra,
    )


def parse_labels(column_type: str) -> tuple[str, ...]:
    """The labels of ``enum('a','it''s','x,y')`` / ``set(...)`` as the server shows them.

    COLUMN_TYPE doubles quotes and backslash-escapes backslashes, NUL, CR, LF and ^Z.
    """
    body = column_type[column_type.index("(") + 1:column_type.rindex(")")]
    labels: list[str] = []
    i = 0
    while i < len(body):
        if body[i] != "'":
            i += 1  # commas and spaces between labels
            continue
        label, i = _quoted(body, i + 1)
        labels.append(label)
    return tuple(labels)


_ESCAPES = {"0": "\0", "Z": "\x1a", "n": "\n", "r": "\r", "t": "\t"}


def _quoted(text: str, i: int) -> tuple[str, int]:
    """Read a quoted label starting after its opening quote; return it and the next index."""
    out: list[str] = []
    while i < len(text):
        pair = text[i:i + 2]
        if pair == "''":
            out.append("'")
        elif pair[:1] == "\\" and len(pair) == 2:
            out.append(_ESCAPES.get(pair[1], pair[1]))
        elif text[i] == "'":
            return "".join(out), i + 1
        else:
            out.append(text[i])
            i += 1
            continue
        i += 2
    raise ProtocolError(f"unterminated label in column type {text!r}")
