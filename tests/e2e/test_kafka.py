"""The Kafka sink against a real Kafka-protocol broker and a real MariaDB, through Spark."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from mysqlcdc.capture.server import current_position
from mysqlcdc.sinks.kafka import KafkaSettings, read_last_commit, start_kafka
from mysqlcdc.types import BinlogPosition, make_seq
from tests.support.kafka import read_topic

pytestmark = pytest.mark.e2e


def _position(mariadb) -> BinlogPosition:
    conn = mariadb.connect()
    try:
        return current_position(conn)
    finally:
        conn.close()


def _settings(kafka, prefix: str, **extra) -> KafkaSettings:
    return KafkaSettings(producer={"bootstrap.servers": kafka.bootstrap}, prefix=prefix,
                         pipeline=prefix, delivery_timeout_s=20, **extra)


def _run(spark, source_options, tmp_path, settings, *, write_tasks=3, **source) -> None:
    df = spark.readStream.format("mysqlcdc").options(**source_options(**source)).load()
    query = start_kafka(df, settings, checkpoint=str(tmp_path / "ck"),
                        trigger_interval="200 milliseconds", write_tasks=write_tasks)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def _messages(kafka, topic: str) -> dict[int, list]:
    return read_topic(kafka.bootstrap, topic)


def _updates_workload(mariadb, db: str, keys: int, txns: int) -> dict[int, list[int]]:
    """Inserts ``keys`` rows, then random updates of v in transactions of 1..40 rows.
    Returns the sequence of v values each key took, in commit order."""
    rnd = random.Random(5)
    mariadb.sql(f"CREATE TABLE `{db}`.k (id INT PRIMARY KEY, v INT)")
    history: dict[int, list[int]] = {i: [0] for i in range(keys)}
    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO k VALUES (%s, 0)", [(i,) for i in range(keys)])
        conn.commit()
        for n in range(1, txns + 1):
            for key in rnd.sample(range(keys), rnd.choice([1, 5, 40])):
                cur.execute("UPDATE k SET v = %s WHERE id = %s", (n, key))
                history[key].append(n)
            conn.commit()
    conn.close()
    return history


def test_per_key_order_over_many_keys_and_partitions(spark, mariadb, kafka, fresh_db,
                                                     source_options, tmp_path):
    start = _position(mariadb)
    history = _updates_workload(mariadb, fresh_db, keys=300, txns=150)
    end = _position(mariadb)
    settings = _settings(kafka, fresh_db, partitions=5, transaction_topic="{prefix}.txns")
    _run(spark, source_options, tmp_path, settings, startingPosition=str(start),
         include=f"{fresh_db}.k", parallelism=2, maxEventsPerBatch=400)

    parts = _messages(kafka, f"{fresh_db}.{fresh_db}.k")
    assert len(parts) == 5 and sum(1 for p in parts.values() if p) == 5
    seen: dict[int, list[int]] = defaultdict(list)
    partition_of: dict[int, set[int]] = defaultdict(set)
    for partition, msgs in parts.items():
        for m in msgs:
            key = json.loads(m.key())["id"]
            seen[key].append(json.loads(m.value())["after"]["v"])
            partition_of[key].add(partition)
    assert dict(seen) == history                       # every change, per key in commit order
    assert all(len(p) == 1 for p in partition_of.values())

    # Transaction boundaries: one BEGIN/END per transaction, END counts sum to every row.
    boundaries = [json.loads(m.value()) for m in _messages(kafka, f"{fresh_db}.txns")[0]]
    ends = [b for b in boundaries if b["status"] == "END"]
    assert len(ends) == 151 and sum(b["event_count"] for b in ends) == sum(map(len, history.values()))
    assert {c["data_collection"] for b in ends for c in b["data_collections"]} == {f"{fresh_db}.k"}

    last = read_last_commit(settings)
    assert last is not None and last.position == end and last.pipeline == fresh_db
