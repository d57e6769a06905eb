"""``spark.readStream.format("mysqlcdc")`` and ``spark.read.format("mysqlcdc")``.

The only place that speaks PySpark's Python Data Source API. Offsets are
``{"file": ..., "pos": ...}`` at transaction boundaries. The driver-side
reader plans ranges; read tasks open their own replication connection and
decode ``[start, end)``, which re-reads to exactly the same rows on replay.

>>> from mysqlcdc.spark import register                      # doctest: +SKIP
>>> register(spark)                                          # doctest: +SKIP
>>> df = (spark.readStream.format("mysqlcdc")                # doctest: +SKIP
...       .option("host", "127.0.0.1").option("user", "cdc")
...       .option("serverId", "5401").option("include", "shop.*").load())
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mysqlcdc.capture.backfill import SnapshotPhase
from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.envelope.model import ENVELOPE_DDL
from mysqlcdc.errors import BinlogPurgedError
from mysqlcdc.protocol import retry
from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.types import BinlogPosition

__all__ = ["MysqlcdcDataSource"]

log = logging.getLogger(__name__)


def _offset(position: BinlogPosition) -> dict:
    return {"file": position.file, "pos": position.pos}   # stable key order


def _position(offset: dict) -> BinlogPosition:
    return BinlogPosition.of(offset["file"], int(offset["pos"]))


class RangePartition(InputPartition):
    """One read task: a picklable RangeTask."""

    def __init__(self, task: RangeTask) -> None:
        super().__init__(task)
        self.task = task


class ChunkPartition(InputPartition):
    """One snapshot chunk (or the records that open a new snapshot): a picklable
    ``ChunkTask`` / ``ResetTask``."""

    def __init__(self, chunk) -> None:
        super().__init__(chunk)
        self.chunk = chunk


def _read_chunk(chunk) -> Iterator[pa.RecordBatch]:
    from mysqlcdc.capture.backfill import ResetTask, read_reset
    from mysqlcdc.capture.snapshot import read_chunk

    return read_reset(chunk) if isinstance(chunk, ResetTask) else read_chunk(chunk)


class MysqlcdcDataSource(DataSource):
    """Row changes of a MySQL/MariaDB server's binlog, one envelope row each."""

    @classmethod
    def name(cls) -> str:
        return "mysqlcdc"

    def schema(self) -> str:
        return ENVELOPE_DDL

    def streamReader(self, schema) -> DataSourceStreamReader:
        return MysqlcdcStreamReader(SourceOptions.parse(self.options))

    def reader(self, schema) -> DataSourceReader:
        return MysqlcdcBatchReader(SourceOptions.parse(self.options))


class MysqlcdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches; lives in one driver-side process per query.

    Admission control (``maxEventsPerBatch``) holds under every trigger: for
    ``trigger(availableNow=True)`` Spark calls ``prepareForTriggerAvailableNow``
    first, the server's position then becomes the query's target, and the backlog
    up to it is read in bounded batches (without the mixin Spark would ask for
    everything at once, one unbounded batch)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: RangePlanner | None = None
        self._target: BinlogPosition | None = None
        self._snapshot = SnapshotPhase(options, lambda: self.planner)

    @property
    def planner(self) -> RangePlanner:
        if self._planner is None:
            self._planner = RangePlanner(self.options)
        return self._planner

    def _through_outages(self, plan):
        """``plan(planner)``, retried through an outage of the source: Spark ends the
        query at the first exception out of these calls, so they wait here (within
        ``reconnectMaxWait``) instead. Planning is a pure function of the binlog range,
        so a retried call plans the same batch."""
        return retry.call(lambda: plan(self.planner), self.options.retry,
                          self.options.settings.address,
                          on_retry=lambda: self._planner and self._planner.drop_connection())

    def initialOffset(self) -> dict:
        start = self._through_outages(lambda p: p.resolve(self.options.start))
        return self._through_outages(lambda p: self._snapshot.initial(start))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_events_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._through_outages(lambda p: p.current())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # The initial snapshot's chunks (the binlog waits at its start), if any.
        held = self._through_outages(lambda p: self._snapshot.held(start))
        if held is not None:
            return held
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        try:
            end = _offset(self._through_outages(
                lambda p: p.next_end(_position(start), max_events, self._target)))
        except BinlogPurgedError as exc:      # snapshotMode when_needed: a new snapshot
            return self._through_outages(lambda p: self._snapshot.purged(start, exc))
        # backfills asked for by signals, read beside the stream
        return self._through_outages(lambda p: self._snapshot.after_stream(start, end))

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        chunks = [ChunkPartition(c) for c in self._through_outages(
            lambda p: self._snapshot.tasks(end))]
        if not self._snapshot.streams(end):
            return chunks                       # a new snapshot: the range was purged
        try:
            tasks = self._through_outages(lambda p: p.tasks(_position(start), _position(end)))
        except BinlogPurgedError:
            if self.options.snapshot_mode != "when_needed":
                raise
            log.warning("the binlog of %s..%s was purged before this batch read it; the "
                        "next batch snapshots the tables again", start, end)
            return chunks
        return chunks + [RangePartition(t) for t in self._tapped(tasks)]

    def _tapped(self, tasks: list[RangeTask]) -> list[RangeTask]:
        """The range tasks, handing the signal table's rows to the driver."""
        o = self.options
        if o.signal_table is None or o.schema_history is None:
            return tasks
        from dataclasses import replace

        from mysqlcdc.capture.signals import SignalTap, signal_folder

        db, table = o.signal_table
        tap = SignalTap(db, table, str(signal_folder(o.schema_history)), o.tables.user(db, table))
        return [replace(t, signals=tap) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        chunk = getattr(partition, "chunk", None)
        if chunk is not None:
            return _read_chunk(chunk)
        task = getattr(partition, "task", None)
        # Spark hands an empty range a single placeholder partition of its own.
        return iter(()) if task is None else read_range(task)

    def commit(self, end: dict) -> None:
        pass   # progress lives in Spark's checkpoint; nothing to release server-side

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


class MysqlcdcBatchReader(DataSourceReader):
    """A bounded range ``[startingPosition, endingPosition)`` as a batch DataFrame."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = RangePlanner(self.options)
        try:
            start = planner.resolve(self.options.start)
            end = planner.resolve(self.options.end)
            if end <= start:
                return []
            tasks = retry.call(lambda: planner.tasks(start, end), self.options.retry,
                               self.options.settings.address, on_retry=planner.drop_connection)
            return [RangePartition(t) for t in tasks]
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = getattr(partition, "task", None)
        # Spark hands an empty range a single placeholder partition of its own.
        return iter(()) if task is None else read_range(task)
