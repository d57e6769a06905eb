"""Driver-side planning: where a range starts and ends, and how to split it.

The planner keeps one SQL connection for server facts and walks each batch's
range once, over a replication connection, with a header skim (``capture.skim``:
rows are never decoded) to find transaction boundaries and show the schema
keeper its DDL and TABLE_MAPs.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.history import SchemaKeeper
from mysqlcdc.capture.server import current_position, earliest_position
from mysqlcdc.capture.skim import Skimmer
from mysqlcdc.capture.task import RangeTask
from mysqlcdc.protocol.connection import connect_sql
from mysqlcdc.protocol.stream import ReplicationStream, RetryPolicy
from mysqlcdc.schema.history import Quarantine, SchemaHistory, SchemaView
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
        self._last_scan: Scan | None = None
        self.history = SchemaHistory(options.schema_history)
        self.keeper = SchemaKeeper(self.history, options.tables, self._sql,
                                   bootstrap=options.schema_bootstrap)
        self._processed: tuple[BinlogPosition, BinlogPosition] | None = None

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

    def _ensure_history(self, start: BinlogPosition) -> None:
        """Bootstrap (or load) the schema history before planning from ``start``."""
        if self.keeper.catalog is None:
            current = current_position(self._sql())
            self.keeper.ensure(start, current, lambda a, b, observe: self.scan(a, b, None, observe))

    def _process(self, start: BinlogPosition, end: BinlogPosition) -> None:
        """Bring the history up to ``end``: every DDL and TABLE_MAP of the range seen."""
        if self._processed == (start, end) or end <= start:
            return
        self.scan(start, end, None)

    # -- planning -----------------------------------------------------------
    def current(self) -> BinlogPosition:
        """The server's binlog position now."""
        return current_position(self._sql())

    def next_end(self, start: BinlogPosition, max_events: int | None,
                 target: BinlogPosition | None = None) -> BinlogPosition:
        """The end of the next micro-batch: the server's position (never past
        ``target``), or the first transaction boundary after ``max_events`` events."""
        self._ensure_history(start)
        now = current_position(self._sql())
        target = now if target is None or now < target else target
        if target <= start:
            return start
        scan = self.scan(start, target, max_events)
        return scan.end

    def tasks(self, start: BinlogPosition, end: BinlogPosition) -> list[RangeTask]:
        if end <= start:
            return []
        self._ensure_history(start)
        self.history.reload()              # a `mysqlcdc schema resolve` may have written
        self.keeper.changed()
        for r in list(self.history.unplanned()):
            self.history.mark_planned(r, start)
            self.keeper.resolved(r.db, r.table, r.definition if r.action == "reload" else None)
        self._process(start, end)
        ranges = [(start, end)]
        if self.options.parallelism > 1:
            scan = self._last_scan
            if scan is None or (scan.start, scan.end) != (start, end):
                scan = self.scan(start, end, None)
            ranges = split(scan, self.options.parallelism)
        view = self.history.view(self.options.tables, batch_start=start)
        tasks = [self._task(i, a, b, view) for i, (a, b) in enumerate(ranges)]
        for q, _ in self.history.catchups(start):
            tasks.append(self._catchup(len(tasks), q, start))
        return tasks

    def _task(self, index: int, start: BinlogPosition, end: BinlogPosition,
              view: SchemaView, tables: TableFilter | None = None) -> RangeTask:
        o = self.options
        return RangeTask(
            settings=o.settings, server_id=o.server_id + 1 + index, start=start, end=end,
            tables=tables or o.tables, schema=view, batch_rows=o.batch_rows,
            include_query=o.include_query,
            retry=RetryPolicy(attempts=o.reconnect_attempts, max_delay=o.reconnect_max_delay),
        )

    def _catchup(self, index: int, q: Quarantine, start: BinlogPosition) -> RangeTask:
        """Re-read a resolved table's held-back rows: ``[q.since, start)``, that table only."""
        only = TableFilter.exact(q.db, q.table)
        view = self.history.view(only, batch_start=start, catchup=q)
        return self._task(index, q.since, start, view, only)

    def scan(self, start: BinlogPosition, stop: BinlogPosition, max_events: int | None,
             observe=None) -> Scan:
        """Skim events from ``start`` (``capture.skim``: no row is decoded); stop at
        ``stop`` or at the first boundary after ``max_events`` events.

        Every QUERY and every TABLE_MAP not checked before is shown to the schema
        keeper (or ``observe``, which then sees QUERY events only) in order. A scan
        for the keeper records its range, so ``tasks`` does not walk it a second time
        (a bound method is a new object on every access: compare by flag, not ``is``)."""
        for_keeper = observe is None
        if for_keeper:
            skimmer = Skimmer(start.file, self.keeper.observer(start),
                              generation=self.keeper.generation)
        else:
            skimmer = Skimmer(start.file, observe, table_maps=False)
        parse, feed = skimmer.parser.parse, skimmer.feed
        boundaries: list[tuple[BinlogPosition, int]] = []
        count, end = 0, start
        stop_file, stop_pos = stop.file, stop.pos
        stream = ReplicationStream(self.options.settings, server_id=self.options.server_id,
                                   start=start)
        try:
            for raw in stream:
                if raw.artificial:
                    parse(raw.data, raw.pos)
                    continue
                if raw.file == stop_file and raw.pos >= stop_pos:
                    break
                count += 1
                after = feed(raw.file, raw.pos, raw.data)
                if after is not None:
                    end = BinlogPosition.of(*after)
                    boundaries.append((end, count))
                    if end >= stop or (max_events and count >= max_events):
                        break
        finally:
            stream.close()
        self._last_scan = Scan(start, end, boundaries)
        if for_keeper:
            self._processed = (start, end)
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
