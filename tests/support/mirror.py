"""Compare a mirror target with ``SELECT *`` of the source, value for value.

Values are compared after the documented type mapping (README "Mirror sink"): zero
dates are NULL in PostgreSQL, TIMESTAMP is compared in UTC, BIT as its number, JSON
as the parsed value.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone


def source_rows(mariadb, db: str, table: str) -> tuple[list[str], list[tuple]]:
    conn = mariadb.connect(database=db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT column_name, data_type FROM information_schema.columns WHERE "
                        "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        (db, table))
            types = cur.fetchall()
            cur.execute(f"SELECT * FROM `{db}`.`{table}`")
            rows = cur.fetchall()
    finally:
        conn.close()
    names = [n for n, _ in types]
    out = [tuple(_norm_source(t, v) for (_, t), v in zip(types, row)) for row in rows]
    return names, sorted(out, key=repr)


def _norm_source(data_type: str, value):
    if value is None:
        return None
    if data_type == "bit":
        return int.from_bytes(value, "big")
    if data_type in ("date", "datetime", "timestamp") and isinstance(value, str):
        return None                      # a zero date: NULL in the target
    if data_type == "json":
        return json.loads(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def postgres_rows(pg, db: str, table: str, names: list[str]) -> list[tuple]:
    cols = ", ".join(f'"{n}"' for n in names)
    rows = pg.sql(f'SELECT {cols} FROM "{db}"."{table}"')
    return sorted((tuple(_norm_pg(v) for v in row) for row in rows), key=repr)


def _norm_pg(value):
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def assert_postgres_equals_source(mariadb, pg, db: str, tables: list[str]) -> None:
    for table in tables:
        names, want = source_rows(mariadb, db, table)
        got = postgres_rows(pg, db, table, names)
        assert len(got) == len(want), f"{db}.{table}: {len(got)} rows in target, {len(want)} in source"
        for g, w in zip(got, want):
            assert g == w, f"{db}.{table}: target {g!r} != source {w!r}"


def assert_target_equals_source(mariadb, server, kind: str, db: str, tables: list[str]) -> None:
    """``kind`` postgresql: ``server`` is a PostgreSQL; mysql: a second MariaDB; redis: a
    redis-server holding ``{db}:{table}:{pk}`` hashes (single-column integer keys here)."""
    if kind == "redis":
        assert_redis_equals_source(mariadb, server, db, tables)
        return
    if kind == "postgresql":
        assert_postgres_equals_source(mariadb, server, db, tables)
        return
    for table in tables:
        names, want = source_rows(mariadb, db, table)
        names2, got = source_rows(server, db, table)
        assert names2 == names, f"{db}.{table}: columns {names2} != {names}"
        assert got == want, f"{db}.{table}: target differs from the source"


def assert_redis_equals_source(mariadb, server, db: str, tables: list[str]) -> None:
    """Hashes hold text: each field is read back as the source column's Python type
    (DECIMAL compares by value, so a retyped scale need not rewrite old rows' text)."""
    r = server.client()
    for table in tables:
        names, want = source_rows(mariadb, db, table)
        expected = {f"{db}:{table}:{row[0]}".encode(): {n: v for n, v in zip(names, row)
                                                        if v is not None} for row in want}
        got_keys = set(r.scan_iter(f"{db}:{table}:*"))
        assert got_keys == set(expected), f"{db}.{table}: redis keys differ from the source"
        for key, fields in expected.items():
            raw = {k.decode(): v for k, v in r.hgetall(key).items()}
            assert set(raw) == set(fields), f"{key!r}: fields {sorted(raw)} != {sorted(fields)}"
            for name, want_value in fields.items():
                assert _redis_read(raw[name], want_value) == want_value, \
                    f"{key!r}.{name}: {raw[name]!r} != {want_value!r}"


def _redis_read(raw: bytes, like):
    from datetime import date
    from decimal import Decimal

    if isinstance(like, bytes):
        return raw
    text = raw.decode()
    if isinstance(like, bool):
        return text == "1"
    if isinstance(like, int):
        return int(text)
    if isinstance(like, Decimal):
        return Decimal(text)
    if isinstance(like, datetime):
        return datetime.fromisoformat(text)
    if isinstance(like, date):
        return date.fromisoformat(text)
    return text
