"""A producer whose every delivery report is checked, and the retry loop around it.

``produce()`` never fails while brokers are down: messages queue and their delivery
reports fail later (``_MSG_TIMED_OUT``) or never come. So a batch is done only when
``flush`` returns with nothing queued and every report succeeded. Any failure, any
fatal producer error (a restarted broker answers an idempotent producer with
``UNKNOWN_PRODUCER_ID``) and losing every broker discard the producer: the next
attempt sends the whole batch again with a new one. Repeats are possible, losses are not.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer

from mysqlcdc import stats
from mysqlcdc.errors import TerminalError, TransientError
from mysqlcdc.sinks.kafka.settings import KafkaSettings

__all__ = ["KafkaDeliveryError", "KafkaMessageTooLargeError", "CheckedProducer", "with_retries",
           "drop_producer", "warm_producer"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class KafkaDeliveryError(TransientError):
    code = "KAFKA_DELIVERY_FAILED"
    hint = ("Check that the Kafka brokers are reachable and accept writes; the batch is "
            "replayed when the pipeline runs again, nothing is lost.")


class KafkaMessageTooLargeError(TerminalError):
    """A message larger than the producer or the broker takes: sending it again cannot
    succeed, so the batch fails at once."""

    code = "KAFKA_MESSAGE_TOO_LARGE"
    hint = ("Raise the sink's producer_config message.max.bytes and the topic's "
            "max.message.bytes (topic_config; the broker's message.max.bytes for new "
            "topics), or leave the large column out with a transform (drop_columns); the "
            "batch was not committed and is published again on the next run.")


_TOO_LARGE = KafkaError.MSG_SIZE_TOO_LARGE


def _too_large(topic: str, key: bytes | None, value: bytes | None,
               err: KafkaError) -> KafkaMessageTooLargeError:
    shown = (key or b"")[:120].decode("utf-8", "replace")
    return KafkaMessageTooLargeError(
        f"a message of {len(value or b'') + len(key or b'')} bytes for topic {topic!r} "
        f"(key {shown}) is larger than Kafka takes: {err.str()}")


class CheckedProducer:
    """An idempotent ``acks=all`` producer that counts failed and missing delivery reports."""

    def __init__(self, config: dict[str, str]) -> None:
        self.failure: KafkaError | None = None
        self.too_large: KafkaMessageTooLargeError | None = None   # the broker's refusal
        # reports of failed deliveries only: a message leaves the queue either delivered or
        # with its failure's report, so an empty queue after flush and no failure report is
        # every message delivered (and no Python callback runs per delivered message)
        self._producer = Producer({**config, "delivery.report.only.error": True,
                                   "error_cb": self._on_error})

    def _on_error(self, err: KafkaError) -> None:
        # After all brokers were down, acknowledgements of this producer cannot be trusted:
        # a broker that came back empty may take its old sequence numbers for duplicates
        # and acknowledge without storing. The batch is sent again by a new producer.
        if err.fatal() or err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.failure = self.failure or err
        log.warning("kafka: %s", err.str())

    def _on_delivery(self, err: KafkaError | None, msg) -> None:
        if err is not None and err.code() == _TOO_LARGE and self.too_large is None:
            self.too_large = _too_large(msg.topic(), msg.key(), msg.value(), err)
        if err is not None and self.failure is None:
            self.failure = err

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]] | None = None, partition: int = -1) -> None:
        """Queue one message (``partition`` -1: by the partitioner, i.e. by key hash)."""
        while True:
            try:
                self._producer.produce(topic, value, key, partition=partition, headers=headers,
                                       on_delivery=self._on_delivery)
                return
            except BufferError:          # local queue full: let deliveries drain
                self._serve(self._producer.poll, 0.05)
            except KafkaException as exc:
                raise self._refused(exc, topic, key, value) from None
            self._check()

    @staticmethod
    def _refused(exc: KafkaException, topic: str, key, value) -> Exception:
        """What ``produce()`` raised: a message over the producer's limit is named (no
        attempt can send it), anything else stays Kafka's, for the retries."""
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() == _TOO_LARGE:
            return _too_large(topic, key, value, err)
        return exc

    def send_all(self, topics: list[str], keys: list, values: list, headers: list,
                 tombstones: list[bool]) -> None:
        """:meth:`send` of every message in order, each flagged one followed by a tombstone
        (its key, no value)."""
        produce, report = self._producer.produce, self._on_delivery
        if not any(tombstones) and headers.count(None) == len(headers):
            # the usual batch (no tombstones, no headers): fewer arguments per call
            for topic, key, value in zip(topics, keys, values):
                try:
                    produce(topic, value, key, on_delivery=report)
                except BufferError:
                    self.send(topic, key, value)
                except KafkaException as exc:
                    raise self._refused(exc, topic, key, value) from None
            return
        for topic, key, value, hdrs, tombstone in zip(topics, keys, values, headers, tombstones):
            try:
                produce(topic, value, key, headers=hdrs, on_delivery=report)
            except BufferError:
                self.send(topic, key, value, hdrs)
            except KafkaException as exc:
                raise self._refused(exc, topic, key, value) from None
            if tombstone:
                self.send(topic, key, None, hdrs)

    def serve_callbacks(self) -> None:
        """Run the callbacks librdkafka queued since the last poll or flush (error reports
        of a producer that sat idle), without waiting."""
        self._serve(self._producer.poll, 0)

    def finish(self, timeout_s: float) -> None:
        """Wait for every delivery report; raise unless all succeeded."""
        left = self._serve(self._producer.flush, timeout_s)
        self._check()
        if left:
            raise KafkaDeliveryError(f"{left} messages not acknowledged within {timeout_s:.0f} s")

    def _serve(self, call: Callable[[float], int], timeout_s: float) -> int:
        """poll/flush, which run the callbacks. After a fatal error confluent-kafka
        surfaces a pending exception as SystemError from inside a callback."""
        try:
            return call(timeout_s)
        except SystemError as err:
            raise KafkaDeliveryError(f"producer failed while serving callbacks: {err}") from None

    def _check(self) -> None:
        if self.too_large is not None:
            raise self.too_large
        if self.failure is not None:
            raise KafkaDeliveryError(f"delivery failed: {self.failure.str()}")

    def close(self) -> None:
        """Drop whatever is still queued; a producer in a fatal state may refuse, harmlessly."""
        try:
            self._producer.purge()
            self._producer.flush(0)
        except KafkaException as err:
            log.info("kafka: discarding a failed producer: %s", err)


