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

from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.capture.snapshot import ChunkTask, read_chunk
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.envelope.model import ENVELOPE_DDL
from mysqlcdc.protocol import retry
from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.types import BinlogPosition

__all__ = ["MysqlcdcDataSource"]


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
    """One snapshot chunk: a picklable ChunkTask."""

    def __init__(self, chunk: ChunkTask) -> None:
        super().__init__(chunk)
        self.chunk = chunk


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
        if self.options.snapshot_mode == "never":
            return _offset(start)
        # The schema history starts at S now: the snapshot takes a while, and a DDL made
        # meanwhile must be one the history sees, not one a later bootstrap refuses.
        tables = self._through_outages(lambda p: (p._ensure_history(start), p.snapshot_tables())[1])
        offset = _offset(start)
        if tables:
            offset["snapshot"] = {"tables": tables, "after": None, "chunk": 0}
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_events_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._through_outages(lambda p: p.current())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        snap = start.get("snapshot")
        if snap is not None and snap["tables"]:
            # Snapshot phase: the next chunks; the binlog waits at the snapshot's start.
            plan, cursor = self._through_outages(
                lambda p: p.snapshot_chunks(snap, self.options.parallelism))
            return {**_offset(_position(start)), "snapshot": {**cursor, "plan": plan}}
        if snap is not None and self.options.snapshot_mode == "initial_only":
            return start                       # snapshot done; nothing is streamed
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._through_outages(lambda p: p.plan_end(start, max_events, self._target))

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        plan = (end.get("snapshot") or {}).get("plan")
        if plan:
            chunks = self._through_outages(lambda p: p.chunk_tasks(plan))
            return [ChunkPartition(c) for c in chunks]
        tasks = self._through_outages(lambda p: p.plan_tasks(start, end))
        return [RangePartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        chunk = getattr(partition, "chunk", None)
        if chunk is not None:
            return read_chunk(chunk)
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
