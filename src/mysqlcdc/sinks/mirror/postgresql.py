"""PostgreSQL mirror target: one schema per source database, one table per source table.

Type mapping (source column -> PostgreSQL):

=========================================  ==========================================
TINYINT, SMALLINT (unsigned: SMALLINT u.)  smallint (unsigned smallint: integer)
MEDIUMINT, INT                             integer (unsigned INT: bigint)
BIGINT                                     bigint (unsigned: numeric(20,0))
DECIMAL(p,s)                               numeric(p,s)
FLOAT / DOUBLE                             real / double precision
BIT(n)                                     bigint (BIT(64): numeric(20,0)), the number
YEAR                                       smallint
DATE / DATETIME(f) / TIMESTAMP(f)          date / timestamp(f) / timestamptz(f) (UTC)
zero or invalid dates                      NULL (PostgreSQL has no zero date)
TIME(f)                                    interval (MySQL TIME spans ±838 hours)
CHAR, VARCHAR, TEXT types                  text
BINARY, VARBINARY, BLOB types              bytea
ENUM                                       text (the label)
SET                                        text (labels joined by commas, as MySQL shows)
JSON                                       jsonb
GEOMETRY types                             bytea (SRID-prefixed WKB)
=========================================  ==========================================

Primary-key columns are NOT NULL; every other column is nullable (the source enforces
its constraints). Ledger tables live in the ``public`` schema: ``mysqlcdc_offsets``
(one row per pipeline: last batch id, end position, end ``seq``) and
``mysqlcdc_mirror_stopped`` (tables the mirror stopped, with the error).
"""

from __future__ import annotations

from decimal import Decimal

from datetime import datetime

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.history import NOT_BEFORE_FROM, close_params, utc_text
from mysqlcdc.sinks.mirror.values import BINARY_TYPES, GEOMETRY_TYPES, TEXT_TYPES, python_value
from mysqlcdc.sinks.mirror.writer import (ColumnChange, RetryableTargetError, SqlSavepoints,
                                          TableRefused, TargetAuthError, key_index_name,
                                          current_starts_of, last_rows_of)

__all__ = ["PostgresTarget", "pg_type"]

_DDL_LOCK = int.from_bytes(b"mysqlcdc", "big")     # the advisory lock key of the DDL

_SMALL = {"tinyint": ("smallint", "smallint"), "smallint": ("smallint", "integer"),
          "mediumint": ("integer", "integer"), "int": ("integer", "bigint"),
          "integer": ("integer", "bigint"), "bigint": ("bigint", "numeric(20,0)")}


def pg_type(col: ColumnDef) -> str:
    t = col.data_type
    if t in _SMALL:
        return _SMALL[t][1 if col.unsigned else 0]
    if t in ("decimal", "numeric"):
        return f"numeric({col.precision or 10},{col.scale or 0})"
    if t == "float":
        return "real"
    if t in ("double", "real"):
        return "double precision"
    if t == "bit":
        return "numeric(20,0)" if (col.length or 1) > 63 else "bigint"
    if t == "year":
        return "smallint"
    if t == "date":
        return "date"
    if t == "datetime":
        return f"timestamp({col.fsp or 0})"
    if t == "timestamp":
        return f"timestamptz({col.fsp or 0})"
    if t == "time":
        return "interval"
    if t in BINARY_TYPES or t in GEOMETRY_TYPES or (t in TEXT_TYPES and col.charset == "binary"):
        return "bytea"
    if t == "json":
        return "jsonb"
    if t in ("inet6", "inet4"):           # MariaDB's address types: their text is inet's
        return "inet"
    if t == "uuid":
        return "uuid"
    if t == "bool":                       # history mode's is_current
        return "boolean"
    if t in TEXT_TYPES or t in ("enum", "set"):
        return "text"
    raise TableRefused(f"column {col.name!r}: type {col.column_type or t!r} has no PostgreSQL "
                       "mapping")


