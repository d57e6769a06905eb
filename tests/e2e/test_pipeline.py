"""A workload's changes, captured by Spark from a real MariaDB, equal the changelog."""

from __future__ import annotations

import json
import random

import pytest

from mysqlcdc.sinks.changelog import current_state_sql

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e



def _workload(mariadb, db: str, seed: int = 7) -> list[tuple[str, str, int]]:
    """Random inserts/updates/deletes on two tables; returns (table, op, id) in commit order."""
    rnd = random.Random(seed)
    mariadb.sql(
        f"CREATE TABLE `{db}`.account (id INT PRIMARY KEY, name VARCHAR(40), balance DECIMAL(12,2),"
        " big BIGINT UNSIGNED, seen DATETIME(3))",
        f"CREATE TABLE `{db}`.note (id INT PRIMARY KEY, body TEXT, flag ENUM('a','b'))",
        f"CREATE TABLE `{db}`.tmp_scratch (id INT PRIMARY KEY)",
    )
    expected: list[tuple[str, str, int]] = []
    live: dict[str, set[int]] = {"account": set(), "note": set()}
    conn = mariadb.connect(database=db, autocommit=False)
    next_id = 1
    with conn.cursor() as cur:
        for _ in range(60):
            for _ in range(rnd.choice([1, 1, 3, 10])):
                table = rnd.choice(["account", "note"])
                ids = sorted(live[table])
                op = rnd.choice(["c", "c", "u", "d"]) if ids else "c"
                if op == "c":
                    key, next_id = next_id, next_id + 1
                    if table == "account":
                        cur.execute("INSERT INTO account VALUES (%s,%s,%s,%s,%s)",
                                    (key, f"n{key}", "-12.50", 18446744073709551615,
                                     "2024-02-29 13:45:07.123"))
                    else:
                        cur.execute("INSERT INTO note VALUES (%s,%s,%s)", (key, "ü" * key, "a"))
                    live[table].add(key)
                elif op == "u":
                    key = rnd.choice(ids)
                    column = "name" if table == "account" else "body"
                    cur.execute(f"UPDATE {table} SET {column}=%s WHERE id=%s", (f"u{rnd.random()}", key))
                else:
                    key = rnd.choice(ids)
                    cur.execute(f"DELETE FROM {table} WHERE id=%s", (key,))
                    live[table].discard(key)
                expected.append((table, op, key))
            cur.execute("INSERT INTO tmp_scratch VALUES (%s)", (next_id,))
            next_id += 1
            conn.commit()
    conn.close()
    return expected


def _stream(spark, options, tmp_path, **extra):
    out, checkpoint = tmp_path / "changelog", tmp_path / "checkpoint"
    df = spark.readStream.format("mysqlcdc").options(**options(**extra)).load()
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).partitionBy("db", "table")
             .trigger(processingTime="200 milliseconds").start())
    return query, str(out)


@pytest.mark.parametrize("extra", [
    {},
    {"maxEventsPerBatch": 25},
    {"parallelism": 2, "maxEventsPerBatch": 400},
], ids=["all-available", "admission-limited", "parallel-read"])
def test_changelog_equals_workload(spark, mariadb, fresh_db, source_options, tmp_path, extra):
    start = str(binlog_position(mariadb))
    expected = _workload(mariadb, fresh_db)
    query, out = _stream(spark, source_options, tmp_path, startingPosition=start,
                         include=f"{fresh_db}.*", exclude=f"{fresh_db}.tmp_*", **extra)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    everything = spark.read.parquet(out).orderBy("seq").collect()
    rows = [r for r in everything if r["op"] != "s"]
    got = [(r["table"], r["op"], json.loads(r["key"])["id"]) for r in rows]
    assert got == expected
    # the tables were created inside the range: one schema-change record each, before its rows
    created = [(r["table"], r["query"].split("(")[0].strip()) for r in everything if r["op"] == "s"]
    assert created == [("account", "CREATE TABLE `%s`.account" % fresh_db),
                       ("note", "CREATE TABLE `%s`.note" % fresh_db)]
    assert len({r["seq"] for r in rows}) == len(rows)
    assert all(r["db"] == fresh_db for r in rows)
    if extra.get("maxEventsPerBatch") == 25:
        assert len(query.recentProgress) > 2, "admission control should split the work"

    # The documented current-state query reproduces each table.
    spark.read.parquet(out).createOrReplaceTempView("cl")
    for table, columns in (("account", ["id", "name"]), ("note", ["id", "body", "flag"])):
        state = spark.sql(current_state_sql("cl", fresh_db, table)).collect()
        from_cl = sorted(tuple(json.loads(r["row"])[c] for c in columns) for r in state)
        from_db = sorted(mariadb.sql(f"SELECT {', '.join(columns)} FROM `{fresh_db}`.{table}"))
        assert from_cl == [tuple(r) for r in from_db]


