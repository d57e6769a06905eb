"""The sink's checked producer against the real broker (no Spark): every message of a batch
arrives once and in order, with and without headers and tombstones, also when librdkafka's
local queue is full and ``send_all`` must wait for deliveries."""

from __future__ import annotations

import uuid

import pytest

from mysqlcdc.sinks.kafka.producer import CheckedProducer

from tests.support.kafka import read_topic

pytestmark = pytest.mark.integration


def _producer(kafka) -> CheckedProducer:
    # a queue of 16 messages: a batch of hundreds fills it again and again
    return CheckedProducer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": "true",
                            "acks": "all", "queue.buffering.max.messages": "16",
                            "linger.ms": "5"})


def test_a_batch_without_headers_or_tombstones_arrives_whole_through_a_full_queue(kafka):
    topic, n = f"p-{uuid.uuid4().hex[:8]}", 700
    producer = _producer(kafka)
    try:
        producer.send_all([topic] * n, [b"k%d" % (i % 7) for i in range(n)],
                          [b"v%d" % i for i in range(n)], [None] * n, [False] * n)
        producer.finish(30)
    finally:
        producer.close()
    got = [m for part in read_topic(kafka.bootstrap, topic).values() for m in part]
    assert sorted(int(m.value()[1:]) for m in got) == list(range(n))
    for part in read_topic(kafka.bootstrap, topic).values():   # per key in the order sent
        values = [int(m.value()[1:]) for m in part]
        assert values == sorted(values)
    assert all(m.headers() is None for m in got)


def test_headers_and_tombstones_arrive_with_their_messages_through_a_full_queue(kafka):
    topic, n = f"p-{uuid.uuid4().hex[:8]}", 300
    producer = _producer(kafka)
    headers = [None if i % 3 else [("__debezium.newkey", b"%d" % i)] for i in range(n)]
    tombstones = [i % 5 == 0 for i in range(n)]
    try:
        producer.send_all([topic] * n, [b"k%d" % i for i in range(n)],
                          [b"v%d" % i for i in range(n)], headers, tombstones)
        producer.finish(30)
    finally:
        producer.close()
    got = [m for part in read_topic(kafka.bootstrap, topic).values() for m in part]
    assert len(got) == n + sum(tombstones)
    by_key: dict[bytes, list] = {}
    for m in got:
        by_key.setdefault(m.key(), []).append(m)
    for i in range(n):
        msgs = by_key[b"k%d" % i]
        assert msgs[0].value() == b"v%d" % i
        assert (dict(msgs[0].headers() or []) ==
                ({} if headers[i] is None else {"__debezium.newkey": b"%d" % i}))
        assert [m.value() for m in msgs[1:]] == ([None] if tombstones[i] else [])
