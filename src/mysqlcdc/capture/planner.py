"""Driver-side planning: where a range starts and ends, and how to split it.

The planner keeps one SQL connection for server facts and walks each batch's
range once, over a replication connection, with a header skim (``capture.skim``:
rows are never decoded) to find transaction boundaries and show the schema
keeper its DDL and TABLE_MAPs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pymysql

from mysqlcdc.capture import batchend
from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.history import SchemaKeeper
from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.capture.server import (
    SourceIdentity,
    check_position,
    current_position,
    earliest_position,
    list_binlogs,
    source_identity,
)
from mysqlcdc.capture.skim import Skimmer
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.protocol.connection import connect_sql, ping_within, query
from mysqlcdc.errors import BinlogPurgedError, MysqlcdcError, SourceChangedError
from mysqlcdc.protocol import retry
from mysqlcdc.protocol.stream import ReplicationStream
from mysqlcdc.schema.history import Quarantine, SchemaHistory, SchemaView
from mysqlcdc.types import BinlogPosition, binlog_file_number

__all__ = ["RangePlanner", "Scan"]

log = logging.getLogger(__name__)

_QUERIES = frozenset({C.QUERY_EVENT, C.MARIA_QUERY_COMPRESSED_EVENT})
# what the bootstrap's DDL walk decodes: statements, and what keeps the parser's state
_DDL_SCAN_PARSE = _QUERIES | {C.FORMAT_DESCRIPTION_EVENT, C.ROTATE_EVENT, C.START_EVENT_V3}
_PAYLOAD = C.TRANSACTION_PAYLOAD_EVENT
_DDL_SCAN_WANTED = _DDL_SCAN_PARSE | {_PAYLOAD}
_PROGRESS_AFTER_S = 5.0
_PROGRESS_EVERY_S = 5.0
_FILES_KEPT = 50                  # binlog files whose birth time source.json remembers
# the planner's statements (SHOW BINARY LOGS, SHOW BINLOG EVENTS ... LIMIT, a few reads of
# information_schema) take well under a second to a few seconds; one unanswered this long
# means a hung server (the connection is dropped and the batch retried)
STATEMENT_LIMIT_S = 120.0
_FDE = C.FORMAT_DESCRIPTION_EVENT
# after a read task stopped at a DDL, the driver applies it by walking this many events
# from there (a run of DDL, as a migration writes, then costs one batch, not one each)
_LOOKAHEAD_EVENTS = 2000
_SAMPLE_EVENTS = 20000           # events sampled for bytes per event before any batch
# in the schema-history folder: the range the bootstrap's DDL walk read, and its DDL
WALKED = "walked.json"
_CUT_LOOKAHEAD = 256             # events looked at past an exact cut's event number
# SHOW BINLOG EVENTS' name of the events that begin a transaction group (batchend)
_GTID_EVENT_NAMES = frozenset({"Gtid", "Anonymous_Gtid", "Gtid_tagged"})


@dataclass
class Scan:
    """Boundaries found in ``[start, end)`` with the event count before each."""

    start: BinlogPosition
    end: BinlogPosition
    boundaries: list[tuple[BinlogPosition, int]]
    gtids: list[str] = field(default_factory=list)   # of the transactions up to ``end``
    last_ts: int | None = None                      # ts_ms of the last one


class RangePlanner:
    def __init__(self, options) -> None:   # options: spark.options.SourceOptions
        self.options = options
        self._conn = None
        self._last_scan: Scan | None = None
        self.history = SchemaHistory(options.schema_history)
        self.keeper = SchemaKeeper(self.history, options.tables, self._sql,
                                   bootstrap=options.schema_bootstrap)
        self._processed: tuple[BinlogPosition, BinlogPosition] | None = None
        self._record: dict | None = None                # source.json: identity, files
        self._seen_file: tuple[str, int] | None = None
        self._verify_position = True                    # after every (re)connect
        folder = options.schema_history
        self._identity_file = None if folder is None else Path(folder) / "source.json"
        self._status_file = None if folder is None else Path(folder) / "source-status.json"
        if self._status_file is not None:
            retry.STATS.listen(self._write_status)
        # batches whose end the read tasks find (capture.batchend): needs a folder both
        # the driver and the executors write, the schema history's
        self.task_ends = folder is not None and getattr(options, "planning", "tasks") == "tasks"
        self._found: dict[str, batchend.Found] = {}           # pending offset -> its end
        self._known: dict[BinlogPosition, BinlogPosition] = {}  # batch start -> DDL known up to
        self._event_bytes = 200.0                                # bytes per event, as last read
        self._event_bytes_read = False                           # ... or a guess
        self._no_exact_cuts = False      # the server refused SHOW BINLOG EVENTS once
        self._walked: tuple | None = None                         # WALKED, once read
        self._pending_filter: dict | None = None     # the table filter to record (widened_tables)

    # -- server facts -------------------------------------------------------
    def _sql(self):
        """The planner's SQL connection, reopened if the server dropped it. Every new
        connection is checked to reach the same server as before. Its statements wait at
        most ``STATEMENT_LIMIT_S`` for an answer: a source that hangs after the ping would
        otherwise hold the driver in silence (a timeout is a lost connection: retried)."""
        if self._conn is not None:
            try:
                ping_within(self._conn, self.options.settings.connect_timeout)
                return self._conn
            except (pymysql.err.Error, OSError):
                self.drop_connection()
        settings = self.options.settings                # named errors on failure
        conn = connect_sql(settings, read_timeout=settings.read_timeout or STATEMENT_LIMIT_S)
        try:
            self._check_identity(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._verify_position = conn, True
        return conn

    def drop_connection(self) -> None:
        """Forget the SQL connection (after a failure: the next call reconnects)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:   # noqa: BLE001 - it is broken already
                pass

    def _load_record(self) -> dict:
        """What this pipeline knows of its server: identity and binlog files' birth times."""
        if self._record is None:
            self._record = {}
            if self._identity_file is not None and self._identity_file.is_file():
                try:
                    self._record = json.loads(self._identity_file.read_text())
                except ValueError:
                    self._record = {}    # unreadable: rewritten at the next check
        return self._record

    def _save_record(self) -> None:
        if self._identity_file is None:
            return
        try:
            # the first check comes before anything else made the folder (a new pipeline's
            # start): not recorded, a failover in its initial snapshot went unseen
            self._identity_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._identity_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._record))
            os.replace(tmp, self._identity_file)
        except OSError as exc:
            log.debug("cannot record the source's identity in %s: %s", self._identity_file, exc)

    def widened_tables(self) -> list[str]:
        """Tables on the server this pipeline captures now that the table filter of its
        last run did not (``source.tables`` widened between runs): their rows before now
        were never read. The filter is recorded in ``source.json`` each run; nothing is
        returned for a pipeline's first run (its snapshot, if any, reads every table) or a
        record without one."""
        record = self._load_record()
        tables = self.options.tables
        now = {"include": list(tables.include), "exclude": list(tables.exclude)}
        was = record.get("tables")
        if was == now:
            return []
        found: list[str] = []
        if isinstance(was, dict):
            old = TableFilter(tuple(was.get("include") or ()), tuple(was.get("exclude") or ()))
            rows = query(self._sql(), "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema."
                                      "TABLES WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')")
            found = sorted(f"{db}.{t}" for db, t in rows if tables.user(db, t) and not old.user(db, t))
        self._pending_filter = now
        return found

    def record_tables(self) -> None:
        """Record the table filter ``widened_tables`` compared (once its tables' backfill
        is queued)."""
        now = self._pending_filter
        if now is not None:
            self._load_record()["tables"] = now
            self._save_record()
            self._pending_filter = None

    def _check_identity(self, conn) -> None:
        """Stop with SOURCE_CHANGED if this connection reaches another server than the one
        this pipeline read from (this process's first, or the one its checkpoint recorded)."""
        now = source_identity(conn)
        record = self._load_record()
        if "identity" in record:
            try:
                why = SourceIdentity.from_json(record["identity"]).differs(now)
            except (KeyError, TypeError, ValueError):
                why = None
            if why is not None:
                raise SourceChangedError(
                    f"{self.options.settings.address} is not the server this pipeline "
                    f"captured from: {why}")
        record["identity"] = now.as_json()
        self._save_record()

    def _check_file(self, file: str, born: int) -> None:
        """A binlog file is known by its name and its FORMAT_DESCRIPTION's timestamp (when
        the server created it). The same name born at another time is another file: a
        reset binlog or another server's, even when ids and sizes happen to agree."""
        if self._seen_file == (file, born):
            return
        files = self._load_record().setdefault("files", {})
        known = files.get(file)
        if known is not None and known != born:
            raise SourceChangedError(
                f"{file} on {self.options.settings.address} was created at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(born))} UTC, but the file of "
                f"that name this pipeline read was created at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(known))} UTC: the binlog was "
                f"reset or another server answers on this address")
        if known is None:
            files[file] = born
            for old in sorted(files, key=binlog_file_number)[:-_FILES_KEPT]:
                del files[old]
            self._save_record()
        self._seen_file = (file, born)

    def check_not_purged(self, start: BinlogPosition) -> None:
        """BINLOG_PURGED when ``start``'s file is gone and older than the oldest one left:
        ``snapshot.mode when_needed`` snapshots again instead of letting the read tasks,
        which find batch ends themselves, fail on it. One SHOW BINARY LOGS."""
        logs = list_binlogs(self._sql())
        if logs and start.file not in dict(logs) \
                and start.file_number < BinlogPosition.of(logs[0][0], 4).file_number:
            raise BinlogPurgedError(f"binlog file {start.file} was purged; the oldest still on "
                                    f"{self.options.settings.address} is {logs[0][0]}")

    def _check_start(self, start: BinlogPosition, now: BinlogPosition) -> None:
        """The server's binlog must still hold ``start``: checked after each reconnect and
        whenever the server's end lies before it (never a silent wait at a dead position)."""
        if not self._verify_position and now >= start:
            return
        why = check_position(list_binlogs(self._sql()), start)
        if why is None and now < start:
            why = f"the server's binlog ends at {now}, before the pipeline's position {start}"
        if why is not None:
            raise SourceChangedError(
                f"the binlog of {self.options.settings.address} no longer holds this "
                f"pipeline's position: {why} (RESET MASTER, a restored backup or another "
                f"server on this address)")
        self._verify_position = False

    def _write_status(self, snapshot: dict) -> None:
        """The reconnect counters for progress reports in the driver's own process."""
        try:
            tmp = self._status_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(snapshot))
            os.replace(tmp, self._status_file)
        except OSError:
            pass

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
            self.keeper.ensure(start, current, self._walk_ddl_recorded)

    def _walk_ddl_recorded(self, start: BinlogPosition, stop: BinlogPosition, observe) -> None:
        """The bootstrap's DDL walk (``ddl_scan``), noting where its statements are: once
        it has read all of ``[start, stop)`` that is written to the history folder
        (``WALKED``), so that any process planning this pipeline knows the stretches of
        that range without DDL (``exact_cuts``)."""
        from mysqlcdc.binlog.events import QueryEvent
        from mysqlcdc.schema.ddl import classify

        ddl: list[str] = []

        def noted(file: str, pos: int, events: list) -> None:
            if any(isinstance(ev, QueryEvent) and classify(ev.query) != "ignore"
                   for ev in events):
                ddl.append(str(BinlogPosition.of(file, pos)))
            observe(file, pos, events)

        self.ddl_scan(start, stop, noted)
        folder = self.options.schema_history
        if folder:
            _write_json(Path(folder) / WALKED, {
                "start": str(start), "end": str(stop), "ddl": ddl,
                "identity": source_identity(self._sql()).as_json()})

    def _walked_bound(self, a: BinlogPosition) -> BinlogPosition | None:
        """How far from ``a`` the bootstrap's walk saw no DDL (None: it did not walk
        there, or left no record)."""
        folder = self.options.schema_history
        if self._walked is None:
            record = _read_json(Path(folder) / WALKED) if folder else None
            try:
                self._walked = (BinlogPosition.parse(record["start"]),
                                BinlogPosition.parse(record["end"]),
                                sorted(BinlogPosition.parse(d) for d in record["ddl"]))
                if SourceIdentity.from_json(record["identity"]).differs(
                        source_identity(self._sql())):
                    self._walked = ()          # another server's binlog (a failover)
            except (TypeError, KeyError, ValueError):
                self._walked = ()
        if not self._walked:
            return None
        first, last, ddl = self._walked
        if not first <= a < last:
            return None
        return next((d for d in ddl if d >= a), last)

    def bootstrap_history(self, spec: str) -> BinlogPosition:
        """Where the start ``spec`` is, with the schema history made ready there as the
        stream's first batch would make it (the DDL walk of a start far back); for a
        caller that does it ahead of the stream."""
        from mysqlcdc.capture.positions import PositionFinder, resolve_start

        finder = PositionFinder(self.options.settings, self.options.server_id, self._sql,
                                self.options.retry)
        start = resolve_start(self, finder, spec, gtid=False)[0]
        self._ensure_history(start)
        return start

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
        self._check_start(start, now)
        target = now if target is None or now < target else target
        if target <= start:
            return start
        scan = self.scan(start, target, max_events)
        return scan.end

    def tasks(self, start: BinlogPosition, end: BinlogPosition) -> list[RangeTask]:
        if end <= start:
            return []
        self._batch_history(start)
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

    def _batch_history(self, start: BinlogPosition) -> None:
        """The history as the batch from ``start`` sees it: reloaded (a ``mysqlcdc
        schema resolve`` may have written), its new resolutions in force from here."""
        self._ensure_history(start)
        self.history.reload()
        self.keeper.changed()
        for r in list(self.history.unplanned()):
            self.history.mark_planned(r, start)
            self.keeper.resolved(r.db, r.table, r.definition if r.action == "reload" else None)

    # -- batches whose end the read tasks find (capture.batchend) ------------------
    def position_of(self, offset: dict) -> BinlogPosition:
        """The binlog position an offset stands for. A pending end (``upto``) is
        resolved from what its read task recorded, merged into the schema history
        once; when the record is missing, the range is read here to find it."""
        if not batchend.pending(offset):
            return BinlogPosition.of(offset["file"], int(offset["pos"]))
        return self.found_of(offset).end

    def found_of(self, offset: dict) -> batchend.Found:
        """What the read tasks of the pending end ``offset`` found (see ``position_of``)."""
        key = batchend.spec_key(offset)
        found = self._found.get(key)
        if found is not None:
            return found
        start = BinlogPosition.of(offset["file"], int(offset["pos"]))
        self._ensure_history(start)
        found = batchend.read_batch(self.options.schema_history, offset)
        if found is None:
            found = self._read_here(start, offset)
        self._merge(found)
        self._found[key] = found
        while len(self._found) > 16:           # Spark asks about the last batch or two
            del self._found[next(iter(self._found))]
        return found

    def _xa_open_at(self, start: dict) -> dict[str, list]:
        """The XA transactions prepared and still open where the batch after the end
        offset ``start`` begins (``capture.xa``): what the batch before found."""
        if batchend.pending(start):
            return dict(self.found_of(start).xa)
        return dict(start.get("xa") or {})

    def plan_end(self, start: dict, max_events: int | None,
                 target: BinlogPosition | None = None) -> dict:
        """The end offset of the next micro-batch from ``start`` (``start`` itself when
        there is nothing new): a rule the read task resolves, or with ``task_ends``
        off, a boundary the driver found (``next_end``)."""
        if not self.task_ends:
            return _plain(self.next_end(self.position_of(start), max_events, target))
        a = self.position_of(start)
        self._ensure_history(a)
        now = current_position(self._sql())
        self._check_start(a, now)
        cap = now if target is None or now < target else target
        if cap <= a:
            return start
        known = self._known.get(a)
        trust = self.keeper.trust_until
        if trust is not None:
            until = self._trust_position(trust)
            known = until if known is None or until > known else known
        cuts, counts = self._cuts(a, cap, max_events), None
        if cuts:              # parallelism > 1: the slices start where the server counted
            exact = self._exact_cuts(a, cap, max_events, known, len(cuts) + 1)
            if exact:
                cuts, counts = [c for c, _ in exact], [n for _, n in exact]
        return batchend.end_offset(a, cap, max_events, known, cuts, counts)

    def _cuts(self, start: BinlogPosition, cap: BinlogPosition, max_events: int | None,
              parts: int | None = None) -> list[BinlogPosition]:
        """Where the slices of a batch begin, for ``parts`` (default: ``parallelism``)
        read tasks: its expected bytes (events x the bytes per event of the batches so
        far) cut evenly."""
        parts = self.options.parallelism if parts is None else parts
        if parts <= 1:
            return []
        logs = list_binlogs(self._sql())
        end = cap
        if max_events:
            end = _advance(logs, start, int(max_events * self._event_bytes))
            end = cap if end is None or end > cap else end
        return batchend.slice_cuts(start, end, parts, logs, self.options.min_slice_bytes)

    def cuts_of(self, end: dict, parts: int, min_event_bytes: float = 0.0
                ) -> list[BinlogPosition]:
        """Where ``parts`` slices of the pending batch ending at ``end`` would begin (the
        decode-ahead cuts a one-task batch to decode it on several cores); none while
        events average under ``min_event_bytes``. Before any batch was read, the bytes
        per event are first sampled from the batch's start."""
        a = BinlogPosition.of(end["file"], int(end["pos"]))
        upto = end["upto"]
        cap = BinlogPosition.of(upto["file"], int(upto["pos"]))
        if not self._event_bytes_read and upto.get("events"):
            sampled = self._sample_event_bytes(a, cap)
            if sampled is not None:
                self._event_bytes = sampled
        if self._event_bytes < min_event_bytes:
            return []
        return self._cuts(a, cap, upto.get("events"), parts)

    def exact_cuts(self, end: dict, parts: int) -> list[tuple[BinlogPosition, int]]:
        """Where ``parts`` slices of the pending batch ending at ``end`` begin, exactly:
        each a transaction's GTID event about ``events / parts`` events apart, with the
        number of the batch's events before it, found by the server (``SHOW BINLOG
        EVENTS ... LIMIT n, m``: it skips events in its own code, no byte of them crosses
        the wire), so that a slice starts there instead of passing over the events before
        it. Only cuts in the file the batch starts in, before its cap and its
        ``events``, where no DDL before them can end the batch: before the first DDL the
        bootstrap's walk saw from the batch's start (``WALKED``), or before ``known``.
        None (``[]``) where there are none, or the server does not answer."""
        upto = end["upto"]
        return self._exact_cuts(
            BinlogPosition.of(end["file"], int(end["pos"])),
            BinlogPosition.of(upto["file"], int(upto["pos"])), upto.get("events"),
            BinlogPosition.parse(upto["known"]) if upto.get("known") else None, parts)

    def _exact_cuts(self, a: BinlogPosition, cap: BinlogPosition, events: int | None,
                    known: BinlogPosition | None, parts: int
                    ) -> list[tuple[BinlogPosition, int]]:
        """``exact_cuts`` of the batch from ``a`` with the rule ``cap``, ``events``,
        ``known``."""
        if parts <= 1 or not events or self._no_exact_cuts or "'" in a.file:
            return []
        free = [b for b in (self._walked_bound(a), known) if b is not None]
        if not free:
            return []
        bound = min(cap, max(free))
        count = int(events)
        if self._event_bytes_read:          # the backlog's last batch holds fewer events
            left = _bytes_between(list_binlogs(self._sql()), a, cap)
            count = max(1, min(count, int(left / self._event_bytes)))
        cuts: list[tuple[BinlogPosition, int]] = []
        for i in range(1, parts):
            skip = count * i // parts
            try:
                rows = query(self._sql(), f"SHOW BINLOG EVENTS IN '{a.file}' FROM {a.pos} "
                                          f"LIMIT {skip}, {_CUT_LOOKAHEAD}")
            except (MysqlcdcError, pymysql.err.Error, OSError) as exc:
                log.info("no exact slice cuts (%s): slices pass over the events before them",
                         exc)
                self._no_exact_cuts = True
                return []
            found = next(((j, int(r[1])) for j, r in enumerate(rows)
                          if str(r[2]) in _GTID_EVENT_NAMES), None)
            if found is None:
                break                     # the file ends, or one transaction spans them all
            cut = BinlogPosition.of(a.file, found[1])
            if cut >= bound or skip + found[0] >= int(events) or (cuts and cut <= cuts[-1][0]):
                break
            cuts.append((cut, skip + found[0]))
        return cuts

    def _sample_event_bytes(self, start: BinlogPosition, cap: BinlogPosition,
                            events: int = _SAMPLE_EVENTS) -> float | None:
        """The bytes per event of the first ``events`` events from ``start`` in its file
        (frames only, nothing parsed)."""
        stream = ReplicationStream(self.options.settings, server_id=self.options.server_id,
                                   start=start, stop_at=cap, reconnect=self.options.retry)
        count, last = 0, start.pos
        try:
            for raw in stream:
                if raw.artificial:
                    continue
                if raw.file != start.file:
                    break
                count, last = count + 1, raw.pos
                if count >= events:
                    break
        finally:
            stream.close()
        return max(19.0, (last - start.pos) / (count - 1)) if count > 1 else None

    def plan_tasks(self, start: dict, end: dict) -> list[RangeTask]:
        """The read tasks of the batch ``[start, end)``."""
        if not batchend.pending(end):
            return self.tasks(self.position_of(start), self.position_of(end))
        a = BinlogPosition.of(end["file"], int(end["pos"]))     # where its rule counts from
        self._batch_history(a)
        view = self.history.view(self.options.tables, batch_start=a)
        rules = batchend.task_rules(end, self.options.schema_history, self._births())
        xa_open = self._xa_open_at(start)
        tasks = [replace(self._task(i, a, rule.cap, view), rule=rule, xa_open=xa_open)
                 for i, rule in enumerate(rules)]
        for q, _ in self.history.catchups(a):
            tasks.append(self._catchup(len(tasks), q, a))
        return tasks

    def _births(self) -> dict[str, int]:
        return dict(self._load_record().get("files", {}))

    def _read_here(self, start: BinlogPosition, offset: dict) -> batchend.Found:
        """The fallback: read the pending batch's range on the driver, with the task
        its read task had, to find what it found (the rows are not kept)."""
        log.warning("no record of where the batch from %s ended (is %s a folder the Spark "
                    "executors share?); reading the range on the driver to find it", start,
                    self.options.schema_history)
        view = self.history.view(self.options.tables, batch_start=start)
        whole = {**offset, "upto": {k: v for k, v in offset["upto"].items()
                                    if k not in ("cuts", "counts")}}
        [rule] = batchend.task_rules(whole, None, self._births())
        # the XA transactions open at its start: what the batch before it found
        xa_open = next((dict(f.xa) for f in self._found.values() if f.end == start), {})
        task = replace(self._task(0, start, rule.cap, view), rule=rule, xa_open=xa_open)
        found: list = []
        for _ in read_range(task, found):
            pass
        return found[0]

    def _merge(self, found: batchend.Found) -> None:
        """Bring the schema history past a batch its read task read: the binlog files
        it saw, the tables it held back, and when it stopped at a DDL, that DDL (and any
        right after it) applied by walking a short stretch from there."""
        for file, born in found.births.items():
            self._check_file(file, born)
        if found.events:
            self._event_bytes = max(19.0, found.bytes / found.events)
            self._event_bytes_read = True
        for q in found.held:
            self.keeper.quarantined(q)
        if found.reason == "ddl":
            now = current_position(self._sql())
            if found.end < now:
                scan = self.scan(found.end, now, _LOOKAHEAD_EVENTS)
                self._known[found.end] = scan.end

    def _trust_position(self, trust: tuple[int, int]) -> BinlogPosition:
        for c in self.history.changes.get(("", ""), []):
            if c.kind == "trust" and (c.pos.file_number, c.pos.pos) == trust:
                return c.pos
        raise AssertionError("the trusted position is recorded in the history")

    def _task(self, index: int, start: BinlogPosition, end: BinlogPosition,
              view: SchemaView, tables: TableFilter | None = None) -> RangeTask:
        o = self.options
        return RangeTask(
            settings=o.settings, server_id=o.server_id + 1 + index, start=start, end=end,
            tables=tables or o.tables, schema=view, batch_rows=o.batch_rows,
            include_query=o.include_query, emit_rollbacks=o.emit_rollbacks,
            retry=o.retry, status_path=None if self._status_file is None
            else str(self._status_file.with_name(f"source-status-task{index}.json")),
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
        parse, feed, tracker = skimmer.parser.parse, skimmer.feed, skimmer.tracker
        boundaries: list[tuple[BinlogPosition, int]] = []
        count, end = 0, start
        gtids: list[str] = []                 # for the offsets' GTID set (source.py)
        ends, last_ts = tracker.ends, None
        stop_file, stop_pos, stop_key = stop.file, stop.pos, (stop.file_number, stop.pos)
        numbers = {start.file: start.file_number}     # file name -> number, parsed once
        stream = ReplicationStream(self.options.settings, server_id=self.options.server_id,
                                   start=start, reconnect=self.options.retry)
        try:
            for raw in stream:
                if raw.data[4] == _FDE:
                    self._check_file(raw.file, int.from_bytes(raw.data[:4], "little"))
                if raw.artificial:
                    parse(raw.data, raw.pos)
                    continue
                if raw.file == stop_file and raw.pos >= stop_pos:
                    break
                count += 1
                after = feed(raw.file, raw.pos, raw.data)
                if after is not None:
                    file, pos = after
                    number = numbers.get(file)
                    if number is None:
                        number = numbers[file] = binlog_file_number(file)
                    end = BinlogPosition(number, pos, file)
                    boundaries.append((end, count))
                    if tracker.ends != ends:     # a transaction (not a ROTATE...) ended
                        ends, ctx = tracker.ends, tracker.last
                        if ctx.gtid is not None:
                            gtids.append(ctx.gtid)
                        last_ts = ctx.ts_ms or last_ts
                    if (number, pos) >= stop_key or (max_events and count >= max_events):
                        break
        finally:
            stream.close()
        self._last_scan = Scan(start, end, boundaries, gtids, last_ts)
        if for_keeper:
            self._processed = (start, end)
        return self._last_scan

    def ddl_scan(self, start: BinlogPosition, stop: BinlogPosition, observe) -> None:
        """Show ``observe`` every QUERY event of ``[start, stop)``; nothing else is
        decoded (the schema bootstrap: only DDL matters there). Logs progress every
        few seconds when the walk is long."""
        parser = BinlogParser(include=lambda db, table: False, file=start.file)
        parse, payload_inner = parser.parse, parser.payload_inner
        logs = list_binlogs(self._sql())
        total = _bytes_between(logs, start, stop)
        began = time.monotonic()
        report_at = [began + _PROGRESS_AFTER_S]
        stop_file, stop_pos = stop.file, stop.pos
        stream = ReplicationStream(self.options.settings, server_id=self.options.server_id,
                                   start=start, stop_at=stop, reconnect=self.options.retry)

        def progress() -> None:
            if time.monotonic() >= report_at[0]:
                report_at[0] = self._ddl_progress(logs, start, stream.position, total, began)

        try:
            # every other event (rows, XIDs, TABLE_MAPs: most of the bytes) is passed over
            # by the stream without an object
            for raw in stream.passing(_DDL_SCAN_WANTED, progress):
                data = raw.data
                code = data[4]
                if raw.artificial:
                    parse(data, raw.pos)
                    continue
                if raw.file == stop_file and raw.pos >= stop_pos:
                    break
                if code in _DDL_SCAN_PARSE:
                    observe(raw.file, raw.pos, parse(data, raw.pos))
                elif code == _PAYLOAD:
                    for inner in payload_inner(data, raw.pos):
                        if inner[4] in _QUERIES:
                            observe(raw.file, raw.pos, parse(inner, raw.pos, inner=True))
        finally:
            stream.close()
        if time.monotonic() - began >= _PROGRESS_AFTER_S:
            log.warning("schema history bootstrap: read %d MB of binlog in %.1f s",
                        _bytes_between(logs, start, min(stream.position, stop)) >> 20,
                        time.monotonic() - began)

    @staticmethod
    def _ddl_progress(logs, start: BinlogPosition, here: BinlogPosition, total: int,
                      began: float) -> float:
        """Log how far the DDL walk is; returns when to log next."""
        now = time.monotonic()
        seen = _bytes_between(logs, start, here)
        log.warning("schema history bootstrap: read %d of %d MB of binlog for DDL (at %s:%d, "
                    "%.0f MB/s)", seen >> 20, total >> 20, here.file, here.pos,
                    seen / 1e6 / max(now - began, 1e-3))
        return now + _PROGRESS_EVERY_S

    # -- seeks ----------------------------------------------------------------
    def walk_ddl(self, start: BinlogPosition, stop: BinlogPosition) -> None:
        """A seek forward skips ``[start, stop)``'s rows, not its DDL: the schema history
        applies every statement of the range, so it stays exact from ``stop`` on."""
        self._ensure_history(start)
        self.ddl_scan(start, stop, self.keeper.observer(start))
        self.keeper.changed()

    def close(self) -> None:
        self.drop_connection()
        if self._status_file is not None:
            retry.STATS.unlisten(self._write_status)


def _advance(logs: list[tuple[str, int]], start: BinlogPosition,
             nbytes: int) -> BinlogPosition | None:
    """The position ``nbytes`` of binlog after ``start`` by the server's file list (None
    past its end)."""
    left = nbytes
    for name, size in logs:
        number = BinlogPosition.of(name, 4).file_number
        if number < start.file_number:
            continue
        lo = start.pos if number == start.file_number else 4
        if lo + left <= size:
            return BinlogPosition(number, lo + left, name)
        left -= max(size - lo, 0)
    return None


def _plain(position: BinlogPosition) -> dict:
    return {"file": position.file, "pos": position.pos}   # stable key order


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


def _bytes_between(logs: list[tuple[str, int]], start: BinlogPosition,
                   stop: BinlogPosition) -> int:
    """Bytes of binlog from ``start`` to ``stop`` by the server's file list (for progress)."""
    total = 0
    for name, size in logs:
        here = BinlogPosition.of(name, 4)
        if here.file_number < start.file_number or here.file_number > stop.file_number:
            continue
        lo = start.pos if name == start.file else 0
        hi = stop.pos if name == stop.file else size
        total += max(hi - lo, 0)
    return total


def _write_json(path: Path, data: dict) -> None:
    """``data`` written to ``path`` atomically; a folder that cannot be written is left be
    (what it would hold is an optimisation)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("cannot write %s: %s", path, exc)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
