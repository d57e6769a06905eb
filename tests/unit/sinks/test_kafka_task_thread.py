"""The read task's publishing thread (sinks/kafka/tasks.py): encoded batches go out in the
order given, one at a time; its error fails the task; nothing starts after the task ends."""

from __future__ import annotations

import threading
import time

import pytest

from mysqlcdc.sinks.kafka import tasks
from mysqlcdc.sinks.kafka.settings import KafkaSettings

pytestmark = pytest.mark.unit

SETTINGS = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1"})


def _batch(n: int) -> tuple:
    """An encoded batch as the task hands it on: (topics, keys, values, headers,
    tombstones)."""
    return ["t"], [str(n).encode()], [b"v"], [[]], [False]


def test_batches_are_published_in_order_one_at_a_time(monkeypatch):
    seen, busy = [], threading.Lock()

    def send(settings, topics, keys, values, headers, tombstones):
        assert busy.acquire(blocking=False), "two batches published at once"
        time.sleep(0.01)
        seen.append(int(keys[0]))
        busy.release()

    monkeypatch.setattr(tasks, "send_messages", send)
    p = tasks._Publisher(SETTINGS)
    for i in range(20):
        p.put(_batch(i))
    p.finish()
    p.stop()
    assert seen == list(range(20))


def test_an_error_fails_the_task_and_nothing_is_published_after_it(monkeypatch):
    seen = []

    def send(settings, topics, keys, values, headers, tombstones):
        n = int(keys[0])
        if n == 3:
            raise RuntimeError("broker gone")
        seen.append(n)

    monkeypatch.setattr(tasks, "send_messages", send)
    p = tasks._Publisher(SETTINGS)
    with pytest.raises(RuntimeError, match="broker gone"):
        for i in range(50):
            p.put(_batch(i))
        p.finish()
    p.stop()
    assert seen == [0, 1, 2]


def test_stop_waits_for_the_batch_being_published_and_starts_no_other(monkeypatch):
    started, release = [], threading.Event()

    def send(settings, topics, keys, values, headers, tombstones):
        started.append(int(keys[0]))
        release.wait(5)

    monkeypatch.setattr(tasks, "send_messages", send)
    p = tasks._Publisher(SETTINGS)
    p.put(_batch(0))
    p.put(_batch(1))                 # waits in the queue while 0 is published
    threading.Timer(0.2, release.set).start()
    p.stop()                         # the task ends (cancelled, or its decode failed)
    assert started == [0] and not p.thread.is_alive()


def test_the_task_makes_its_producer_before_it_encodes_the_first_batch(monkeypatch):
    """An idempotent producer's first send waits for a producer id (0.5-1 s against the
    test broker): the task makes its producer first, so that wait overlaps the encoding."""
    from mysqlcdc.sinks.kafka import producer as producers

    made_before_first_batch = []
    monkeypatch.setattr(tasks, "send_messages", lambda *args: None)
    key = tuple(sorted(SETTINGS.producer_config().items()))
    producers.drop_producer(SETTINGS)

    def batches():
        made_before_first_batch.append(key in producers._CACHE)
        yield from ()

    try:
        list(tasks.TaskPublisher(SETTINGS).write(batches()))
        assert made_before_first_batch == [True]
        producers.drop_producer(SETTINGS)
        list(tasks.TaskPublisher(SETTINGS).write(batches(), shares_keys=True))
        assert made_before_first_batch == [True, False]   # it publishes nothing itself
    finally:
        producers.drop_producer(SETTINGS)


def test_a_producer_that_cannot_be_made_ahead_is_left_to_the_first_send():
    from mysqlcdc.sinks.kafka import producer as producers

    bad = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1", "linger.ms": "soon"})
    producers.warm_producer(bad)          # no error here: the first send raises it
    assert tuple(sorted(bad.producer_config().items())) not in producers._CACHE
    with pytest.raises(Exception, match="Invalid value for configuration property"):
        producers.producer_for(bad)


def test_the_commit_step_makes_the_drivers_producer_when_the_query_starts(tmp_path):
    from mysqlcdc.sinks.kafka import producer as producers
    from mysqlcdc.sinks.kafka.writer import task_batch_committer

    settings = KafkaSettings(producer={"bootstrap.servers": "127.0.0.1:1"},
                             checkpoint=str(tmp_path))
    producers.drop_producer(settings)
    try:
        task_batch_committer(settings, 1)
        assert tuple(sorted(settings.producer_config().items())) in producers._CACHE
    finally:
        producers.drop_producer(settings)


def test_a_producer_that_failed_while_idle_is_never_sent_with():
    """A producer made ahead during an outage learns that every broker is down before it
    sends anything; its acknowledgements can no longer be trusted, so the next send gets
    a new one instead of failing on the old one's state."""
    import socket

    from confluent_kafka import KafkaError

    from mysqlcdc.sinks.kafka import producer as producers

    # a port that takes connections and never answers: the broker is not "down" within
    # the test, so a healthy producer is reused (a closed port would be reported down)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    settings = KafkaSettings(producer={"bootstrap.servers": f"127.0.0.1:{port}"})
    try:
        first = producers.producer_for(settings)
        assert producers.producer_for(settings) is first            # healthy: reused
        first.failure = KafkaError(KafkaError._ALL_BROKERS_DOWN)
        second = producers.producer_for(settings)
        assert second is not first and second.failure is None
    finally:
        producers.drop_producer(settings)
        silent.close()
