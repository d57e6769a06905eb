"""``spark.readStream.format("mysqlcdc")`` and ``spark.read.format("mysqlcdc")``.

The only place that speaks PySpark's Python Data Source API. Offsets are
``{"file": ..., "pos": ...}`` at transaction boundaries, with the GTID set and
commit time there (``gtid``, ``ts``) and the failover ``epoch``. A streaming
batch's end offset is a rule (``upto``) its read tasks resolve to a boundary
(``capture.batchend``): they find where the batch ends and record it, and the
driver plans the next batch from that record. Read tasks open their own
replication connection and decode ``[start, end)``, which re-reads to exactly the
same rows on replay.

>>> from mysqlcdc.spark import register                      # doctest: +SKIP
>>> register(spark)                                          # doctest: +SKIP
>>> df = (spark.readStream.format("mysqlcdc")                # doctest: +SKIP
...       .option("host", "127.0.0.1").option("user", "cdc")
...       .option("serverId", "5401").option("include", "shop.*").load())
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

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

from mysqlcdc.capture.control import SeekRequest, StreamControl
from mysqlcdc.errors import BinlogPurgedError, SourceChangedError
from mysqlcdc.protocol import retry
from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.types import BinlogPosition

if TYPE_CHECKING:
    import pyarrow as pa

    from mysqlcdc.capture.planner import RangePlanner
    from mysqlcdc.capture.positions import PositionFinder
    from mysqlcdc.capture.task import RangeTask

# Spark creates the source, plans its reads and runs its planner each in a Python process
# of its own, one after the other before the first batch: this module imports what only
# the planner or the read tasks need where they need it, so the others start sooner.

__all__ = ["MysqlcdcDataSource"]

log = logging.getLogger(__name__)


def _offset(position: BinlogPosition, gtid: str | None = None, ts: int | None = None,
            epoch: int = 0) -> dict:
    """An offset: ``file``, ``pos``, then (when known) ``gtid``, the GTID set of every
    transaction before the position, ``ts``, the commit time (ms) of the last one, and
    ``epoch``, how many failovers the pipeline followed. Key order is fixed: Spark finds
    "no new data" by comparing the JSON text."""
    out: dict = {"file": position.file, "pos": position.pos}
    if gtid is not None:
        out["gtid"] = gtid
    if ts is not None:
        out["ts"] = ts
    if epoch:
        out["epoch"] = epoch
    return out


def _position(offset: dict) -> BinlogPosition:
    return BinlogPosition.of(offset["file"], int(offset["pos"]))


class RangePartition(InputPartition):
    """One read task: a picklable RangeTask, the seq epoch and where to count rows.
    ``shares_keys``: another task of the same batch may hold changes of the same keys
    (see :func:`_mark_shared`)."""

    def __init__(self, task: RangeTask, epoch: int = 0, counts: str | None = None,
                 spool: str | None = None) -> None:
        super().__init__(task)
        self.task, self.epoch, self.counts = task, epoch, counts
        self.shares_keys = False
        self.spool = spool            # decoded ahead: the ledger entry (spark.ahead)


class ChunkPartition(InputPartition):
    """One snapshot chunk (or the records that open a new snapshot): a picklable
    ``ChunkTask`` / ``ResetTask``."""

    def __init__(self, chunk, epoch: int = 0, counts: str | None = None) -> None:
        super().__init__(chunk)
        self.chunk, self.epoch, self.counts = chunk, epoch, counts
        self.shares_keys = False


def _mark_shared(parts: list) -> list:
    """Mark the partitions of a batch whose tasks may hold changes of the same key: a
    sink publishing in its read tasks (decision 20) must then leave each key's order to
    a step that sees the whole batch. A batch's only task shares with nobody, nor do
    snapshot chunks among themselves (a chunk is a key range of one table, or a whole
    table); range slices do (a key changes in several), and so do chunks beside a range
    or the records that open a new snapshot."""
    from mysqlcdc.capture.snapshot import ChunkTask

    if len(parts) > 1 and not all(isinstance(getattr(p, "chunk", None), ChunkTask)
                                  for p in parts):
        for p in parts:
            p.shares_keys = True
    return parts


def _read_chunk(chunk) -> Iterator[pa.RecordBatch]:
    from mysqlcdc.capture.backfill import ResetTask, read_reset
    from mysqlcdc.capture.snapshot import read_chunk

    return read_reset(chunk) if isinstance(chunk, ResetTask) else read_chunk(chunk)


# a new pipeline that starts at ``latest`` takes the server's position again this many
# times when a DDL runs between that position and the definitions it reads (each try
# costs one position, the definitions and a short walk; 10 lost to a DDL every 60 ms on
# a slow machine in a CI run)
_LATEST_TRIES = 50


class MysqlcdcDataSource(DataSource):
    """Row changes of a MySQL/MariaDB server's binlog, one envelope row each."""

    @classmethod
    def name(cls) -> str:
        return "mysqlcdc"

    def schema(self) -> str:
        from mysqlcdc.spark.taskwrite import read_writer

        writer = read_writer(self.options)
        if writer is not None:
            return writer.ddl                          # what the sink's task writer yields
        # the transforms' module imports pyarrow: only a source without a writer needs it
        from mysqlcdc.spark.transforms import read_chain, schema_ddl

        return schema_ddl(read_chain(self.options))   # the envelope (+ transforms' columns)

    def streamReader(self, schema) -> DataSourceStreamReader:
        from mysqlcdc.spark.taskwrite import read_writer
        from mysqlcdc.spark.transforms import read_chain

        return MysqlcdcStreamReader(SourceOptions.parse(self.options), read_chain(self.options),
                                    read_writer(self.options))

    def reader(self, schema) -> DataSourceReader:
        from mysqlcdc.spark.taskwrite import read_writer
        from mysqlcdc.spark.transforms import read_chain

        return MysqlcdcBatchReader(SourceOptions.parse(self.options), read_chain(self.options),
                                   read_writer(self.options))


class MysqlcdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches; lives in one driver-side process per query.

    Admission control (``maxEventsPerBatch``) holds under every trigger: for
    ``trigger(availableNow=True)`` Spark calls ``prepareForTriggerAvailableNow``
    first, the server's position then becomes the query's target, and the backlog
    up to it is read in bounded batches (without the mixin Spark would ask for
    everything at once, one unbounded batch)."""

    def __init__(self, options: SourceOptions, chain=None, writer=None) -> None:
        self.options = options
        self.chain = chain            # transforms the read tasks apply (spark.transforms)
        self.writer = writer          # the sink's task writer (spark.taskwrite), if any
        self._planner: RangePlanner | None = None
        self._target: BinlogPosition | None = None
        self._snapshot_phase = None
        folder = options.schema_history
        self._control = None if folder is None else StreamControl(folder)
        self._counts = None if folder is None else str(Path(folder) / "counts")
        self._runway_at = float("-inf")
        # a widened table filter is looked for once per query (``_queue_widened``); the
        # decode-ahead's reader leaves it to the query's
        self._tables_checked = folder is None
        self._ledger = None
        if options.decode_ahead:
            from mysqlcdc.spark.ahead import Ledger

            self._ledger = Ledger(options.decode_ahead)

    @property
    def planner(self) -> RangePlanner:
        if self._planner is None:
            from mysqlcdc.capture.planner import RangePlanner

            self._planner = RangePlanner(self.options)
        return self._planner

    @property
    def _snapshot(self):
        """The snapshot phase (``capture.backfill.SnapshotPhase``), made at its first use."""
        if self._snapshot_phase is None:
            from mysqlcdc.capture.backfill import SnapshotPhase

            self._snapshot_phase = SnapshotPhase(self.options, lambda: self.planner)
        return self._snapshot_phase

    def _finder(self, p: RangePlanner) -> PositionFinder:
        from mysqlcdc.capture.positions import PositionFinder

        return PositionFinder(self.options.settings, self.options.server_id, p._sql,
                              self.options.retry)

    def _through_outages(self, plan):
        """``plan(planner)``, retried through an outage of the source: Spark ends the
        query at the first exception out of these calls, so they wait here (within
        ``reconnectMaxWait``) instead. Planning is a pure function of the binlog range,
        so a retried call plans the same batch."""
        return retry.call(lambda: plan(self.planner), self.options.retry,
                          self.options.settings.address,
                          on_retry=lambda: self._planner and self._planner.drop_connection())

    def initialOffset(self) -> dict:
        seek = self._control.pending_seek() if self._control is not None else None
        if seek is not None:                # a seek before the first batch: start there
            return seek.offset()
        from mysqlcdc.capture.positions import resolve_start
        from mysqlcdc.errors import SchemaBootstrapError

        latest = self.options.start == "latest"
        tries = _LATEST_TRIES if latest else 1
        for attempt in range(1, tries + 1):
            start, gtid = self._through_outages(lambda p: resolve_start(
                p, self._finder(p), self.options.start))
            try:
                if latest:
                    # "now": the schema history starts here at once, before a DDL made in
                    # the next instant can come between the position and the definitions
                    self._through_outages(lambda p: p._ensure_history(start))
                return self._through_outages(
                    lambda p: self._snapshot.initial(start, _offset(start, gtid)))
            except SchemaBootstrapError:
                # a DDL of a captured table ran between reading the server's position and
                # its definitions: "latest" is the server's position after it, as well
                if attempt == tries:
                    raise
                log.info("a DDL ran as the pipeline started at %s; starting at the server's "
                         "position again", start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_events_per_batch
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._through_outages(lambda p: p.current())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from mysqlcdc.capture import batchend

        control = self._control
        if control is not None:
            if control.paused():
                return start                   # paused: no new micro-batch
            seek = control.pending_seek()
            if seek is not None:
                if start.get("seek") != seek.id:
                    return self._seek_batch(start, seek)
                control.retire_seek(seek)      # planned from the position: done
        # The initial snapshot's chunks (the binlog waits at its start), if any.
        held = self._through_outages(lambda p: self._snapshot.held(start))
        if held is not None:
            return held
        if not self._tables_checked:
            self._through_outages(lambda p: self._queue_widened(p, start))
            self._tables_checked = True
        if self._ledger is not None:           # decoded ahead (spark.ahead): adopted
            end = self._ledger.adopt(start, self._target)
            if end is not None:
                here = self._through_outages(lambda p: self._stands_for(p, start))
                return self._through_outages(
                    lambda p: self._snapshot.after_stream(start, end, here))
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        try:
            here = self._through_outages(lambda p: self._stands_for(p, start))
            begin = _position(here)
            self._note_next_file(begin)
            if self.options.snapshot_mode == "when_needed":
                self._through_outages(lambda p: p.check_not_purged(begin))
            if self.planner.task_ends:
                # the read tasks find where the batch ends (capture.batchend): the end offset
                # is a rule, carrying the GTID set and commit time of its start
                end = self._through_outages(
                    lambda p: p.plan_end(start, max_events, self._target))
                moved = start if end is start or end == start else self._through_outages(
                    lambda p: self._pending_end(p, end, here, begin))
            else:
                end = self._through_outages(
                    lambda p: p.next_end(begin, max_events, self._target))
                moved = start if end == begin else self._through_outages(
                    lambda p: self._end_offset(p, here, begin, end))
        except BinlogPurgedError as exc:      # snapshotMode when_needed: a new snapshot
            return self._through_outages(lambda p, purged=exc: self._snapshot.purged(start, purged))
        # backfills asked for by signals, read beside the stream
        out = self._through_outages(lambda p: self._snapshot.after_stream(start, moved, here))
        if moved is start and out != start and batchend.pending(start):
            # backfill chunks only: the binlog stays where the last batch's tasks ended
            out = {**{k: v for k, v in here.items() if k != "snapshot"},
                   "snapshot": out["snapshot"]}
        return out

    def _queue_widened(self, p: RangePlanner, start: dict) -> None:
        """Tables the pipeline captures now that its last run's filter left out (the user
        widened ``source.tables``): their rows so far were never read, so they are read
        as one backfill, queued where this run starts (``RangePlanner.widened_tables``)."""
        from mysqlcdc.capture.signals import request_snapshot, signal_folder

        names = p.widened_tables()
        if names:
            at = _position(self._stands_for(p, start))
            log.warning("source.tables now captures %s, which the last run did not: their "
                        "rows are read as a backfill", ", ".join(names))
            # keyed just before the start: a signal of a batch already committed
            request_snapshot(signal_folder(self.options.schema_history),
                             (at.file_number, at.pos - 1), f"tables@{at}", names)
        p.record_tables()

    def _stands_for(self, p: RangePlanner, offset: dict) -> dict:
        """The plain offset ``offset`` stands for: a pending end resolved to where its read
        tasks ended, its GTID set grown by the transactions they read."""
        from mysqlcdc.capture import batchend

        if not batchend.pending(offset):
            return offset
        return batchend.offset_after(offset, p.found_of(offset))

    def _pending_end(self, p: RangePlanner, end: dict, here: dict,
                     begin: BinlogPosition) -> dict:
        """``end`` (a rule from ``begin``) with the GTID set, commit time and epoch there."""
        gtid = here.get("gtid")
        if gtid is None:                       # a checkpoint from before offsets had GTIDs
            gtid = str(self._finder(p).gtid_at(begin))
        out = {k: v for k, v in end.items() if k not in ("gtid", "ts", "epoch")}
        state = _offset(begin, gtid, here.get("ts"), int(here.get("epoch", 0)))
        out.update((k, v) for k, v in state.items() if k not in ("file", "pos"))
        return out

    def _end_offset(self, p: RangePlanner, start: dict, begin: BinlogPosition,
                    end: BinlogPosition) -> dict:
        """The end offset of ``[begin, end)``: the start's GTID set with the range's
        transactions added (the scan that found ``end`` collected them)."""
        from mysqlcdc.gtidset import GtidSet

        scan = p._last_scan
        if scan is None or (scan.start, scan.end) != (begin, end):
            scan = p.scan(begin, end, None)
        gtid = start.get("gtid")
        if gtid is None:                       # a checkpoint from before offsets had GTIDs
            gtid = str(self._finder(p).gtid_at(begin))
        gtid = str(GtidSet.parse(gtid).add_all(scan.gtids))
        return _offset(end, gtid, scan.last_ts or start.get("ts"), int(start.get("epoch", 0)))

    def _note_next_file(self, begin: BinlogPosition) -> None:
        """Record (in source.json) when the binlog file after ``begin``'s was created: the
        server purges ``begin``'s file its expiry after that, which is what the binlog
        runway metric counts down. At most every 30 s; never fails the query."""
        now = time.monotonic()
        if self.options.schema_history is None or now - self._runway_at < 30:
            return
        self._runway_at = now

        from mysqlcdc.capture.server import list_binlogs

        def note(p: RangePlanner) -> None:
            names = [name for name, _ in list_binlogs(p._sql())]
            if begin.file in names and names[-1] != begin.file:
                after = names[names.index(begin.file) + 1]
                if after not in p._load_record().get("files", {}):
                    p._check_file(after, self._finder(p).head(after).born)
        try:
            note(self.planner)
        except SourceChangedError:
            raise
        except Exception as exc:   # noqa: BLE001 - a metric's input; the next try may work
            log.debug("binlog runway: %s", exc)

    def _seek_batch(self, start: dict, seek: SeekRequest) -> dict:
        """A micro-batch that reads nothing and ends at the seek's position. A seek
        forward on the same server walks the skipped range's DDL into the history first."""
        if seek.history == "keep" and int(start.get("epoch", 0)) == seek.epoch:
            # the same server and history: where the last batch really ended (a pending end
            # is resolved, and its record merged, only here, never across a failover)
            begin = self._through_outages(lambda p: _position(self._stands_for(p, start)))
            if begin < seek.position:
                self._through_outages(lambda p: p.walk_ddl(begin, seek.position))
        return seek.offset()

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end.get("seek") is not None and end.get("seek") != start.get("seek"):
            return []                          # the seek batch: nothing to read
        epoch, counts = int(end.get("epoch", 0)), self._counts
        chunks = [ChunkPartition(c, epoch, counts) for c in self._through_outages(
            lambda p: self._snapshot.tasks(end))]
        if not self._snapshot.streams(end):
            return _mark_shared(chunks)         # a new snapshot: the range was purged
        try:
            tasks = self._through_outages(lambda p: p.plan_tasks(start, end))
        except BinlogPurgedError:
            if self.options.snapshot_mode != "when_needed":
                raise
            log.warning("the binlog of %s..%s was purged before this batch read it; the "
                        "next batch snapshots the tables again", start, end)
            return _mark_shared(chunks)
        return _mark_shared(chunks + [RangePartition(t, epoch, counts, self._spool(start, end, t))
                                      for t in self._tapped(tasks)])

    def _spool(self, start: dict, end: dict, task: RangeTask) -> str | None:
        if self._ledger is None:
            return None
        return self._ledger.spool_for(start, {k: v for k, v in end.items() if k != "snapshot"},
                                      task)

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
        return _written(self.writer, _transformed(self.chain, _read(partition)), partition)

    def commit(self, end: dict) -> None:
        # progress lives in Spark's checkpoint; nothing to release server-side
        if self._ledger is not None:
            self._ledger.retire({k: v for k, v in end.items() if k != "snapshot"})

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
        _quiet_once_spark_left()


