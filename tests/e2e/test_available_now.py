"""trigger(availableNow=True) keeps admission control: a backlog becomes several
bounded micro-batches, never one, and nothing written after the query starts is read."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.spark.source import MysqlcdcStreamReader

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _backlog(mariadb, db: str, txns: int, first: int = 0) -> None:
    if not first:
        mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        for i in range(first, first + txns):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"v{i}"))
            conn.commit()
    conn.close()


def test_available_now_reads_the_backlog_in_bounded_batches(spark, mariadb, fresh_db,
                                                           source_options, tmp_path):
    start = str(binlog_position(mariadb))
    _backlog(mariadb, fresh_db, 200)
    out, checkpoint = tmp_path / "changelog", tmp_path / "checkpoint"
    df = spark.readStream.format("mysqlcdc").options(**source_options(
        startingPosition=start, include=f"{fresh_db}.*", maxEventsPerBatch=100)).load()
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(300), "availableNow should end by itself"
    finally:
        query.stop()
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    # 200 single-row transactions are ~5 events each: about 10 batches of 100 events
    assert len(batches) >= 5, [p["numInputRows"] for p in query.recentProgress]
    assert max(p["numInputRows"] for p in batches) <= 30
    rows = [r for r in spark.read.parquet(str(out)).collect() if r["op"] == "c"]
    assert sorted(json.loads(r["key"])["id"] for r in rows) == list(range(200))


def test_available_now_target_is_fixed_when_the_query_starts(mariadb, fresh_db,
                                                             source_options):
    start = binlog_position(mariadb)
    _backlog(mariadb, fresh_db, 30)
    reader = MysqlcdcStreamReader(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{fresh_db}.*", maxEventsPerBatch=20)))
    try:
        reader.prepareForTriggerAvailableNow()
        target = binlog_position(mariadb)
        _backlog(mariadb, fresh_db, 30, first=30)   # after the query started: not read
        offset, ends = {"file": start.file, "pos": start.pos}, []
        limit = reader.getDefaultReadLimit()
        for _ in range(100):
            end = reader.latestOffset(offset, limit)
            if end == offset:
                break
            ends.append(end)
            offset = end
        assert len(ends) > 3
        assert (offset["file"], offset["pos"]) == (target.file, target.pos)
    finally:
        reader.stop()
