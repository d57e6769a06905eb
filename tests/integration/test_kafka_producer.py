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


@pytest.mark.parametrize("headers", [False, True])
def test_a_message_larger_than_kafka_takes_fails_the_batch_at_once_and_named(kafka, headers):
    """No attempt can send it, so it is not retried: the error names the topic, the size
    and the key, and the batch fails before anything is committed."""
    from mysqlcdc.sinks.kafka.producer import KafkaMessageTooLargeError, with_retries
    from mysqlcdc.sinks.kafka.settings import KafkaSettings

    topic = f"p-{uuid.uuid4().hex[:8]}"
    producer = CheckedProducer({"bootstrap.servers": kafka.bootstrap,
                                "enable.idempotence": "true", "acks": "all",
                                "message.max.bytes": "20000"})
    tries = []

    def attempt():
        tries.append(1)
        hdrs = [[("h", b"1")] if headers else None] * 3
        producer.send_all([topic] * 3, [b'{"id":1}', b'{"id":2}', b'{"id":3}'],
                          [b"small", b"x" * 50_000, b"after"], hdrs, [False] * 3)
        producer.finish(30)
    try:
        with pytest.raises(KafkaMessageTooLargeError) as info:
            with_retries(KafkaSettings(producer={"bootstrap.servers": kafka.bootstrap}),
                         "publishing a batch", attempt, lambda: None)
    finally:
        producer.close()
    assert len(tries) == 1 and info.value.code == "KAFKA_MESSAGE_TOO_LARGE"
    assert topic in info.value.message and '{"id":2}' in info.value.message
    assert "50008 bytes" in info.value.message and "message.max.bytes" in info.value.hint