_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _quiet_once_spark_left() -> None:
    """Keep PySpark's streaming source runner from printing a traceback once Spark is gone.

    Spark ends a query by closing the socket of the process that runs this reader. The
    runner's read then fails (``EOFError``, or a reset connection), it calls :meth:`stop`
    in a ``finally`` with that error in flight, and answers it over the closed socket:
    when the socket was already reset, that answer raises ``BrokenPipeError`` and Python
    prints it on the stderr the process shares with the pipeline's, after a run that went
    well. Nothing after this point is anything to report, so the process's stderr goes to
    /dev/null then. Only in that runner, and only for a lost connection: an error of the
    reader's own is still reported."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) != _RUNNER:
        return
    if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
    except OSError:
        pass


class MysqlcdcBatchReader(DataSourceReader):
    """A bounded range ``[startingPosition, endingPosition)`` as a batch DataFrame."""

    def __init__(self, options: SourceOptions, chain=None, writer=None) -> None:
        self.options = options
        self.chain = chain
        self.writer = writer

    def partitions(self) -> Sequence[InputPartition]:
        from mysqlcdc.capture.planner import RangePlanner
        from mysqlcdc.capture.positions import PositionFinder, resolve_start

        planner = RangePlanner(self.options)
        try:
            finder = PositionFinder(self.options.settings, self.options.server_id,
                                    planner._sql, self.options.retry)
            start = resolve_start(planner, finder, self.options.start, gtid=False)[0]
            end = planner.resolve(self.options.end)
            if end <= start:
                return []
            tasks = retry.call(lambda: planner.tasks(start, end), self.options.retry,
                               self.options.settings.address, on_retry=planner.drop_connection)
            return _mark_shared([RangePartition(t) for t in tasks])
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _written(self.writer, _transformed(self.chain, _read(partition)), partition)


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A partition's envelope batches with the seq epoch applied and rows counted (what
    was read: before any transform)."""
    from mysqlcdc.capture.task import read_range
    from mysqlcdc.spark.batches import finish_batches

    chunk = getattr(partition, "chunk", None)
    if chunk is not None:
        return finish_batches(_read_chunk(chunk), partition.epoch, partition.counts)
    task = getattr(partition, "task", None)
    # Spark hands an empty range a single placeholder partition of its own.
    if task is None:
        return iter(())
    if getattr(partition, "spool", None):
        from mysqlcdc.spark.ahead import read_spool

        batches = read_spool(partition.spool, lambda: read_range(task))
    else:
        batches = read_range(task)
    return finish_batches(batches, getattr(partition, "epoch", 0),
                          getattr(partition, "counts", None))


def _transformed(chain, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The read task's batches through the transforms it was given (none: as read)."""
    if chain is None:
        return batches
    from mysqlcdc.spark.transforms import run_in_task

    return run_in_task(chain, 0, batches)


def _written(writer, batches: Iterator[pa.RecordBatch],
             partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The task's batches, or what the sink's task writer yields after writing them. A
    writer that keeps each key's order (``keeps_key_order``) is told whether the task
    shares keys with another of its batch."""
    if writer is None:
        return batches
    if getattr(writer, "keeps_key_order", False):
        return writer.write(batches, shares_keys=getattr(partition, "shares_keys", False))
    return writer.write(batches)
