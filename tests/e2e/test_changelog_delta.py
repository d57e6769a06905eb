"""The Delta changelog: exact for deltalake, polars, DuckDB and Spark; replays skipped;
compaction and retention keep every reader exact."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from mysqlcdc.sinks.changelog import ChangelogSettings, current_state_sql, read_changelog, start_changelog
from mysqlcdc.sinks.changelog.maintenance import check_delta, maintain_delta
from mysqlcdc.sinks.changelog.writer import delta_batch_writer

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _capture(spark, source_options, tmp_path, db: str, start: str, settings: ChangelogSettings,
             name: str = "ck"):
    df = spark.readStream.format("mysqlcdc").options(
        **source_options(startingPosition=start, include=f"{db}.*")).load()
    query = start_changelog(df, settings, checkpoint=str(tmp_path / name),
                            trigger_interval="200 milliseconds")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def _readers(path: str) -> dict[str, list[tuple]]:
    """(seq, op, key) of every change as each engine reads the table."""
    dt = DeltaTable(path)
    via_delta = dt.to_pyarrow_table(columns=["seq", "op", "key"]).to_pylist()
    via_polars = pl.read_delta(path, columns=["seq", "op", "key"]).to_dicts()
    ds = dt.to_pyarrow_dataset()  # noqa: F841 - DuckDB reads the Arrow dataset by name
    via_duck = duckdb.sql("SELECT seq, op, key FROM ds").fetchall()
    norm = lambda rows: sorted((int(r["seq"]), r["op"], r["key"]) for r in rows)  # noqa: E731
    return {"deltalake": norm(via_delta), "polars": norm(via_polars),
            "duckdb": sorted((int(s), o, k) for s, o, k in via_duck)}


def test_delta_changelog_exact_for_every_reader(spark, mariadb, fresh_db, source_options,
                                                tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql(
        f"CREATE TABLE `{fresh_db}`.acct (id INT PRIMARY KEY, name VARCHAR(20), bal DECIMAL(9,2))",
        *[f"INSERT INTO `{fresh_db}`.acct VALUES ({i}, 'n{i}', {i}.25)" for i in range(1, 41)],
        f"UPDATE `{fresh_db}`.acct SET bal = bal + 1 WHERE id % 3 = 0",
        f"DELETE FROM `{fresh_db}`.acct WHERE id % 5 = 0",
        f"CREATE TABLE `{fresh_db}`.gone (id INT PRIMARY KEY)",
        f"INSERT INTO `{fresh_db}`.gone VALUES (1), (2)",
        f"TRUNCATE TABLE `{fresh_db}`.gone",
        f"INSERT INTO `{fresh_db}`.gone VALUES (3)",
        f"ALTER TABLE `{fresh_db}`.acct ADD COLUMN note VARCHAR(10)",
        f"UPDATE `{fresh_db}`.acct SET note = 'x' WHERE id = 1",
    )
    path = str(tmp_path / "changelog")
    settings = ChangelogSettings(path=path, format="delta", pipeline="t")
    _capture(spark, source_options, tmp_path, fresh_db, start, settings)

    seen = _readers(path)
    assert seen["deltalake"] == seen["polars"] == seen["duckdb"]
    ops = [op for _, op, _ in seen["deltalake"]]
    assert ops.count("c") == 43 and ops.count("d") == 8 and ops.count("u") == 14
    assert "t" in ops and "s" in ops
    assert len({s for s, _, _ in seen["deltalake"]}) == len(seen["deltalake"])

    # Spark without Delta's jars, and the current-state query, over the same table.
    view = read_changelog(spark, path, "delta")
    assert sorted(int(r["seq"]) for r in view.select("seq").collect()) == \
        [s for s, _, _ in seen["deltalake"]]
    assert {r["db"] for r in view.select("db").collect()} == {fresh_db}
    view.createOrReplaceTempView("delta_changelog")
    for table in ("acct", "gone"):
        rows = spark.sql(current_state_sql("delta_changelog", fresh_db, table)).collect()
        got = sorted(json.loads(r["key"])["id"] for r in rows)
        want = [r[0] for r in mariadb.sql(f"SELECT id FROM `{fresh_db}`.`{table}` ORDER BY id")]
        assert got == want, table
    noted = [json.loads(r["row"]) for r in
             spark.sql(current_state_sql("delta_changelog", fresh_db, "acct")).collect()]
    assert [r["note"] for r in noted if r["id"] == 1] == ["x"]

    # Each commit names its batch and the binlog position it ends at.
    report = check_delta(path)
    assert report.rows == len(seen["deltalake"]) and report.last_position
    assert report.last_position.startswith(mariadb.sql("SHOW MASTER STATUS")[0][0].rsplit(".", 1)[0])


def test_replayed_batch_is_skipped_and_new_checkpoint_is_not(spark, tmp_path):
    path = str(tmp_path / "changelog")
    settings = ChangelogSettings(path=path, format="delta", pipeline="replay")
    batch = spark.createDataFrame(
        [("c", "d", "t", None, '{"id":1}', '{"id":1}', 1, 1, None, None, "b.1", 4, 0, Decimal(10), None)],
        "op STRING, db STRING, `table` STRING, before STRING, after STRING, key STRING, "
        "ts_ms BIGINT, server_id BIGINT, gtid STRING, txn_id STRING, file STRING, pos BIGINT, "
        "`row` INT, seq DECIMAL(38,0), query STRING")
    write = delta_batch_writer(settings, None)
    write(batch, 0)
    write(batch, 0)                       # the replay of batch 0 after a crash
    assert DeltaTable(path).to_pyarrow_table().num_rows == 1
    write(batch, 1)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 2

    # A new checkpoint starts its batch ids at 0 again: a different app id, not a replay.
    ck = tmp_path / "ck2"
    ck.mkdir()
    (ck / "metadata").write_text('{"id":"5b0c2a9e-0000-4000-8000-000000000001"}\n')
    delta_batch_writer(settings, str(ck))(batch, 0)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 3


def test_compaction_and_retention_keep_readers_exact(spark, mariadb, fresh_db, source_options,
                                                     tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.k (id INT PRIMARY KEY, v INT)")
    path = str(tmp_path / "changelog")
    settings = ChangelogSettings(path=path, format="delta", pipeline="compact",
                                 compact_batches=4, vacuum_after_s=0)
    df = spark.readStream.format("mysqlcdc").options(
        **source_options(startingPosition=start, include=f"{fresh_db}.*")).load()
    query = start_changelog(df, settings, checkpoint=str(tmp_path / "ck"),
                            trigger_interval="100 milliseconds")
    try:
        for i in range(1, 31):          # a trickle: about one small batch per insert
            mariadb.sql(f"INSERT INTO `{fresh_db}`.k VALUES ({i}, {i})")
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    dt = DeltaTable(path)
    ops = [h["operation"] for h in dt.history()]
    assert "OPTIMIZE" in ops and "VACUUM END" in ops
    seen = _readers(path)
    keys = sorted(json.loads(k)["id"] for _, op, k in seen["deltalake"] if op == "c")
    assert keys == list(range(1, 31))
    assert seen["deltalake"] == seen["polars"] == seen["duckdb"]
    files_before = len(dt.file_uris())
    # 30 commits of one change each would be 30+ files; compaction keeps it to a few.
    assert files_before <= 8, files_before

    # Retention: the changes before the cutoff go, every later one stays.
    cutoff_ms = max(int(r["ts_ms"]) for r in dt.to_pyarrow_table(columns=["ts_ms"]).to_pylist())
    time.sleep(1.2)
    mariadb.sql(f"INSERT INTO `{fresh_db}`.k VALUES (100, 100)")
    _capture(spark, source_options, tmp_path, fresh_db, start,
             ChangelogSettings(path=path, format="delta", pipeline="compact"), name="ck")
    now_ms = int(time.time() * 1000)
    keep = ChangelogSettings(path=path, format="delta", pipeline="compact",
                             retention_s=(now_ms - cutoff_ms) / 1000 - 0.5, vacuum_after_s=0)
    done = maintain_delta(keep, now_ms=now_ms)
    assert done.deleted_rows >= 30
    left = _readers(path)
    assert left["deltalake"] == left["polars"] == left["duckdb"]
    assert [json.loads(k)["id"] for _, op, k in left["deltalake"] if op == "c"] == [100]
