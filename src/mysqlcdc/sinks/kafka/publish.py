"""Publishing one write task's rows, and one batch's commit records. No pyspark here.

Order: a task's rows arrive sorted by ``seq`` and are produced in that order by one
idempotent producer, a record batch at a time, each acknowledged before the next (ordering per partition is kept through retries), and the
stream is spread over tasks by key, so every change of a key is in one task. The
default partitioner hashes the key, so a key always lands in one partition.
"""

from __future__ import annotations

import time

from mysqlcdc.sinks.kafka.commitlog import CommitRecord
from mysqlcdc.sinks.kafka.formats import (
    TxnTally, boundary_records, debezium_value, encode_key, headers, mysqlcdc_value,
    tally_transactions,
)
from mysqlcdc.sinks.kafka.producer import drop_producer, producer_for, with_retries
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.sinks.kafka.topics import TopicRouter, ensure_topics, forget_topics

__all__ = ["publish_rows", "publish_commit"]


def _reset(settings: KafkaSettings) -> None:
    drop_producer(settings)
    forget_topics(settings)


def publish_rows(settings: KafkaSettings, rows: list[dict]) -> dict[str, TxnTally]:
    """Deliver ``rows`` (in seq order) or raise; returns their transaction tally.

    Schema-change records (``op = s``) are not published: a Kafka consumer keyed by
    primary key has no place for them (they stay in the Spark stream and changelog)."""
    rows = [r for r in rows if r["op"] != "s"]
    if rows:
        with_retries(settings, "publishing a batch", lambda: _send_all(settings, rows),
                     lambda: _reset(settings))
    return tally_transactions(rows) if settings.transaction_topic else {}


def _send_all(settings: KafkaSettings, rows: list[dict]) -> None:
    router = TopicRouter(settings)
    topics = [router.topic(r) for r in rows]
    ensure_topics(settings, topics)
    producer = producer_for(settings)
    debezium, now_ms = settings.format == "debezium", int(time.time() * 1000)
    for row, topic in zip(rows, topics):
        key = encode_key(row)
        value = debezium_value(row, settings.prefix, now_ms) if debezium else mysqlcdc_value(row)
        producer.send(topic, key, value, headers(row))
        if settings.tombstones and row["op"] == "d":
            producer.send(topic, key, None, headers(row))
    producer.finish(settings.delivery_timeout_s + 5)


def publish_commit(settings: KafkaSettings, record: CommitRecord,
                   txns: dict[str, TxnTally]) -> None:
    """Transaction boundaries (if enabled), then the commit record; all acknowledged."""
    with_retries(settings, "writing the commit log", lambda: _send_commit(settings, record, txns),
                 lambda: _reset(settings))


def _send_commit(settings: KafkaSettings, record: CommitRecord,
                 txns: dict[str, TxnTally]) -> None:
    commit_topic = settings.resolve(settings.commit_topic)
    ensure_topics(settings, [commit_topic], partitions=1)
    producer = producer_for(settings)
    if settings.transaction_topic and txns:
        txn_topic = settings.resolve(settings.transaction_topic)
        ensure_topics(settings, [txn_topic], partitions=1)
        for key, value in boundary_records(txns):
            producer.send(txn_topic, key, value, partition=0)
        producer.finish(settings.delivery_timeout_s + 5)   # boundaries land before the commit
    producer.send(commit_topic, *record.encode(), partition=0)   # read back from partition 0
    producer.finish(settings.delivery_timeout_s + 5)
