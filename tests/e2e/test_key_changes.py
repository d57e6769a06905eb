"""An UPDATE that changes a row's primary key is a delete of the old key and a create of
the new one for every consumer: the changelog's current state and a Kafka consumer
that applies messages per key both end equal to the source."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.sinks.changelog import current_state_sql
from mysqlcdc.sinks.kafka import KafkaSettings, start_kafka
from tests.support.kafka import read_topic
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _workload(mariadb, db: str) -> None:
    mariadb.sql(
        f"CREATE TABLE `{db}`.pk (id INT PRIMARY KEY, v VARCHAR(10))",
        f"CREATE TABLE `{db}`.nopk (a INT, b VARCHAR(10))",
        f"INSERT INTO `{db}`.pk VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        f"UPDATE `{db}`.pk SET id = 4 WHERE id = 1",
        f"UPDATE `{db}`.pk SET id = id + 10",                 # 2,3,4 -> 12,13,14
        f"UPDATE `{db}`.pk SET v = 'same key' WHERE id = 12",
        f"INSERT INTO `{db}`.nopk VALUES (1, 'x'), (1, 'x'), (2, 'y')",
        f"UPDATE `{db}`.nopk SET b = 'z' WHERE a = 2",
        f"DELETE FROM `{db}`.nopk WHERE a = 1 LIMIT 1",
    )


def test_key_change_is_delete_plus_create_for_changelog_and_kafka(
        spark, mariadb, kafka, fresh_db, source_options, tmp_path):
    start = str(binlog_position(mariadb))
    _workload(mariadb, fresh_db)
    options = source_options(startingPosition=start, include=f"{fresh_db}.*")

    # The changelog and its current-state query.
    df = spark.readStream.format("mysqlcdc").options(**options).load()
    out = str(tmp_path / "changelog")
    query = (df.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "ck1"))
             .trigger(processingTime="200 milliseconds").start())
    query.processAllAvailable()
    query.stop()
    log = spark.read.parquet(out)
    log.createOrReplaceTempView("key_changes")
    rows = spark.sql(current_state_sql("key_changes", fresh_db, "pk")).collect()
    assert sorted(json.loads(r["key"])["id"] for r in rows) == [12, 13, 14]
    assert {json.loads(r["key"])["id"]: json.loads(r["row"])["v"] for r in rows}[12] == "same key"

    changes = sorted(log.where("`table` = 'pk' AND op <> 's'").collect(), key=lambda r: r["seq"])
    moved = [(r["op"], json.loads(r["key"])["id"], json.loads(r["moved_key"])["id"])
             for r in changes if r["moved_key"] is not None]
    assert moved == [("d", 1, 4), ("c", 4, 1), ("d", 2, 12), ("c", 12, 2), ("d", 3, 13),
                     ("c", 13, 3), ("d", 4, 14), ("c", 14, 4)]
    halves = [r for r in changes if r["moved_key"] is not None]
    for d, c in zip(halves[::2], halves[1::2]):
        assert (d["file"], d["pos"], d["row"]) == (c["file"], c["pos"], c["row"])
        assert int(c["seq"]) == int(d["seq"]) + 1
        assert d["after"] is None and c["before"] is None
    assert [r["op"] for r in changes if r["moved_key"] is None] == ["c", "c", "c", "u"]

    # A table without a primary key: the key is the whole row, so every update moves it;
    # current state = the latest change per whole-row key.
    nopk = spark.sql(current_state_sql("key_changes", fresh_db, "nopk")).collect()
    got = sorted((json.loads(r["row"])["a"], json.loads(r["row"])["b"]) for r in nopk)
    assert (2, "z") in got and (2, "y") not in got

    # Replayed from the same position: identical seqs.
    again = spark.read.format("mysqlcdc").options(
        **{**options, "endingPosition": str(binlog_position(mariadb))}).load()
    assert sorted(int(r["seq"]) for r in again.select("seq").collect()) == \
        sorted(int(r["seq"]) for r in log.select("seq").collect())

    # Kafka: apply per key in partition order; the old keys are gone.
    settings = KafkaSettings(producer={"bootstrap.servers": kafka.bootstrap}, prefix="keys",
                             pipeline="keys", delivery_timeout_s=20)
    df = spark.readStream.format("mysqlcdc").options(**options).load()
    query = start_kafka(df, settings, checkpoint=str(tmp_path / "ck2"),
                        trigger_interval="200 milliseconds", write_tasks=2)
    query.processAllAvailable()
    query.stop()
    state: dict[str, dict] = {}
    newkey_headers = []
    for msgs in read_topic(kafka.bootstrap, f"keys.{fresh_db}.pk").values():
        for m in msgs:
            value = json.loads(m.value())
            hdrs = dict(m.headers() or [])
            if "__debezium.newkey" in hdrs:
                newkey_headers.append(json.loads(hdrs["__debezium.newkey"])["id"])
            if value["op"] == "d":
                state.pop(m.key().decode(), None)
            else:
                state[m.key().decode()] = value["after"]
    assert sorted(json.loads(k)["id"] for k in state) == [12, 13, 14]
    assert sorted(newkey_headers) == [4, 12, 13, 14]
