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


def postgres_rows(pg, db: str, table: str, names: list[str], where: str = "") -> list[tuple]:
    cols = ", ".join(f'"{n}"' for n in names)
    rows = pg.sql(f'SELECT {cols} FROM "{db}"."{table}" {where}')
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


def assert_history_equals_source(mariadb, server, kind: str, db: str, tables: list[str]) -> None:
    """The current versions (``is_current``) of a history-mode SQL target equal the source."""
    for table in tables:
        names, want = source_rows(mariadb, db, table)
        if kind == "postgresql":
            got = postgres_rows(server, db, table, names, "WHERE is_current")
        else:
            conn = server.connect(database=db)
            try:
                with conn.cursor() as cur:
                    cur.execute("SET time_zone = '+00:00'")
                    cur.execute("SELECT " + ", ".join(f"`{n}`" for n in names) +
                                f" FROM `{db}`.`{table}` WHERE is_current")
                    rows = cur.fetchall()
                types = dict(server.sql("SELECT column_name, data_type FROM information_schema."
                                        f"columns WHERE table_schema = '{db}' AND table_name = "
                                        f"'{table}'"))
            finally:
                conn.close()
            got = sorted((tuple(_norm_source(types[n], v) for n, v in zip(names, r))
                          for r in rows), key=repr)
        assert got == want, f"{db}.{table}: current versions differ from the source"


def delta_rows_by_reader(path: str, columns: list[str], version: int | None = None) -> dict:
    """The rows of the Delta table at ``path`` (``columns``, sorted) as deltalake, polars
    and DuckDB each read them (DuckDB over the Arrow dataset delta-rs resolves)."""
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    dt = DeltaTable(path, version=version)
    via_delta = dt.to_pyarrow_table(columns=columns).to_pylist()
    via_polars = pl.read_delta(path, columns=columns, version=version).to_dicts()
    ds = dt.to_pyarrow_dataset()  # noqa: F841 - DuckDB reads the Arrow dataset by name
    cols = ", ".join(f'"{c}"' for c in columns)
    via_duck = duckdb.sql(f"SELECT {cols} FROM ds").fetchall()
    norm = lambda rs: sorted((tuple(r[c] for c in columns) for r in rs), key=repr)  # noqa: E731
    return {"deltalake": norm(via_delta), "polars": norm(via_polars),
            "duckdb": sorted(via_duck, key=repr)}


def delta_rows(root: str, db: str, table: str, types: dict[str, str], *,
               history: bool = False) -> list[tuple]:
    """A Delta mirror table's rows (columns ``types``: name -> source data type) as the
    source shows them: TIME microseconds as a timedelta, TIMESTAMP in UTC without zone,
    JSON parsed; history mode: the current versions."""
    from datetime import timedelta

    import pyarrow.compute as pc
    from deltalake import DeltaTable

    data = DeltaTable(f"{root}/{db}/{table}").to_pyarrow_table()
    if history:
        data = data.filter(pc.equal(data["is_current"], True))
    out = []
    for row in data.to_pylist():
        out.append(tuple(_norm_delta(types[n], row[n]) for n in types))
    return sorted(out, key=repr)


def _norm_delta(data_type: str, value):
    from datetime import timedelta

    if value is None:
        return None
    if data_type == "time":
        return timedelta(microseconds=value)
    if data_type == "json":
        return json.loads(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def assert_delta_equals_source(mariadb, root: str, db: str, tables: list[str], *,
                               history: bool = False) -> None:
    for table in tables:
        names, want = source_rows(mariadb, db, table)
        types = dict(mariadb.sql("SELECT column_name, data_type FROM information_schema.columns "
                                 f"WHERE table_schema = '{db}' AND table_name = '{table}' "
                                 "ORDER BY ordinal_position"))
        got = delta_rows(root, db, table, {n: types[n] for n in names}, history=history)
        assert len(got) == len(want), f"{db}.{table}: {len(got)} rows in Delta, {len(want)} in source"
        for g, w in zip(got, want):
            assert g == w, f"{db}.{table}: Delta {g!r} != source {w!r}"


def assert_target_equals_source(mariadb, server, kind: str, db: str, tables: list[str], *,
                                history: bool = False) -> None:
    """``kind`` postgresql: ``server`` is a PostgreSQL; mysql: a second MariaDB; redis: a
    redis-server holding ``{db}:{table}:{pk}`` hashes (single-column integer keys here);
    delta: ``server`` is the mirror's root folder. ``history``: the current versions of a
    history-mode target are compared."""
    if kind == "delta":
        assert_delta_equals_source(mariadb, str(server), db, tables, history=history)
        return
    if history:
        assert_history_equals_source(mariadb, server, kind, db, tables)
        return
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


def history_versions(server, kind: str, db: str, table: str, key: list[str]) -> list[tuple]:
    """(key tuple, valid_from_seq, valid_to_seq, is_current, valid_from, valid_to) of every
    version in a history-mode target (``server``: the Delta root for ``delta``)."""
    cols = ["valid_from_seq", "valid_to_seq", "is_current", "valid_from", "valid_to"]
    if kind == "delta":
        from deltalake import DeltaTable

        data = DeltaTable(f"{server}/{db}/{table}").to_pyarrow_table(columns=key + cols)
        rows = [tuple(r[c] for c in key + cols) for r in data.to_pylist()]
    elif kind == "postgresql":
        rows = server.sql("SELECT " + ", ".join(f'"{c}"' for c in key + cols) +
                          f' FROM "{db}"."{table}"')
    else:
        rows = server.sql("SELECT " + ", ".join(f"`{c}`" for c in key + cols) +
                          f" FROM `{db}`.`{table}`")
    n = len(key)
    return [(tuple(r[:n]), *r[n:n + 2], bool(r[n + 2]), *r[n + 3:]) for r in rows]


def assert_history_chains(mariadb, server, kind: str, db: str, tables: list[str]) -> None:
    """Every key's versions form one chain: distinct ``valid_from_seq``; each version but
    the last closed at or before the next one starts (a gap: deleted, then inserted
    again); only the last may be current, and it is exactly when it is not closed."""
    for table in tables:
        key = [r[0] for r in mariadb.sql(
            "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = "
            f"'{db}' AND table_name = '{table}' AND constraint_name = 'PRIMARY' "
            "ORDER BY ordinal_position")]
        chains: dict[tuple, list[tuple]] = {}
        for v in history_versions(server, kind, db, table, key):
            chains.setdefault(v[0], []).append(v)
        assert chains, f"{db}.{table}: no versions"
        for k, chain in chains.items():
            chain.sort(key=lambda v: v[1])
            starts = [v[1] for v in chain]
            assert len(set(starts)) == len(starts), f"{db}.{table} {k}: a version twice"
            for this, nxt in zip(chain, chain[1:]):
                assert this[2] is not None and not this[3], f"{db}.{table} {k}: open version"
                assert this[1] < this[2] <= nxt[1], f"{db}.{table} {k}: versions overlap"
                assert this[4] <= this[5], f"{db}.{table} {k}: valid_to before valid_from"
            last = chain[-1]
            assert last[3] == (last[2] is None), f"{db}.{table} {k}: is_current wrong"
