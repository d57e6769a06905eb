"""``df.writeStream.format("mysqlcdc-kafka")``: the PySpark stream writer of the Kafka sink.

A thin adapter over :mod:`mysqlcdc.sinks.kafka.publish` (the rest of the package
does not import pyspark). ``write`` runs in each task: it orders the task's rows by
``seq`` in bounded memory (``order.SeqSorter``: spilled to local files past
``sortMemoryMb``), publishes them a record batch at a time, each batch acknowledged
before the next is sent, and returns a commit message only when every delivery was
acknowledged (schema changes ride back in it). ``commit`` runs once per batch in a
driver-side worker after all tasks succeeded, publishes the schema changes and
transaction boundaries, and appends the batch's end position to the commit log (see
:mod:`mysqlcdc.sinks.kafka.commitlog`). A failed task fails the batch; Spark
replays it with the same id when the query runs again.

>>> from mysqlcdc.sinks.kafka import start_kafka, KafkaSettings     # doctest: +SKIP
>>> settings = KafkaSettings(producer={"bootstrap.servers": "localhost:9092"})
>>> query = start_kafka(changes, settings, checkpoint="/tmp/ck")   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from mysqlcdc.envelope.model import ENVELOPE_DDL
from mysqlcdc.errors import ConfigError
from mysqlcdc.sinks.kafka.commitlog import CommitRecord, batch_end_offset
from mysqlcdc.sinks.kafka.formats import TxnTally, merge_tallies
from mysqlcdc.sinks.kafka.order import SeqSorter
from mysqlcdc.sinks.kafka.producer import warm_producer
from mysqlcdc.sinks.kafka.publish import publish_batch, publish_commit
from mysqlcdc.sinks.kafka.settings import KafkaSettings

__all__ = ["KafkaDataSource", "KafkaStreamWriter", "KafkaCommitMessage", "task_batch_committer"]

log = logging.getLogger(__name__)


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one write task delivered: its row count and, if asked, its transactions, and
    the schema-change records the commit step publishes."""

    rows: int
    txns: dict[str, TxnTally] = field(default_factory=dict)
    schema_rows: list[dict] = field(default_factory=list)


class KafkaDataSource(DataSource):
    """Write-only data source ``mysqlcdc-kafka``; options in :mod:`.settings`."""

    @classmethod
    def name(cls) -> str:
        return "mysqlcdc-kafka"

    def schema(self) -> str:
        return ENVELOPE_DDL

    def streamWriter(self, schema, overwrite: bool) -> "KafkaStreamWriter":
        settings = KafkaSettings.parse(self.options)
        if not settings.checkpoint:
            raise ConfigError("the kafka sink needs the checkpointLocation option")
        if settings.format == "debezium" and not settings.history_dir:
            raise ConfigError("the kafka sink's debezium format needs the schemaHistory option "
                              "(the source query's schema history folder)")
        return KafkaStreamWriter(settings)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        # ordered by seq within sort_memory_mb (spilled beyond it), then published a record
        # batch at a time, each acknowledged before the next
        sorter = SeqSorter(self.settings.sort_memory_mb << 20)
        for batch in iterator:
            sorter.add(batch)
        rows, tallies, schema_rows, encode = 0, [], [], None
        for batch in sorter.sorted():
            tally, schema, encode = publish_batch(self.settings, batch, encode)
            tallies.append(tally)
            schema_rows += schema
            rows += batch.num_rows
        return KafkaCommitMessage(rows, merge_tallies(tallies), schema_rows)

    def commit(self, messages: list[KafkaCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if m is not None]
        end = batch_end_offset(self.settings.checkpoint, batchId)
        record = CommitRecord(self.settings.pipeline, batchId, end,
                              sum(m.rows for m in done), int(time.time() * 1000))
        publish_commit(self.settings, record, merge_tallies([m.txns for m in done]),
                       [r for m in done for r in m.schema_rows])

    def abort(self, messages: list[KafkaCommitMessage | None], batchId: int) -> None:
        failed = sum(m is None for m in messages)
        log.warning("kafka sink: batch %d aborted (%d of %d tasks failed); it will be replayed",
                    batchId, failed, len(messages))


def task_batch_committer(settings: KafkaSettings, write_tasks: int):
    """The ``foreachBatch`` function of a Kafka sink whose read tasks publish
    (:mod:`.tasks`): read their summaries; publish the messages tasks that shared keys
    left (spread over ``write_tasks`` tasks by topic and key, each ordered by ``seq``);
    then the schema changes, transaction boundaries and the commit record, as
    :meth:`KafkaStreamWriter.commit` does. ``settings.checkpoint``: the query's."""
    from functools import partial

    from pyspark import StorageLevel

    from mysqlcdc.sinks.kafka.tasks import read_summary, send_sorted
    from mysqlcdc.spark.checkpoint import query_id
    from mysqlcdc.spark.taskwrite import note_written

    state: dict = {}
    warm_producer(settings)     # the commit record's producer: its id comes while Spark starts

    def run(df, batch_id: int) -> None:
        if "query" not in state:
            state["query"] = query_id(settings.checkpoint)
        df = df.persist(StorageLevel.MEMORY_AND_DISK)    # read once, even when messages wait
        try:
            done = [read_summary(r[0]) for r in
                    df.where("summary IS NOT NULL").select("summary").collect()]
            if any(d.deferred for d in done):
                (df.where("summary IS NULL").repartition(write_tasks, "topic", "key")
                 .sortWithinPartitions("seq")
                 .mapInArrow(partial(send_sorted, settings), "sent BIGINT").collect())
        finally:
            df.unpersist()
        rows = sum(d.rows for d in done)
        record = CommitRecord(settings.pipeline, batch_id,
                              batch_end_offset(settings.checkpoint, batch_id), rows,
                              int(time.time() * 1000))
        schema_rows = sorted((r for d in done for r in d.schema_rows or ()),
                             key=lambda r: r["seq"])
        publish_commit(settings, record, merge_tallies([d.txns or {} for d in done]),
                       schema_rows)
        note_written(state["query"], batch_id, rows)
    return run