class PostgresTarget(SqlSavepoints):
    """One connection, one transaction per batch (see writer.Target)."""

    def __init__(self, settings) -> None:
        self.s = settings
        self.conn = None
        self._sp = 0

    # -- connection -----------------------------------------------------------
    def connect(self) -> None:
        import psycopg

        try:
            self.conn = psycopg.connect(host=self.s.host, port=self.s.port, user=self.s.user,
                                        password=self.s.password, dbname=self.s.database,
                                        connect_timeout=max(1, int(self.s.connect_timeout_s)))
        except psycopg.OperationalError as err:
            text = str(err)
            if "authentication failed" in text or "password" in text and "supplied" in text:
                raise TargetAuthError(f"user {self.s.user!r} at {self.s.host}:{self.s.port}") \
                    from None
            raise RetryableTargetError(_one_line(text)) from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _x(self, statement, params=None, *, many: bool = False):
        """Execute; a lost connection is retryable, any other error refuses the table."""
        import psycopg

        try:
            cur = self.conn.cursor()
            if many:
                cur.executemany(statement, params)
            else:
                cur.execute(statement, params)
            return cur
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            if isinstance(err, psycopg.errors.QueryCanceled) or not _connection_gone(self.conn):
                raise TableRefused(_one_line(str(err))) from None
            raise RetryableTargetError(_one_line(str(err))) from None
        except psycopg.Error as err:
            raise TableRefused(_one_line(str(err))) from None

    def _ddl_lock(self) -> None:
        """Serialise this transaction's ``IF NOT EXISTS`` DDL with every other writer's.

        PostgreSQL's ``CREATE TABLE/SCHEMA IF NOT EXISTS`` is not safe against itself: two
        sessions creating the same name at once (a mirror and a changelog_table sink into
        one database, or two pipelines starting together) make one of them fail with a
        unique violation in the catalog. A transaction-scoped advisory lock, released at
        the commit, lets the second see the first's table instead."""
        self._x("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))

    # -- batch ------------------------------------------------------------------
    def begin(self, pipeline: str):
        self._ddl_lock()
        self._x("CREATE TABLE IF NOT EXISTS public.mysqlcdc_offsets (pipeline text PRIMARY KEY, "
                "batch_id bigint NOT NULL, position text, seq numeric(38,0), "
                "committed_at timestamptz NOT NULL DEFAULT now())")
        self._x("CREATE TABLE IF NOT EXISTS public.mysqlcdc_mirror_stopped (pipeline text, "
                "db text, tbl text, code text, message text, seq numeric(38,0), "
                "stopped_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (pipeline, db, tbl))")
        self.conn.commit()
        row = self._x("SELECT batch_id FROM public.mysqlcdc_offsets WHERE pipeline = %s FOR UPDATE",
                      (pipeline,)).fetchone()
        stopped = {(d, t) for d, t in self._x(
            "SELECT db, tbl FROM public.mysqlcdc_mirror_stopped WHERE pipeline = %s",
            (pipeline,)).fetchall()}
        return (row[0] if row else None), stopped

    def commit(self, pipeline: str, batch_id: int, position: str, seq: str) -> None:
        self._x("INSERT INTO public.mysqlcdc_offsets (pipeline, batch_id, position, seq) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (pipeline) DO UPDATE SET "
                "batch_id = EXCLUDED.batch_id, position = EXCLUDED.position, seq = EXCLUDED.seq, "
                "committed_at = now()", (pipeline, batch_id, position, seq or None))
        import psycopg

        try:
            self.conn.commit()
        except psycopg.Error as err:
            raise RetryableTargetError(_one_line(str(err))) from None

    def rollback(self) -> None:
        self.conn.rollback()

    def stop_table(self, pipeline, db, table, code, message, seq) -> None:
        self._x("INSERT INTO public.mysqlcdc_mirror_stopped (pipeline, db, tbl, code, message, seq) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (pipeline, db, tbl) DO UPDATE SET "
                "code = EXCLUDED.code, message = EXCLUDED.message, seq = EXCLUDED.seq",
                (pipeline, db, table, code, message, seq or None))

    def read_position(self, pipeline: str) -> dict:
        """The ledger row and the stopped tables of ``pipeline`` (no transaction kept)."""
        if not self.table_exists("public", "mysqlcdc_offsets"):
            return {"batch_id": None, "position": None, "seq": None, "stopped": []}
        row = self._x("SELECT batch_id, position, seq::text, committed_at::text FROM "
                      "public.mysqlcdc_offsets WHERE pipeline = %s", (pipeline,)).fetchone()
        stopped = self._x("SELECT db, tbl, code, message, seq::text FROM "
                          "public.mysqlcdc_mirror_stopped WHERE pipeline = %s ORDER BY db, tbl",
                          (pipeline,)).fetchall() \
            if self.table_exists("public", "mysqlcdc_mirror_stopped") else []
        self.conn.rollback()
        return _position(row, stopped)

    # -- tables -----------------------------------------------------------------
    def _name(self, db: str, table: str):
        from psycopg import sql

        return sql.Identifier(db, table)

    def table_exists(self, db: str, table: str) -> bool:
        return self._x("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                       "table_name = %s", (db, table)).fetchone() is not None

    def last_rows(self, d: TableDef, names: tuple[str, ...],
                  keys: list[dict]) -> list[tuple[int, Decimal] | None]:
        """For each key (values of the columns ``names``), the ``(dml_type, gsn)`` of the
        changelog table ``d``'s last counted row of it (``dml_type`` +1 or -1; None: none). The
        table gets an index on those columns for it (once, under the DDL lock); committed,
        since no batch is open yet."""
        from psycopg import sql

        index = sql.Identifier(key_index_name(d.name, names))
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        self._ddl_lock()
        self._x(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
            index, self._name(d.db, d.name), cols))
        self.conn.commit()
        by_name = {c.name: c for c in d.columns}

        def query(part):
            rows = sql.SQL(", ").join(sql.SQL("({})").format(
                sql.SQL(", ").join(sql.Placeholder() * len(names))) for _ in part)
            stmt = sql.SQL("SELECT {}, dml_type, gsn FROM {} WHERE ({}) IN ({}) "
                           "AND dml_type <> 0 ORDER BY gsn").format(
                cols, self._name(d.db, d.name), cols, rows)
            return self._x(stmt, [v for key in part for v in key]).fetchall()
        return last_rows_of(keys, names, lambda c, v: _bind(by_name[c], v), query)

    def create_table(self, d: TableDef) -> None:
        from psycopg import sql

        cols = [sql.SQL("{} {}{}").format(sql.Identifier(c.name), sql.SQL(pg_type(c)),
                                          sql.SQL(" NOT NULL" if c.is_primary_key else ""))
                for c in d.columns]
        cols.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, d.primary_key))))
        self._ddl_lock()
        self._x(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(d.db)))
        self._x(sql.SQL("CREATE TABLE {} ({})").format(self._name(d.db, d.name),
                                                        sql.SQL(", ").join(cols)))

    def drop_table(self, db: str, table: str) -> None:
        from psycopg import sql

        self._x(sql.SQL("DROP TABLE IF EXISTS {}").format(self._name(db, table)))

    def rename_table(self, old, new) -> None:
        from psycopg import sql

        if old[0] != new[0]:
            self._ddl_lock()
            self._x(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(new[0])))
            self._x(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(self._name(*old),
                                                                   sql.Identifier(new[0])))
        if old[1] != new[1]:
            self._x(sql.SQL("ALTER TABLE {} RENAME TO {}").format(self._name(new[0], old[1]),
                                                                  sql.Identifier(new[1])))

    def alter_table(self, before: TableDef, after: TableDef, changes: list[ColumnChange]) -> None:
        from psycopg import sql

        name = self._name(after.db, after.name)
        for ch in changes:
            if ch.kind == "rename":
                self._x(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                    name, sql.Identifier(ch.old_name), sql.Identifier(ch.column.name)))
            elif ch.kind == "drop":
                self._x(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(
                    name, sql.Identifier(ch.old_name)))
            elif ch.kind == "add":
                self._x(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    name, sql.Identifier(ch.column.name), sql.SQL(pg_type(ch.column))))
            elif ch.kind == "retype":
                typ = pg_type(ch.column)
                self._x(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                    name, sql.Identifier(ch.column.name), sql.SQL(typ),
                    sql.Identifier(ch.column.name), sql.SQL(typ)))
        if before.primary_key != after.primary_key:
            row = self._x("SELECT conname FROM pg_constraint c JOIN pg_namespace n ON "
                          "n.oid = c.connamespace WHERE c.contype = 'p' AND n.nspname = %s AND "
                          "c.conrelid = (quote_ident(%s) || '.' || quote_ident(%s))::regclass",
                          (after.db, after.db, after.name)).fetchone()
            if row:
                self._x(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                    name, sql.Identifier(row[0])))
            self._x(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                name, sql.SQL(", ").join(map(sql.Identifier, after.primary_key))))

    def truncate(self, db: str, table: str) -> None:
        from psycopg import sql

        self._x(sql.SQL("TRUNCATE {}").format(self._name(db, table)))

    # -- rows ---------------------------------------------------------------------
    def upsert(self, d: TableDef, rows: list[dict]) -> None:
        from psycopg import sql

        cols = {c.name: c for c in d.columns}
        groups: dict[tuple[str, ...], list[tuple]] = {}
        for row in rows:
            names = tuple(n for n in row if n in cols)
            groups.setdefault(names, []).append(
                tuple(_bind(cols[n], row[n]) for n in names))
        pk = d.primary_key
        for names, values in groups.items():
            rest = [n for n in names if n not in pk]
            action = (sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in rest))
                if rest else sql.SQL("DO NOTHING"))
            stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
                self._name(d.db, d.name), sql.SQL(", ").join(map(sql.Identifier, names)),
                sql.SQL(", ").join(sql.Placeholder() * len(names)),
                sql.SQL(", ").join(map(sql.Identifier, pk)), action)
            self._x(stmt, values, many=True)

    def delete(self, d: TableDef, keys: list[dict]) -> None:
        from psycopg import sql

        cols = {c.name: c for c in d.columns}
        pk = d.primary_key
        stmt = sql.SQL("DELETE FROM {} WHERE {}").format(
            self._name(d.db, d.name),
            sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in pk))
        self._x(stmt, [tuple(_bind(cols[n], k[n]) for n in pk) for k in keys], many=True)


    # -- history mode ---------------------------------------------------------------
    def close_versions(self, d: TableDef, closes) -> None:
        """End each key's current version (history mode; see history.py)."""
        from psycopg import sql

        pk, params = close_params(d, closes, _bind)
        # valid_to never before valid_from (history._end_time)
        stmt = sql.SQL("UPDATE {} SET valid_to = " + NOT_BEFORE_FROM + ", valid_to_seq = %s, "
                       "is_current = false WHERE {} AND is_current AND valid_from_seq < %s").format(
            self._name(d.db, d.name),
            sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in pk))
        self._x(stmt, [(p[0], *p) for p in params], many=True)

    def current_starts(self, d: TableDef, keys: set[str]) -> dict[str, Decimal]:
        """Each key's current version's ``valid_from_seq`` (history mode; drop_late)."""
        from psycopg import sql

        def query(pk, part):
            cols = sql.SQL(", ").join(map(sql.Identifier, pk))
            rows = sql.SQL(", ").join(sql.SQL("({})").format(
                sql.SQL(", ").join(sql.Placeholder() * len(pk))) for _ in part)
            stmt = sql.SQL("SELECT {}, valid_from_seq FROM {} WHERE is_current AND ({}) IN "
                           "({})").format(cols, self._name(d.db, d.name), cols, rows)
            return self._x(stmt, [v for key in part for v in key]).fetchall()
        return current_starts_of(d, keys, _bind, query) if keys else {}

    def close_all(self, db: str, table: str, ts_ms, seq) -> None:
        """History mode's truncate: every current version ends here."""
        from psycopg import sql

        when = utc_text(ts_ms)
        self._x(sql.SQL("UPDATE {} SET valid_to = " + NOT_BEFORE_FROM + ", valid_to_seq = %s, "
                        "is_current = false WHERE is_current").format(self._name(db, table)),
                (None if when is None else datetime.fromisoformat(when),
                 None if when is None else datetime.fromisoformat(when), seq))


def _position(row, stopped) -> dict:
    return {"batch_id": row[0] if row else None, "position": row[1] if row else None,
            "seq": row[2] if row else None, "committed_at": row[3] if row else None,
            "stopped": [{"table": f"{d}.{t}", "code": c, "message": m, "seq": q}
                        for d, t, c, m, q in stopped]}


def _bind(col: ColumnDef, value):
    v = python_value(col, value)
    if col.data_type == "json":
        from psycopg.types.json import Jsonb

        return None if v is None else Jsonb(v)
    return v


def _connection_gone(conn) -> bool:
    return conn.closed or conn.broken


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
