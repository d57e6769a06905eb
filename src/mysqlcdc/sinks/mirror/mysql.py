"""MySQL/MariaDB mirror target: one database per source database, tables of the same name.

Type mapping: the source's own ``COLUMN_TYPE`` (``int(10) unsigned``, ``decimal(12,4)``,
``enum('a','b')``, ``set(...)``, ``bit(10)``, ``varbinary(8)``, ``datetime(3)``, ``json``
...) with the column's character set, so values round-trip exactly; GEOMETRY types
become ``longblob`` holding the SRID-prefixed WKB. The session runs with
``time_zone = '+00:00'`` (TIMESTAMP values arrive in UTC) and a sql_mode that is strict
but allows zero dates, which are written as the source shows them. Values only a lax
source sql_mode lets in (an ENUM's empty error value, ``2024-02-30`` under
ALLOW_INVALID_DATES) are refused by that mode; their statement is run again under a lax
one, so they too arrive as the source holds them.

DDL commits implicitly in MySQL/MariaDB, so a batch holding schema changes is committed
in steps: before each DDL, everything before it is committed with a mark in
``mysqlcdc_offsets`` (``partial_batch``, ``partial_seq``); a replay of that batch skips
what the mark covers. A truncate is a ``DELETE`` (transactional). Ledger tables live in
the database named by ``settings.database``.
"""

from __future__ import annotations

from decimal import Decimal

import json
import logging
from datetime import datetime, timezone

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.history import NOT_BEFORE_FROM, close_params, utc_text
from mysqlcdc.sinks.mirror.values import GEOMETRY_TYPES, python_value
from mysqlcdc.sinks.mirror.writer import (ColumnChange, RetryableTargetError, SqlSavepoints,
                                          TableRefused, TargetAuthError, key_index_name,
                                          current_starts_of, last_rows_of)

__all__ = ["MySQLTarget", "mysql_type"]

log = logging.getLogger(__name__)

_GONE = {2003, 2006, 2013, 2055, 1053, 1927, 4031}
_AUTH = {1044, 1045, 1698}


_STRICT = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO"
_LAX = "NO_ENGINE_SUBSTITUTION,ALLOW_INVALID_DATES"
_LAX_CODES = {1265, 1292, 1366}      # data truncated, wrong date, wrong value


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mysql_type(col: ColumnDef) -> str:
    t = col.data_type
    if t in GEOMETRY_TYPES:
        return "longblob"
    text = col.column_type or {
        "decimal": f"decimal({col.precision or 10},{col.scale or 0})",
        "varchar": f"varchar({col.length or 255})", "char": f"char({col.length or 1})",
        "varbinary": f"varbinary({col.length or 255})", "binary": f"binary({col.length or 1})",
        "bit": f"bit({col.length or 1})",
        "datetime": f"datetime({col.fsp or 0})", "timestamp": f"timestamp({col.fsp or 0})",
        "time": f"time({col.fsp or 0})",
        "enum": "enum(" + ",".join(_lit(v) for v in col.enum_values) + ")",
        "set": "set(" + ",".join(_lit(v) for v in col.set_values) + ")",
    }.get(t, t)
    if col.unsigned and "unsigned" not in text:
        text += " unsigned"
    if col.charset and col.charset != "binary" and t not in ("json",):
        text += f" CHARACTER SET {col.charset}"
    if t == "timestamp":
        text += " NULL"
    return text


def _lit(v: str) -> str:
    return "'" + v.replace("\\", "\\\\").replace("'", "''") + "'"


