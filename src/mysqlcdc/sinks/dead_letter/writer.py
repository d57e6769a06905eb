"""Writing a task's dead letters: to a Parquet folder or a Kafka topic.

A dead letter is one event a transform with ``on_error: dead_letter`` could not
process, as it entered that transform, with the error. Columns (Parquet; the Kafka
value is the same as one JSON object):

* the envelope's fields (``before``/``after``/``key`` as JSON text, ``seq`` as text),
  ``extra``: other columns the event had (JSON object text, null when none);
* ``transform`` (which one, as in the config), ``error_type``, ``error_message``,
  ``error_traceback``, ``failed_at_ms``;
* ``pipeline``, ``sink``, ``query_id``, ``batch_id``, ``partition``, ``stage``.

The letters are written when the task ends, before Spark can commit the batch, so a
batch whose letters could not be written fails and is replayed. **Parquet**: one file
per (query, batch, partition, stage) under ``<path>/pipeline=<name>/``, written to a
temporary name and renamed, so a replayed batch replaces its own file (exactly once).
**Kafka**: an idempotent producer with ``acks=all``; every delivery report is checked;
a replayed batch sends its letters again (at least once: dedupe by ``query_id``,
``batch_id`` and ``seq``).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mysqlcdc.envelope.model import ENVELOPE_FIELDS
from mysqlcdc.errors import DeadLetterWriteError
from mysqlcdc.sinks.dead_letter.settings import DeadLetterSettings

__all__ = ["DEAD_LETTER_SCHEMA", "make_writer", "ParquetDeadLetters", "KafkaDeadLetters",
           "read_dead_letters", "letter_record"]

_ENVELOPE = [name for name, _, _ in ENVELOPE_FIELDS]
_TYPES = {name: (pa.string() if name == "seq" else typ) for name, _, typ in ENVELOPE_FIELDS}
DEAD_LETTER_SCHEMA = pa.schema(
    [pa.field(n, _TYPES[n]) for n in _ENVELOPE] + [
        pa.field("extra", pa.string()), pa.field("transform", pa.string()),
        pa.field("error_type", pa.string()), pa.field("error_message", pa.string()),
        pa.field("error_traceback", pa.string()), pa.field("failed_at_ms", pa.int64()),
        pa.field("pipeline", pa.string()), pa.field("sink", pa.string()),
        pa.field("query_id", pa.string()), pa.field("batch_id", pa.int64()),
        pa.field("partition", pa.int32()), pa.field("stage", pa.int32())])


def letter_record(place, letter) -> dict:
    """One dead letter as a flat record of DEAD_LETTER_SCHEMA."""
    event = letter.event
    record = {n: event.get(n) for n in _ENVELOPE}
    record["seq"] = None if record["seq"] is None else str(record["seq"])
    extra = {k: v for k, v in event.items() if k not in _TYPES}
    record.update(
        extra=json.dumps(extra, default=str) if extra else None, transform=letter.transform,
        error_type=letter.error_type, error_message=letter.error_message,
        error_traceback=letter.traceback, failed_at_ms=letter.failed_at_ms,
        pipeline=place.pipeline, sink=place.sink, query_id=place.query_id,
        batch_id=place.batch_id, partition=place.partition, stage=place.stage)
    return record


class ParquetDeadLetters:
    """Dead letters as Parquet files under ``<path>/pipeline=<name>/``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, place, letters) -> None:
        folder = Path(self.path) / f"pipeline={place.pipeline}"
        name = (f"{place.sink}-{place.query_id}-b{place.batch_id:08d}-p{place.partition:05d}"
                f"-s{place.stage}.parquet")
        table = pa.Table.from_pylist([letter_record(place, x) for x in letters],
                                     schema=DEAD_LETTER_SCHEMA)
        tmp = folder / f".{name}.{uuid.uuid4().hex}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, tmp)
            os.replace(tmp, folder / name)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise DeadLetterWriteError(f"cannot write dead letters to {folder}: "
                                       f"{err.strerror or err}") from None


class KafkaDeadLetters:
    """Dead letters as JSON messages of one topic, keyed by the event's key."""

    def __init__(self, topic: str, producer: dict[str, str], timeout_s: float = 60.0) -> None:
        self.topic, self.producer, self.timeout_s = topic, dict(producer), timeout_s

    def __repr__(self) -> str:
        return f"KafkaDeadLetters(topic={self.topic!r})"

    def write(self, place, letters) -> None:
        from confluent_kafka import KafkaException

        from mysqlcdc.sinks.kafka.producer import CheckedProducer, KafkaDeliveryError

        config = {"message.timeout.ms": str(int(self.timeout_s * 1000)), **self.producer,
                  "enable.idempotence": "true", "acks": "all"}
        try:
            self._ensure_topic()
            producer = CheckedProducer(config)
            for letter in letters:
                record = letter_record(place, letter)
                key = record["key"].encode() if record["key"] else None
                producer.send(self.topic, key, json.dumps(record).encode(),
                              [("transform", letter.transform.encode())])
            producer.finish(self.timeout_s + 5)
        except (KafkaDeliveryError, KafkaException, TimeoutError) as err:
            reason = str(err) or f"no answer within {self.timeout_s:.0f} s"
            raise DeadLetterWriteError(f"cannot write dead letters to topic {self.topic}: "
                                       f"{reason}") from None

    def _ensure_topic(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({k: v for k, v in self.producer.items()
                             if not k.startswith(("linger.", "batch.", "compression."))})
        future = admin.create_topics([NewTopic(self.topic, num_partitions=1)],
                                     request_timeout=self.timeout_s)[self.topic]
        try:
            future.result(timeout=self.timeout_s)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def make_writer(settings: DeadLetterSettings):
    """The writer for a dead-letter target (it pickles to the executors)."""
    if settings.path is not None:
        return ParquetDeadLetters(settings.path)
    return KafkaDeadLetters(settings.topic, dict(settings.producer), settings.delivery_timeout_s)


def read_dead_letters(path: str) -> pa.Table:
    """Every dead letter of a Parquet dead-letter folder (all pipelines), as one table."""
    import pyarrow.dataset as ds

    if not Path(path).exists():
        return DEAD_LETTER_SCHEMA.empty_table()
    files = [str(p) for p in Path(path).rglob("*.parquet") if not p.name.startswith(".")]
    if not files:
        return DEAD_LETTER_SCHEMA.empty_table()
    return ds.dataset(files, format="parquet", schema=DEAD_LETTER_SCHEMA).to_table()
