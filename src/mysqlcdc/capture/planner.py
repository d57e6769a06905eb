"""Driver-side planning: where a range starts and ends, and how to split it.

The planner keeps one SQL connection for server facts and, when a batch must
be limited or split, runs a framing-only scan (rows are not decoded) over a
replication connection to find transaction boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.server import current_position, earliest_position
from mysqlcdc.capture.task import RangeTask
from mysqlcdc.capture.transactions import TxnTracker
from mysqlcdc.protocol.connection import connect_sql
from mysqlcdc.protocol.stream import ReplicationStream, RetryPolicy
from mysqlcdc.schema.introspect import load_tables
from mysqlcdc.types import BinlogPosition

__all__ = ["RangePlanner", "Scan"]


@dataclass
class Scan:
    """Boundaries found in ``[start, end)`` with the event count before each."""

    start: BinlogPosition
    end: BinlogPosition
    boundaries: list[tuple[BinlogPosition, int]]


class RangePlanner:
    def __init__(self, options) -> None:   # options: spark.options.SourceOptions
        self.options = options
        self._conn = None
        self._definitions = None
        self._last_scan: Scan | None = None

    # -- server facts -------------------------------------------------------
    def _sql(self):
        """The planner's SQL connection, reopened if the server dropped it."""
        if self._conn is not None:
            try:
                self._conn.ping(reconnect=False)
                return self._conn
            except (pymysql.err.Error, OSError):
                self._conn = None
        self._conn = connect_sql(self.options.settings)   # named errors on failure
        return self._conn

    def resolve(self, spec: str) -> BinlogPosition:
        if spec == "earliest":
            return earliest_position(self._sql())
        if spec == "latest":
            return current_position(self._sql())
        return BinlogPosition.parse(spec)

    def definitions(self):
        if self._definitions is None:
            self._definitions = load_tables(self._sql(), self.options.tables)
        return self._definitions

    # -- planning -----------------------------------------------------------
    def next_end(self, start: BinlogPosition, max_events: int | None) -> BinlogPosition:
        """The end of the next micro-batch: the server's position, or the first
        transaction boundary after ``max_events`` events."""
        target = current_position(self._sql())
        if target <= start:
            return start
        if max_events is None and self.options.parallelism == 1:
            return target
        scan = self.scan(start, target, max_events)
        return scan.end

    def tasks(self, start: BinlogPosition, end: BinlogPosition) -> list[RangeTask]:
        if end <= start:
            return []
        ranges = [(start, end)]
        if self.options.parallelism > 1:
            scan = self._last_scan
            if scan is None or (scan.start, scan.end) != (start, end):
                scan = self.scan(start, end, None)
            ranges = split(scan, self.options.parallelism)
        return [self._task(i, a, b) for i, (a, b) in enumerate(ranges)]

    def _task(self, index: int, start: BinlogPosition, end: BinlogPosition) -> RangeTask:
        o = self.options
        return RangeTask(
            settings=o.settings, server_id=o.server_id + 1 + index, start=start, end=end,
            tables=o.tables, definitions=self.definitions(), batch_rows=o.batch_rows,
            retry=RetryPolicy(attempts=o.reconnect_attempts, max_delay=o.reconnect_max_delay),
        )

    def scan(self, start: BinlogPosition, stop: BinlogPosition, max_events: int | None) -> Scan:
        """Walk event headers from ``start``; stop at ``stop`` or after ``max_events``."""
        parser = BinlogParser(include=lambda db, table: False, file=start.file)
        tracker = TxnTracker()
        boundaries: list[tuple[BinlogPosition, int]] = []
        count, end = 0, start
        stream = ReplicationStream(self.options.settings, server_id=self.options.server_id,
                                   start=start)
        try:
            for raw in stream:
                events = parser.parse(raw.data, raw.pos)
                if raw.artificial:
                    continue
                count += 1
                boundary = False
                for ev in events:
                    boundary = tracker.observe(ev, raw.file, raw.pos)
                if boundary:
                    file, pos = TxnTracker.next_position(events[-1], raw.file, raw.pos + len(raw.data))
                    end = BinlogPosition.of(file, pos)
                    boundaries.append((end, count))
                    if end >= stop or (max_events and count >= max_events):
                        break
        finally:
            stream.close()
        self._last_scan = Scan(start, end, boundaries)
        return self._last_scan

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None


def split(scan: Scan, parts: int) -> list[tuple[BinlogPosition, BinlogPosition]]:
    """Cut ``scan`` at boundaries into at most ``parts`` ranges of similar event counts."""
    total = scan.boundaries[-1][1] if scan.boundaries else 0
    if parts <= 1 or total == 0:
        return [(scan.start, scan.end)]
    cuts, want = [], total / parts
    for position, count in scan.boundaries:
        if count >= want * (len(cuts) + 1) and position < scan.end:
            cuts.append(position)
    edges = [scan.start, *cuts, scan.end]
    return [(a, b) for a, b in zip(edges, edges[1:]) if a < b]