class MySQLTarget(SqlSavepoints):
    """One connection; see writer.Target. DDL is not transactional here."""

    transactional_ddl = False

    def __init__(self, settings) -> None:
        self.s = settings
        self.conn = None
        self._sp = 0

    def connect(self) -> None:
        import pymysql

        try:
            self.conn = pymysql.connect(host=self.s.host, port=self.s.port, user=self.s.user,
                                        password=self.s.password, autocommit=False,
                                        connect_timeout=max(1, int(self.s.connect_timeout_s)),
                                        charset="utf8mb4", read_timeout=300, write_timeout=300)
        except pymysql.err.OperationalError as err:
            if err.args and err.args[0] in _AUTH:
                raise TargetAuthError(f"user {self.s.user!r} at {self.s.host}:{self.s.port}") \
                    from None
            raise RetryableTargetError(_one_line(err)) from None
        self._x(f"SET SESSION time_zone = '+00:00', sql_mode = '{_STRICT}'")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _x(self, statement: str, params=None, *, many: bool = False):
        import pymysql

        try:
            cur = self.conn.cursor()
            if many:
                cur.executemany(statement, params)
            else:
                cur.execute(statement, params)
            return cur
        except pymysql.err.Error as err:
            code = err.args[0] if err.args and isinstance(err.args[0], int) else None
            if code in _GONE or isinstance(err, pymysql.err.InterfaceError) or not self.conn.open:
                raise RetryableTargetError(_one_line(err)) from None
            raise TableRefused(_one_line(err), code) from None

    @property
    def _ledger(self) -> str:
        return q(self.s.database)

    # -- batch ----------------------------------------------------------------
    def begin(self, pipeline: str):
        self._x(f"CREATE DATABASE IF NOT EXISTS {self._ledger}")
        self._x(f"CREATE TABLE IF NOT EXISTS {self._ledger}.mysqlcdc_offsets (pipeline "
                "VARCHAR(190) PRIMARY KEY, batch_id BIGINT NOT NULL, position TEXT, "
                "seq DECIMAL(38,0), partial_batch BIGINT, partial_seq DECIMAL(38,0), "
                "committed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) "
                "ENGINE=InnoDB")
        self._x(f"CREATE TABLE IF NOT EXISTS {self._ledger}.mysqlcdc_mirror_stopped (pipeline "
                "VARCHAR(190), db VARCHAR(64), tbl VARCHAR(64), code VARCHAR(64), message TEXT, "
                "seq DECIMAL(38,0), stopped_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),"
                " PRIMARY KEY (pipeline, db, tbl)) ENGINE=InnoDB")
        self.conn.commit()
        row = self._x(f"SELECT batch_id FROM {self._ledger}.mysqlcdc_offsets WHERE pipeline = %s "
                      "FOR UPDATE", (pipeline,)).fetchone()
        stopped = {(d, t) for d, t in self._x(
            f"SELECT db, tbl FROM {self._ledger}.mysqlcdc_mirror_stopped WHERE pipeline = %s",
            (pipeline,)).fetchall()}
        return (row[0] if row and row[0] >= 0 else None), stopped

    def partial(self, pipeline: str):
        row = self._x(f"SELECT partial_batch, partial_seq FROM {self._ledger}.mysqlcdc_offsets "
                      "WHERE pipeline = %s", (pipeline,)).fetchone()
        return (row[0], str(row[1])) if row and row[0] is not None else None

    def mark(self, pipeline: str, batch_id: int, seq: str) -> None:
        """Commit what is applied so far, noting how far batch ``batch_id`` got."""
        self._x(f"INSERT INTO {self._ledger}.mysqlcdc_offsets (pipeline, batch_id, "
                "partial_batch, partial_seq) VALUES (%s, -1, %s, %s) ON DUPLICATE KEY UPDATE "
                "partial_batch = VALUES(partial_batch), partial_seq = VALUES(partial_seq)",
                (pipeline, batch_id, seq))
        self._commit()

    def commit(self, pipeline: str, batch_id: int, position: str, seq: str) -> None:
        self._x(f"INSERT INTO {self._ledger}.mysqlcdc_offsets (pipeline, batch_id, position, "
                "seq) VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE batch_id = "
                "VALUES(batch_id), position = VALUES(position), seq = VALUES(seq), "
                "partial_batch = NULL, partial_seq = NULL, committed_at = CURRENT_TIMESTAMP(3)",
                (pipeline, batch_id, position, seq or None))
        self._commit()

    def _commit(self) -> None:
        import pymysql

        try:
            self.conn.commit()
        except pymysql.err.Error as err:
            raise RetryableTargetError(_one_line(err)) from None

    def rollback(self) -> None:
        self.conn.rollback()

    def stop_table(self, pipeline, db, table, code, message, seq) -> None:
        self._x(f"INSERT INTO {self._ledger}.mysqlcdc_mirror_stopped (pipeline, db, tbl, code, "
                "message, seq) VALUES (%s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
                "code = VALUES(code), message = VALUES(message), seq = VALUES(seq)",
                (pipeline, db, table, code, message, seq or None))

    def read_position(self, pipeline: str) -> dict:
        from mysqlcdc.sinks.mirror.postgresql import _position

        if not self.table_exists(self.s.database, "mysqlcdc_offsets"):
            return _position(None, [])
        row = self._x(f"SELECT batch_id, position, CAST(seq AS CHAR), CAST(committed_at AS CHAR) "
                      f"FROM {self._ledger}.mysqlcdc_offsets WHERE pipeline = %s",
                      (pipeline,)).fetchone()
        if row and row[0] < 0:
            row = None
        stopped = self._x(f"SELECT db, tbl, code, message, CAST(seq AS CHAR) FROM {self._ledger}"
                          ".mysqlcdc_mirror_stopped WHERE pipeline = %s ORDER BY db, tbl",
                          (pipeline,)).fetchall() \
            if self.table_exists(self.s.database, "mysqlcdc_mirror_stopped") else []
        self.conn.rollback()
        return _position(row, stopped)

    # -- tables ---------------------------------------------------------------
    def table_exists(self, db: str, table: str) -> bool:
        return self._x("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                       "table_name = %s", (db, table)).fetchone() is not None

    def last_rows(self, d: TableDef, names: tuple[str, ...],
                  keys: list[dict]) -> list[tuple[int, Decimal] | None]:
        """See PostgresTarget.last_rows. MySQL has no CREATE INDEX IF NOT EXISTS (and DDL
        commits): the index is made once, when information_schema lacks it; a key type
        that cannot be indexed whole is looked up without one."""
        index = key_index_name(d.name, names)
        cols = ", ".join(q(n) for n in names)
        table = f"{q(d.db)}.{q(d.name)}"
        if self._x("SELECT 1 FROM information_schema.statistics WHERE table_schema = %s AND "
                   "table_name = %s AND index_name = %s", (d.db, d.name, index)).fetchone() is None:
            try:
                self._x(f"CREATE INDEX {q(index)} ON {table} ({cols})")
            except TableRefused as err:
                log.warning("changelog table %s.%s: no index on its key (%s); reads of the "
                            "table again look keys up without one", d.db, d.name, err)
        self._commit()
        by_name = {c.name: c for c in d.columns}
        one = "(" + ", ".join(["%s"] * len(names)) + ")"

        def query(part):
            return self._x(f"SELECT {cols}, dml_type, gsn FROM {table} WHERE ({cols}) IN "
                           f"({', '.join([one] * len(part))}) AND dml_type <> 0 ORDER BY gsn",
                           [v for key in part for v in key]).fetchall()
        return last_rows_of(keys, names, lambda c, v: _bind(by_name[c], v), query)

    def create_table(self, d: TableDef) -> None:
        cols = [f"{q(c.name)} {mysql_type(c)}{' NOT NULL' if c.is_primary_key else ''}"
                for c in d.columns]
        cols.append("PRIMARY KEY (" + ", ".join(q(n) for n in d.primary_key) + ")")
        self._x(f"CREATE DATABASE IF NOT EXISTS {q(d.db)}")
        self._x(f"CREATE TABLE {q(d.db)}.{q(d.name)} ({', '.join(cols)}) ENGINE=InnoDB "
                "DEFAULT CHARSET=utf8mb4")

    def drop_table(self, db: str, table: str) -> None:
        self._x(f"DROP TABLE IF EXISTS {q(db)}.{q(table)}")

    def rename_table(self, old, new) -> None:
        self._x(f"CREATE DATABASE IF NOT EXISTS {q(new[0])}")
        self._x(f"RENAME TABLE {q(old[0])}.{q(old[1])} TO {q(new[0])}.{q(new[1])}")

    def alter_table(self, before: TableDef, after: TableDef, changes: list[ColumnChange]) -> None:
        # Replayed after a crash between the DDL's implicit commit and the ledger mark, a
        # change already made is left out (DDL here cannot roll back with the batch).
        have = {r[0] for r in self._x(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
            "table_name = %s", (after.db, after.name)).fetchall()}
        pk_now = tuple(r[0] for r in self._x(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
            "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            (after.db, after.name)).fetchall())
        parts = []
        for ch in changes:
            if ch.kind in ("rename", "drop") and ch.old_name not in have:
                continue
            if ch.kind == "add" and ch.column.name in have:
                continue
            if ch.kind == "rename":
                parts.append(f"RENAME COLUMN {q(ch.old_name)} TO {q(ch.column.name)}")
            elif ch.kind == "drop":
                parts.append(f"DROP COLUMN {q(ch.old_name)}")
            elif ch.kind == "add":
                parts.append(f"ADD COLUMN {q(ch.column.name)} {mysql_type(ch.column)}")
            elif ch.kind == "retype":
                pk = " NOT NULL" if ch.column.is_primary_key else ""
                parts.append(f"MODIFY COLUMN {q(ch.column.name)} {mysql_type(ch.column)}{pk}")
        if before.primary_key != after.primary_key and pk_now != after.primary_key:
            parts += ["DROP PRIMARY KEY",
                      "ADD PRIMARY KEY (" + ", ".join(q(n) for n in after.primary_key) + ")"]
        if parts:
            self._x(f"ALTER TABLE {q(after.db)}.{q(after.name)} " + ", ".join(parts))

    def truncate(self, db: str, table: str) -> None:
        self._x(f"DELETE FROM {q(db)}.{q(table)}")     # TRUNCATE would commit implicitly

    # -- rows -----------------------------------------------------------------
    def upsert(self, d: TableDef, rows: list[dict]) -> None:
        cols = {c.name: c for c in d.columns}
        groups: dict[tuple[str, ...], list[tuple]] = {}
        for row in rows:
            names = tuple(n for n in row if n in cols)
            groups.setdefault(names, []).append(tuple(_bind(cols[n], row[n]) for n in names))
        pk = d.primary_key
        for names, values in groups.items():
            rest = [n for n in names if n not in pk] or [pk[0]]
            stmt = (f"INSERT INTO {q(d.db)}.{q(d.name)} ({', '.join(q(n) for n in names)}) "
                    f"VALUES ({', '.join(['%s'] * len(names))}) ON DUPLICATE KEY UPDATE "
                    + ", ".join(f"{q(n)} = VALUES({q(n)})" for n in rest))
            try:
                self._x(stmt, values, many=True)
            except TableRefused as err:
                if err.code not in _LAX_CODES:
                    raise
                self._lax(stmt, values)

    def _lax(self, stmt: str, values: list[tuple]) -> None:
        """Write rows the strict session refused, as the source's own lax sql_mode kept
        them: an ENUM's empty error value, an invalid date such as ``2024-02-30``. The
        target's columns have the source's types, so nothing else can be cut here; the
        failed statement was undone alone, the transaction goes on."""
        self._x(f"SET SESSION sql_mode = '{_LAX}'")
        try:
            self._x(stmt, values, many=True)
        finally:
            self._x(f"SET SESSION sql_mode = '{_STRICT}'")

    def delete(self, d: TableDef, keys: list[dict]) -> None:
        cols = {c.name: c for c in d.columns}
        pk = d.primary_key
        stmt = (f"DELETE FROM {q(d.db)}.{q(d.name)} WHERE "
                + " AND ".join(f"{q(n)} = %s" for n in pk))
        self._x(stmt, [tuple(_bind(cols[n], k[n]) for n in pk) for k in keys], many=True)


    # -- history mode -----------------------------------------------------------
    def close_versions(self, d: TableDef, closes) -> None:
        """End each key's current version (history mode; see history.py)."""
        pk, params = close_params(d, closes, _bind)
        # valid_to never before valid_from (history._end_time)
        stmt = (f"UPDATE {q(d.db)}.{q(d.name)} SET valid_to = {NOT_BEFORE_FROM}, "
                "valid_to_seq = %s, is_current = 0 WHERE "
                + " AND ".join(f"{q(n)} = %s" for n in pk)
                + " AND is_current AND valid_from_seq < %s")
        self._x(stmt, [(p[0], *p) for p in params], many=True)

    def current_starts(self, d: TableDef, keys: set[str]) -> dict[str, Decimal]:
        """See PostgresTarget.current_starts."""
        def query(pk, part):
            cols = ", ".join(q(n) for n in pk)
            one = "(" + ", ".join(["%s"] * len(pk)) + ")"
            return self._x(f"SELECT {cols}, valid_from_seq FROM {q(d.db)}.{q(d.name)} WHERE "
                           f"is_current AND ({cols}) IN ({', '.join([one] * len(part))})",
                           [v for key in part for v in key]).fetchall()
        return current_starts_of(d, keys, _bind, query) if keys else {}

    def close_all(self, db: str, table: str, ts_ms, seq) -> None:
        """History mode's truncate: every current version ends here."""
        when = utc_text(ts_ms)
        if when is not None:
            when = datetime.fromisoformat(when).replace(tzinfo=None)
        self._x(f"UPDATE {q(db)}.{q(table)} SET valid_to = {NOT_BEFORE_FROM}, "
                "valid_to_seq = %s, is_current = 0 WHERE is_current", (when, when, seq))


def _bind(col: ColumnDef, value):
    if value is None:
        return None
    if col.data_type == "json":
        return json.dumps(value, ensure_ascii=False)
    v = python_value(col, value, zero_dates="keep")
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(timezone.utc).replace(tzinfo=None)
    return v


def _one_line(err) -> str:
    return " ".join(str(err).split())[:500]
