"""Snapshot chunks against the real server: values exactly as the binlog decoder writes
them, keyset chunk boundaries for every kind of key, the watermark window."""

from __future__ import annotations

import json
import threading

import pytest

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.snapshot import ChunkTask, probe_chunks, read_chunk, snapshot_table
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.schema.introspect import load_tables

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration

EVERY_TYPE = """
CREATE TABLE every (
  id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED,
  bi BIGINT, bu BIGINT UNSIGNED, de DECIMAL(12,4), du DECIMAL(30,0) UNSIGNED,
  fl FLOAT, db DOUBLE, bt BIT(10), yr YEAR,
  d DATE, dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL,
  tm TIME, tm6 TIME(6),
  c CHAR(5), vc VARCHAR(40), l1 VARCHAR(20) CHARACTER SET latin1, tx TEXT,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  en ENUM('a','b','c'), st SET('x','y','z'), js JSON, g POINT NULL
) ENGINE=InnoDB
"""

ROWS = [
    "(1, -128, 255, -32768, 16777215, -9223372036854775808, 18446744073709551615, "
    "-12345678.1234, 123456789012345678901234567890, 1.5, -2.25e100, b'1010101010', 2024, "
    "'2024-02-29', '2024-02-29 13:45:07', '2024-02-29 13:45:07.123', '1999-12-31 23:59:59.999999', "
    "'2024-02-29 13:45:07', '2038-01-19 03:14:07.99', '-838:59:59', '12:00:00.000001', "
    "'ab', 'héllo wörld ✓', 'café', REPEAT('t', 300), x'00ff10', x'0001', x'deadbeef', "
    "'b', 'x,z', '{\"a\": [1, 2.5, null, \"s\"]}', ST_GeomFromText('POINT(1 2)'))",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'0', 1901, '1000-01-01', '1000-01-01 00:00:00', "
    "'1000-01-01 00:00:00.000', '9999-12-31 23:59:59.000000', '1970-01-02 00:00:01', "
    "'1970-01-02 00:00:01.00', '00:00:00', '-00:00:00.500000', '', '', '', '', '', '', '', "
    "'a', '', '[]', NULL)",
]


def _settings(server) -> ConnectionSettings:
    return ConnectionSettings(server.host, port=server.port, user=server.user,
                              password=server.password)


def _definition(server, db, table):
    conn = server.connect()
    try:
        return load_tables(conn, lambda d, t: (d, t) == (db, table))[(db, table)]
    finally:
        conn.close()


def _chunk(server, definition, lo=None, hi=None, chunk=0, server_id=3100):
    table = snapshot_table(definition)
    return list(read_chunk(ChunkTask(_settings(server), server_id, table, lo, hi, chunk)))


def _rows(batches) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def test_snapshot_values_equal_the_binlog_images_for_every_type(mariadb, fresh_db):
    mariadb.sql(EVERY_TYPE, db=fresh_db)
    start = binlog_position(mariadb)
    mariadb.sql("SET time_zone = '+03:00'", *[f"INSERT INTO every VALUES {r}" for r in ROWS],
                db=fresh_db)
    end = binlog_position(mariadb)
    definition = _definition(mariadb, fresh_db, "every")
    streamed = _rows(read_range(RangeTask(
        settings=_settings(mariadb), server_id=3101, start=start, end=end,
        tables=TableFilter.exact(fresh_db, "every"),
        definitions={(fresh_db, "every"): definition})))
    snap = _rows(_chunk(mariadb, definition))
    assert [r["op"] for r in snap] == ["r"] * 3 and {r["op"] for r in streamed} == {"c"}
    by_key = {r["key"]: json.loads(r["after"]) for r in streamed}
    for row in snap:
        expected = by_key[row["key"]]
        got = json.loads(row["after"])
        diffs = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        assert not diffs, f"key {row['key']}: snapshot vs binlog {diffs}"
        assert row["before"] is None and row["db"] == fresh_db and row["table"] == "every"


@pytest.mark.parametrize("ddl, values, keys", [
    ("CREATE TABLE k (id BIGINT PRIMARY KEY, v INT)",
     lambda i: f"({i * 3}, {i})", lambda i: i * 3),
    ("CREATE TABLE k (a VARCHAR(10), b INT, v INT, PRIMARY KEY (a, b))",
     lambda i: f"('k{i % 7}', {i}, {i})", lambda i: (f"k{i % 7}", i)),
    ("CREATE TABLE k (s VARCHAR(20) PRIMARY KEY, v INT)",
     lambda i: f"('name-{i:05d}', {i})", lambda i: f"name-{i:05d}"),
])
def test_chunks_cover_the_table_exactly_once(mariadb, fresh_db, ddl, values, keys):
    mariadb.sql(ddl, "INSERT INTO k VALUES " + ", ".join(values(i) for i in range(1, 1001)),
                db=fresh_db)
    definition = _definition(mariadb, fresh_db, "k")
    table = snapshot_table(definition)
    conn = mariadb.connect()
    try:
        chunks, after, done, n = [], None, False, 0
        while not done:
            part, done = probe_chunks(conn, table, after, chunk_rows=128, count=3)
            chunks.extend(part)
            after = part[-1][1]
    finally:
        conn.close()
    assert len(chunks) == 8                                  # 7 full chunks and the rest
    seen = []
    for i, (lo, hi) in enumerate(chunks):
        rows = _rows(_chunk(mariadb, definition, lo, hi, chunk=i))
        assert len(rows) == (128 if i < 7 else 1000 - 7 * 128)
        seen.extend(json.loads(r["after"])["v"] for r in rows)
        seqs = [int(r["seq"]) for r in rows]
        assert len(set(seqs)) == len(seqs)
    assert sorted(seen) == list(range(1, 1001))


def test_keys_changed_inside_the_window_are_left_to_the_stream(mariadb, fresh_db):
    """A writer hammers the chunk's keys while it is read: any key it changed between the
    watermarks is dropped from the chunk, so the snapshot never holds a stale image that
    sorts after the change."""
    mariadb.sql("CREATE TABLE w (id INT PRIMARY KEY, v INT)",
                "INSERT INTO w SELECT seq, 0 FROM seq_1_to_20000", db=fresh_db)
    definition = _definition(mariadb, fresh_db, "w")
    stop = threading.Event()

    def writer():
        conn = mariadb.connect(database=fresh_db)
        i = 0
        while not stop.is_set():
            i += 1
            with conn.cursor() as cur:
                cur.execute("UPDATE w SET v = v + 1 WHERE id = %s", (1 + (i * 7919) % 20000,))
        conn.close()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        found = []
        for attempt in range(5):
            rows = _rows(_chunk(mariadb, definition, chunk=attempt))
            found.append(len(rows))
            if len(rows) < 20000:
                break
    finally:
        stop.set()
        t.join()
    # Some keys changed inside the window and were dropped; every row left is at H.
    assert min(found) < 20000
    current = dict(mariadb.sql("SELECT id, v FROM w", db=fresh_db))
    rows_left = {json.loads(r["key"])["id"]: json.loads(r["after"])["v"] for r in rows}
    stale = {k: (v, current[k]) for k, v in rows_left.items() if v > current[k]}
    assert not stale