_CACHE: dict[tuple, CheckedProducer] = {}


def producer_for(settings: KafkaSettings) -> CheckedProducer:
    """One producer per Python worker and config, reused by its tasks while healthy.

    A send that fails drops its producer (:func:`with_retries`); one that failed while it
    sat idle between sends (every broker gone meanwhile, as for a producer made ahead by
    :func:`warm_producer` during an outage) is dropped here, before anything is sent
    with it."""
    key = tuple(sorted(settings.producer_config().items()))
    producer = _CACHE.get(key)
    if producer is not None:
        producer.serve_callbacks()    # an error it met while idle is only reported now
    if producer is not None and producer.failure is not None:
        del _CACHE[key]
        producer.close()
        producer = None
    if producer is None:
        producer = _CACHE[key] = CheckedProducer(settings.producer_config())
    return producer


def warm_producer(settings: KafkaSettings) -> None:
    """Make this process's producer now, before it has anything to send.

    An idempotent producer sends nothing until the broker has given it a producer id,
    which librdkafka asks for on a timer: measured against the test broker, the first
    flush of a producer made just before waited 0.5–1.0 s, one made 0.6 s earlier none.
    Making it where a task or a query starts lets that wait pass while the first batch is
    read and encoded. A producer that cannot be made now (a bad setting) is left to the
    first send, whose retries and errors are the sink's."""
    try:
        producer_for(settings)
    except Exception as err:   # noqa: BLE001 - the first send makes it again and says why
        log.debug("kafka: producer not made ahead: %s", err)


def drop_producer(settings: KafkaSettings) -> None:
    key = tuple(sorted(settings.producer_config().items()))
    producer = _CACHE.pop(key, None)
    if producer is not None:
        producer.close()


def with_retries(settings: KafkaSettings, what: str, attempt: Callable[[], T],
                 reset: Callable[[], None]) -> T:
    """Run ``attempt`` up to ``settings.delivery_attempts`` times, resetting after a failure."""
    for n in range(1, settings.delivery_attempts + 1):
        try:
            return attempt()
        except (KafkaDeliveryError, KafkaException) as err:
            reset()
            stats.count("sink_errors" if n == settings.delivery_attempts else "sink_retries",
                        settings.pipeline, "kafka")
            if n == settings.delivery_attempts:
                raise KafkaDeliveryError(f"{what}: gave up after {n} attempts: {err}") from None
            log.warning("%s: attempt %d failed (%s); retrying with a new producer", what, n, err)
            time.sleep(min(0.5 * 2 ** n, 10.0))
    raise AssertionError("unreachable")
