"""Binlog positions from GTID sets and timestamps, and GTID sets at positions.

Everything here reads the server's binlog over the replication protocol with the
header skim (``capture.skim``: no row is decoded) and walks it a *unit* at a time:
a transaction, a DDL, or one of the events between them (FORMAT_DESCRIPTION,
ROTATE, GTID_LIST...). Offsets are transaction boundaries (DESIGN.md decision 2),
so every position returned here is one.

* :meth:`PositionFinder.gtid_at` — the GTID set of everything before a position:
  MariaDB answers ``BINLOG_GTID_POS(file, pos)`` itself; otherwise the file's
  GTID_LIST / PREVIOUS_GTIDS event plus the GTIDs of the file up to the position.
* :meth:`PositionFinder.resolve_gtid` — where a GTID set ends on *this* server: the
  start of the first transaction not in the set. The file to walk is found by a
  binary search over the files' GTID_LIST / PREVIOUS_GTIDS events (they only grow).
  A transaction of the set found after that point (domains or sources that
  interleave differently on this server) makes the position ambiguous: a named
  error, never a silent skip or repeat.
* :meth:`PositionFinder.resolve_timestamp` — the first transaction committed at or
  after a time (its envelope ``ts_ms``), by a binary search over the files' birth
  times (their FORMAT_DESCRIPTION's timestamp), then a walk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.events import MariadbGtidListEvent, PreviousGtidsEvent
from mysqlcdc.capture.server import current_position, list_binlogs
from mysqlcdc.capture.skim import Skimmer
from mysqlcdc.errors import BinlogPurgedError, GtidPositionError, ProtocolError
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.protocol.connection import ConnectionSettings, query
from mysqlcdc.protocol.retry import RetryPolicy
from mysqlcdc.protocol.stream import ReplicationStream
from mysqlcdc.types import BinlogPosition, StartTimestamp, parse_start

__all__ = ["PositionFinder", "Unit", "FileHead", "resolve_start"]

log = logging.getLogger(__name__)

_FDE, _QUERY = C.FORMAT_DESCRIPTION_EVENT, C.QUERY_EVENT


@dataclass(frozen=True)
class Unit:
    """One unit of the binlog between two boundaries."""

    start: BinlogPosition
    end: BinlogPosition
    gtid: str | None          # the transaction's GTID (None: none, or not a transaction)
    ts_ms: int                # as the envelope's ts_ms: commit time, else first event's
    transaction: bool         # a transaction or a DDL (not FORMAT_DESCRIPTION, ROTATE...)


@dataclass(frozen=True)
class FileHead:
    """What the first events of a binlog file say."""

    file: str
    born: int                 # FORMAT_DESCRIPTION timestamp, seconds: when it was created
    previous: GtidSet         # GTID_LIST / PREVIOUS_GTIDS: everything logged before it


class PositionFinder:
    """Position arithmetic against one server; see the module docstring.

    ``sql()`` returns a live SQL connection; streams register as ``server_id``."""

    def __init__(self, settings: ConnectionSettings, server_id: int, sql: Callable[[], object],
                 retry: RetryPolicy | None = None) -> None:
        self.settings, self.server_id, self.sql = settings, server_id, sql
        self.retry = retry or RetryPolicy(max_wait=30.0)
        self._heads: dict[str, FileHead] = {}

    # -- walking ---------------------------------------------------------------
    def walk(self, start: BinlogPosition, stop: BinlogPosition | None = None,
             on_previous: Callable[[GtidSet], None] | None = None) -> Iterator[Unit]:
        """Every unit from ``start`` (a boundary) up to ``stop`` (or the server's
        position when the walk began)."""
        stop = stop or current_position(self.sql())
        if stop <= start:
            return
        skimmer = Skimmer(start.file, self._observer(on_previous), table_maps=False)
        parse, feed, tracker = skimmer.parser.parse, skimmer.feed, skimmer.tracker
        stream = ReplicationStream(self.settings, server_id=self.server_id, start=start,
                                   reconnect=self.retry, stop_at=stop)
        here, first_ts, query_seen, ends = start, None, False, tracker.ends
        try:
            for raw in stream:
                if raw.artificial:
                    parse(raw.data, raw.pos)
                    continue
                if BinlogPosition.of(raw.file, raw.pos) >= stop:
                    break
                if first_ts is None:
                    first_ts = int.from_bytes(raw.data[:4], "little")
                query_seen = query_seen or raw.data[4] == _QUERY
                after = feed(raw.file, raw.pos, raw.data)
                if after is None:
                    continue
                end = BinlogPosition.of(*after)
                ctx = tracker.last if tracker.ends != ends else None
                ends = tracker.ends
                gtid = ctx.gtid if ctx is not None else None
                ts = ctx.ts_ms if ctx is not None and ctx.ts_ms else (first_ts or 0) * 1000
                yield Unit(here, end, gtid, ts, ctx is not None and (gtid is not None
                                                                   or query_seen or ctx.ts_ms > 0))
                here, first_ts, query_seen = end, None, False
                if end >= stop:
                    break
        finally:
            stream.close()

    @staticmethod
    def _observer(on_previous):
        if on_previous is None:
            return None

        def observe(file, pos, events) -> None:
            for ev in events:
                if isinstance(ev, MariadbGtidListEvent):
                    on_previous(GtidSet.parse(",".join(ev.gtids)))
                elif isinstance(ev, PreviousGtidsEvent):
                    on_previous(GtidSet.parse(ev.gtid_set))
        return observe

    def head(self, file: str) -> FileHead:
        """The birth time and GTID_LIST / PREVIOUS_GTIDS of ``file`` (read once)."""
        found = self._heads.get(file)
        if found is not None:
            return found
        previous = [GtidSet()]
        born = None
        stream = ReplicationStream(self.settings, server_id=self.server_id,
                                   start=BinlogPosition.of(file, 4), reconnect=self.retry)
        skimmer = Skimmer(file, self._observer(lambda s: previous.append(s)), table_maps=False)
        try:
            for n, raw in enumerate(stream):
                if raw.artificial:
                    skimmer.parser.parse(raw.data, raw.pos)
                    continue
                if raw.file != file:
                    break
                if raw.data[4] == _FDE:
                    born = int.from_bytes(raw.data[:4], "little")
                skimmer.feed(raw.file, raw.pos, raw.data)
                if len(previous) > 1 or n > 8 or raw.data[4] in (C.MARIA_GTID_EVENT,
                                                                  C.GTID_LOG_EVENT):
                    break
        finally:
            stream.close()
        if born is None:
            raise ProtocolError(f"binlog file {file} has no FORMAT_DESCRIPTION event")
        self._heads[file] = head = FileHead(file, born, previous[-1])
        return head

    # -- answers -----------------------------------------------------------------
    def gtid_at(self, position: BinlogPosition) -> GtidSet:
        """The GTID set of every transaction before ``position`` (a boundary)."""
        try:
            conn = self.sql()
            rows = query(conn, f"SELECT BINLOG_GTID_POS({conn.escape(position.file)}, "
                               f"{int(position.pos)})")
            if rows and rows[0][0] is not None:
                return GtidSet.parse(str(rows[0][0]))
        except ProtocolError:
            pass                              # MySQL: no such function; walk instead
        return self.gtid_by_walk(position)

    def gtid_by_walk(self, position: BinlogPosition) -> GtidSet:
        """``gtid_at`` from the binlog itself: the file's GTID_LIST / PREVIOUS_GTIDS plus
        every GTID of the file before ``position``."""
        if position.pos <= 4:
            return self.head(position.file).previous
        state = [GtidSet()]
        start = BinlogPosition.of(position.file, 4)
        for unit in self.walk(start, position, on_previous=lambda s: state.append(s)):
            if unit.gtid:
                state.append(state[-1].add(unit.gtid))
        return state[-1]

    def resolve_gtid(self, target: GtidSet) -> tuple[BinlogPosition, int | None]:
        """Where ``target`` ends on this server, and the commit time (ms) of the last
        transaction of ``target`` walked over (None when none was)."""
        logs = list_binlogs(self.sql())
        if not logs:
            raise BinlogPurgedError("the server lists no binlog files")
        lo = self._last_file(logs, lambda h: h.previous.issubset(target), target)
        now = current_position(self.sql())
        start, last_ts, pending = None, None, set(target.domains())
        for unit in self.walk(BinlogPosition.of(logs[lo][0], 4), now):
            if not unit.gtid:
                continue
            inside = target.contains(unit.gtid)
            if start is None:
                if inside:
                    last_ts = unit.ts_ms
                    continue
                start = unit.start
            if inside:
                raise GtidPositionError(
                    f"GTID set {target} has no single position on {self.settings.address}: "
                    f"transaction {unit.gtid} of the set comes after {start}, where the first "
                    f"transaction outside it begins")
            if target.flavor == "mariadb":
                pending.discard(int(unit.gtid.split("-", 1)[0]))
                if not pending:
                    break
        return (start or now), last_ts

    def resolve_timestamp(self, ts_ms: int) -> BinlogPosition:
        """The start of the first transaction with ``ts_ms`` at or after ``ts_ms``; the
        server's position when every transaction is older."""
        logs = list_binlogs(self.sql())
        if not logs:
            raise BinlogPurgedError("the server lists no binlog files")
        # strictly older: a transaction of an earlier file began before this one was born
        lo = self._last_file(logs, lambda h: h.born * 1000 < ts_ms, None)
        now = current_position(self.sql())
        for unit in self.walk(BinlogPosition.of(logs[lo][0], 4), now):
            if unit.transaction and unit.ts_ms >= ts_ms:
                return unit.start
        return now

    def _last_file(self, logs, fits: Callable[[FileHead], bool], target: GtidSet | None) -> int:
        """The index of the last file whose head ``fits`` (heads fit as a prefix)."""
        if not fits(self.head(logs[0][0])):
            if target is None:
                return 0                     # everything on the server is newer: walk all
            raise BinlogPurgedError(
                f"the oldest binlog on {self.settings.address}, {logs[0][0]}, begins after "
                f"transactions that are not in the GTID set {target} "
                f"(its GTID_LIST / PREVIOUS_GTIDS is {self.head(logs[0][0]).previous}): they "
                f"were purged, or the set belongs to another replication topology")
        lo, hi = 0, len(logs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(self.head(logs[mid][0])):
                lo = mid
            else:
                hi = mid - 1
        return lo


def resolve_start(planner, finder: PositionFinder, spec: str, *,
                  gtid: bool = True) -> tuple[BinlogPosition, str | None]:
    """Where ``spec`` (``earliest``, ``latest``, ``FILE:POS``, a GTID set, a timestamp)
    is on the server, and (``gtid``) the GTID set of everything before it."""
    value = parse_start(spec)
    if isinstance(value, GtidSet):
        position, _ = finder.resolve_gtid(value)
        return position, str(value)
    if isinstance(value, StartTimestamp):
        position = finder.resolve_timestamp(value.ms)
    else:
        position = planner.resolve(spec)
    return position, (str(finder.gtid_at(position)) if gtid else None)