def test_values_and_envelope_fields(spark, mariadb, fresh_db, source_options, tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql(
        f"CREATE TABLE `{fresh_db}`.v (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DECIMAL(65,30),"
        " t TIME(6), ts TIMESTAMP(3) NULL, s SET('x','y'), b VARBINARY(8), e VARCHAR(4))",
        f"INSERT INTO `{fresh_db}`.v VALUES (1, 18446744073709551615, -1.5, '-838:59:59.000000',"
        " '2024-02-29 13:45:07.123', '', X'00FF', '')",
        f"UPDATE `{fresh_db}`.v SET e = NULL WHERE id = 1",
        f"DELETE FROM `{fresh_db}`.v WHERE id = 1",
    )
    end = str(binlog_position(mariadb))
    df = (spark.read.format("mysqlcdc")
          .options(**source_options(startingPosition=start, endingPosition=end,
                                    include=f"{fresh_db}.v")).load())
    rows = df.orderBy("seq").collect()
    assert [r["op"] for r in rows] == ["s", "c", "u", "d"]
    created, rows = rows[0], rows[1:]
    assert [c["name"] for c in json.loads(created["after"])["columns"]] == \
        ["id", "u", "d", "t", "ts", "s", "b", "e"]
    assert created["before"] is None and created["query"].startswith("CREATE TABLE")
    after = json.loads(rows[0]["after"])
    assert after == {"id": 1, "u": 18446744073709551615, "d": "-1." + "5" + "0" * 29,
                     "t": "-838:59:59.000000", "ts": "2024-02-29T13:45:07.123Z", "s": [],
                     "b": "AP8=", "e": ""}
    assert json.loads(rows[1]["after"])["e"] is None
    assert rows[2]["after"] is None and json.loads(rows[2]["before"])["id"] == 1
    assert json.loads(rows[0]["key"]) == {"id": 1}
    first = rows[0]
    assert first["gtid"] and first["gtid"].count("-") == 2        # MariaDB d-s-n
    assert first["txn_id"] == first["gtid"]
    assert first["ts_ms"] > 1_600_000_000_000 and first["server_id"] == 1
    assert first["file"].startswith("mariadb-bin.") and first["pos"] > 4


def test_batch_read_of_empty_range(spark, mariadb, source_options):
    here = str(binlog_position(mariadb))
    df = spark.read.format("mysqlcdc").options(
        **source_options(startingPosition=here, endingPosition=here)).load()
    assert df.count() == 0


def test_statement_text_in_the_envelope_when_asked(spark, mariadb, fresh_db, source_options):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.q (id INT PRIMARY KEY, v INT)")
    start = str(binlog_position(mariadb))
    mariadb.sql(f"INSERT INTO `{fresh_db}`.q VALUES (1, 1), (2, 2)",
                f"UPDATE `{fresh_db}`.q SET v = v + 10 WHERE id = 2 /* tagged */")
    end = str(binlog_position(mariadb))

    def read(**extra):
        return (spark.read.format("mysqlcdc")
                .options(**source_options(startingPosition=start, endingPosition=end,
                                          include=f"{fresh_db}.q", **extra))
                .load().orderBy("seq").collect())

    with_text = read(includeQuery="true")
    assert [(r["op"], r["query"]) for r in with_text] == [
        ("c", f"INSERT INTO `{fresh_db}`.q VALUES (1, 1), (2, 2)"),
        ("c", f"INSERT INTO `{fresh_db}`.q VALUES (1, 1), (2, 2)"),
        ("u", f"UPDATE `{fresh_db}`.q SET v = v + 10 WHERE id = 2 /* tagged */"),
    ]
    assert all(r["query"] is None for r in read())          # off by default
