"""Publishing inside the source's read tasks (DESIGN.md decision 20, amended for Kafka).

Sent through the JVM, every decoded row crossed from the read task's Python worker into
Spark's rows, through a shuffle by key, and back into a write task's Python worker, to
be published there. :class:`TaskPublisher` is the sink's *task writer* instead: the read
task that decoded the rows publishes them, in ``seq`` order, a record batch at a time
(each acknowledged before the next, as a write task does), and yields one summary row:
rows, transaction tally, schema changes. The sink's query is then a ``foreachBatch``
that publishes the schema changes, transaction boundaries and the commit record.

Order per key needs every change of a key to be published by one task in ``seq``
order. A read task that holds all its keys' changes of the batch (the batch's only
task, or one of its snapshot chunks, whose keys are disjoint) publishes them itself. One
that may share keys with another task of its batch (parallel range slices, a backfill
chunk beside the stream, the records opening a new snapshot; the source marks them,
``shares_keys``) only encodes its messages and yields them; the ``foreachBatch`` then
spreads them over write tasks by key, orders each task's by ``seq`` and publishes them,
as the stream writer does. A pipeline at ``parallelism: 1`` meets that case only for
backfills running beside the stream.

A task that publishes itself encodes each record batch's messages and hands them to a
publishing thread of its own (:class:`_Publisher`), then takes and encodes the next
batch meanwhile: waiting for the broker's acknowledgements releases the GIL, so the wait
overlaps the next batch's encoding (and its decoding, where the task decodes). The
thread sends the batches in order, one at a time, each acknowledged before the next is
sent (nothing changes for order or retries); at most one encoded batch waits for it, and
its error fails the task.
"""

from __future__ import annotations

import pickle
import queue
import threading
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from mysqlcdc.arrowbuild import record_batch
from mysqlcdc.sinks.kafka.formats import TxnTally, merge_tallies
from mysqlcdc.sinks.kafka.producer import warm_producer
from mysqlcdc.sinks.kafka.publish import encode_batch, send_messages
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.sinks.kafka.taskwriter import TASK_DDL, TaskPublisher  # noqa: F401
from mysqlcdc.sinks.kafka.txnorder import Numbering

__all__ = ["TaskPublisher", "TASK_DDL", "Summary", "publish", "read_summary", "send_sorted"]

TASK_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
                         ("headers", pa.binary()), ("seq", pa.decimal128(38, 0)),
                         ("tombstone", pa.bool_()), ("summary", pa.binary())])
SENT_SCHEMA = pa.schema([("sent", pa.int64())])
_SUMMARY_SCHEMA = pa.schema([("summary", pa.binary())])


@dataclass
class Summary:
    """What one read task did: rows it took (schema changes included), messages it left
    to the sink's write tasks (none when it published itself), its transactions' tally
    and the schema changes for the commit step."""

    rows: int = 0
    deferred: int = 0
    txns: dict[str, TxnTally] | None = None
    schema_rows: list[dict] | None = None


def read_summary(blob: bytes) -> Summary:
    return pickle.loads(blob)


def publish(settings: KafkaSettings, batches: Iterator[pa.RecordBatch],
            shares_keys: bool = False) -> Iterator[pa.RecordBatch]:
    """What :meth:`TaskPublisher.write` does (the writer's class lives in a module of its
    own, without pyarrow: :mod:`.taskwriter`)."""
    numbering = Numbering() if settings.transaction_orders else None
    done, tallies, schema_rows, encode = Summary(), [], [], None
    publisher = None if shares_keys else _Publisher(settings)
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            if numbering is not None:
                batch = numbering.add(batch)
            done.rows += batch.num_rows
            messages, changes, tally, schema, encode = encode_batch(settings, batch, encode)
            tallies.append(tally)
            schema_rows += schema
            if messages is None:
                continue
            if publisher is not None:
                publisher.put(messages)
            else:
                done.deferred += changes.num_rows
                yield _as_rows(messages, changes)
        if publisher is not None:
            publisher.finish()
    finally:
        if publisher is not None:
            publisher.stop()
    done.txns, done.schema_rows = merge_tallies(tallies), schema_rows
    yield _summary_row(done)


def _summary_row(done: Summary) -> pa.RecordBatch:
    """The task's last row: its summary, every other column null. Made from buffers, as
    every batch of this task is (``arrowbuild``: no pandas imported into a read task)."""
    blob = record_batch({"summary": [pickle.dumps(done)]}, _SUMMARY_SCHEMA).column(0)
    return pa.RecordBatch.from_arrays(
        [blob if f.name == "summary" else pa.nulls(1, f.type) for f in TASK_SCHEMA],
        schema=TASK_SCHEMA)


def _as_rows(messages: tuple, changes: pa.RecordBatch) -> pa.RecordBatch:
    """Encoded messages of ``changes`` as rows for the sink's write tasks."""
    topics, keys, values, headers, tombstones = messages
    return pa.RecordBatch.from_pydict({
        "topic": topics, "key": keys, "value": values,
        "headers": [pickle.dumps(h) for h in headers], "seq": changes.column("seq"),
        "tombstone": tombstones, "summary": [None] * changes.num_rows}, schema=TASK_SCHEMA)


def send_sorted(settings: KafkaSettings, batches: Iterator[pa.RecordBatch]
                ) -> Iterator[pa.RecordBatch]:
    """A write task of the ``foreachBatch`` step: publish the messages (ordered by ``seq``,
    every message of a key in this task) a record batch at a time; yields the count."""
    sent = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        send_messages(settings, *(batch.column(c).to_pylist() for c in ("topic", "key", "value")),
                      [pickle.loads(h) for h in batch.column("headers").to_pylist()],
                      batch.column("tombstone").to_pylist())
        sent += batch.num_rows
    yield pa.RecordBatch.from_pydict({"sent": [sent]}, schema=SENT_SCHEMA)


class _Publisher:
    """The thread that sends a task's encoded batches (see :func:`encode_batch`) in the
    order given, each acknowledged before the next (see the module docstring)."""

    _END = object()

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        warm_producer(settings)        # its producer id comes while the first batch encodes
        self.waiting: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="kafka-publish", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                messages = self.waiting.get()
                if messages is self._END or self.stopping:
                    return
                send_messages(self.settings, *messages)
        except BaseException as err:   # noqa: BLE001 - raised again in the task's thread
            self.error = err

    def put(self, item) -> None:
        """Hand ``item`` on, waiting while the thread still has one to start; raises the
        thread's error as soon as it has one."""
        while True:
            if self.error is not None:
                raise self.error
            if not self.thread.is_alive():
                raise RuntimeError("the Kafka publishing thread ended early")
            try:
                self.waiting.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def finish(self) -> None:
        """Wait until every batch handed on is acknowledged (or raise its error)."""
        self.put(self._END)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """The task ends (normally, or failing or cancelled): no batch is started after."""
        self.stopping = True
        try:
            self.waiting.put_nowait(self._END)
        except queue.Full:
            pass
        self.thread.join()
