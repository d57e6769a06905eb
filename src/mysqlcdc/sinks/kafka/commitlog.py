"""The commit log: one record per fully delivered batch, with the batch's end position.

Where the end position comes from. A write task sees rows, not offsets, and the
highest ``file``/``pos`` among a batch's rows is *not* its end: the batch runs to
the end of its last transaction and may end after rows that were filtered out.
Spark, however, writes the exact source offset of every batch to
``<checkpoint>/offsets/<batchId>`` *before* running it (its write-ahead log), and
the mysqlcdc source's offsets are always transaction boundaries. The sink's
``commit(messages, batchId)`` runs only after every task of the batch has had every
delivery acknowledged, reads that file and appends ``{"pipeline", "batch_id", "end",
"rows", "ts_ms"}`` (key = the pipeline name) to the single-partition commit topic.
Hence every change before ``end`` of the last record is in Kafka; resuming there can
repeat the changes of a batch that was half published, never skip one. This needs a
checkpoint on a local file system (or ``file://``), which Spark local always has.

Reading the last record uses ``assign()``, a window below the high watermark and
PARTITION_EOF (see KAFKA_NOTES.md: watermarks may undercount).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from mysqlcdc.errors import ConfigError
from mysqlcdc.sinks.kafka.producer import KafkaDeliveryError
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.spark.checkpoint import batch_offset, local_dir
from mysqlcdc.types import BinlogPosition

__all__ = ["CommitRecord", "batch_end_offset", "read_last_commit"]


@dataclass(frozen=True)
class CommitRecord:
    pipeline: str
    batch_id: int
    end: dict
    rows: int
    ts_ms: int

    def encode(self) -> tuple[bytes, bytes]:
        return self.pipeline.encode(), json.dumps(asdict(self)).encode()

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition.of(self.end["file"], int(self.end["pos"]))


def batch_end_offset(checkpoint: str | None, batch_id: int) -> dict:
    """The source offset Spark recorded for ``batch_id`` in a local checkpoint."""
    local = local_dir(checkpoint) if checkpoint else None
    if local is None:
        raise ConfigError(f"the kafka sink needs a local checkpointLocation, got {checkpoint!r}")
    end = batch_offset(local, batch_id)
    if end is None:
        raise ConfigError(f"no mysqlcdc source offset in {local / 'offsets' / str(batch_id)}")
    return {"file": end.file, "pos": end.pos}


def read_last_commit(settings: KafkaSettings, timeout_s: float = 30.0) -> CommitRecord | None:
    """The newest commit record of ``settings.pipeline``, or None when there is none."""
    topic = settings.resolve(settings.commit_topic)
    consumer = Consumer({**settings.admin_config(), "group.id": f"mysqlcdc-resume-{uuid.uuid4()}",
                         "enable.auto.commit": "false", "enable.partition.eof": "true"})
    try:
        listed = consumer.list_topics(timeout=timeout_s).topics   # all: asking for one creates it
        if topic not in listed or 0 not in listed[topic].partitions:
            return None
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
        window = 64
        while True:
            start = max(low, high - window)
            found = _last_in(consumer, TopicPartition(topic, 0, start), settings.pipeline, timeout_s)
            if found is not None or start == low:
                return found
            window *= 8
    finally:
        consumer.close()


def _last_in(consumer: Consumer, tp: TopicPartition, pipeline: str,
             timeout_s: float) -> CommitRecord | None:
    consumer.assign([tp])
    last: CommitRecord | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return last
            raise KafkaDeliveryError(f"reading the commit log: {msg.error().str()}")
        if msg.key() == pipeline.encode():
            last = CommitRecord(**json.loads(msg.value()))
    raise KafkaDeliveryError(f"reading the commit log took more than {timeout_s:.0f} s")
