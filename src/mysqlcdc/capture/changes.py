"""Raw binlog events between two positions -> envelope record batches.

This is the loop every reader shares: a Spark task reading a replication
stream, ``mysqlcdc decode`` reading local files, and the benchmarks. It feeds
each raw event to the pure decoder, tracks transactions, and appends row
changes to an :class:`EnvelopeBuilder`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol

import pyarrow as pa

from mysqlcdc.binlog.events import (MariadbAnnotateRowsEvent, MariadbGtidEvent, QueryEvent,
                                    RowsEvent, RowsQueryEvent, TableMapEvent, XaPrepareEvent)
from mysqlcdc.binlog.constants import (MARIA_ANNOTATE_ROWS_EVENT, MARIA_GTID_EVENT,
                                       MARIADB_FL_PREPARED_XA, TABLE_MAP_EVENT, XID_EVENT)
from mysqlcdc.binlog.parser import BinlogParser
from mysqlcdc.binlog.rowsdecode import EXCLUDED, ROWS_FAST_CODES
from mysqlcdc.collector import fewer_collections
from mysqlcdc.envelope.builder import EnvelopeBuilder
from mysqlcdc.envelope.model import OP_ROLLBACK, OP_SCHEMA, OP_TRUNCATE, REKEY_NOTE
from mysqlcdc.errors import ConnectionLostError, SchemaError, StatementChangeError
from mysqlcdc.schema.compat import table_map_problem
from mysqlcdc.schema.ddl import classify, dml_target
from mysqlcdc.schema.history import Quarantine, SchemaView, rekeys
from mysqlcdc.schema.model import TableDef
from mysqlcdc.capture import xa
from mysqlcdc.capture.transactions import TxnTracker
from mysqlcdc.types import BinlogPosition, binlog_file_number

# the row number (in ``seq``) of a schema record that a resolution by reload writes at a
# quarantined DDL's position: far above what the statement's own records number
RELOAD_ROW = 100_000

__all__ = ["RawEventLike", "FileEvent", "ChangeDecoder", "HistoryLookup", "PassOver",
           "iter_change_batches", "pass_over_enabled"]

TableLookup = Callable[[str, str], TableDef | None]
_XID, _ANNOTATE, _MARIA_GTID, _TABLE_MAP = (XID_EVENT, MARIA_ANNOTATE_ROWS_EVENT, MARIA_GTID_EVENT,
                                            TABLE_MAP_EVENT)
_ROWS = frozenset(ROWS_FAST_CODES)
_SKIMMED = frozenset((_XID, _ANNOTATE, _MARIA_GTID, _TABLE_MAP, *_ROWS))   # see ChangeDecoder.feed_raw


class RawEventLike(Protocol):
    file: str
    pos: int
    data: bytes
    artificial: bool


@dataclass(frozen=True, slots=True)
class FileEvent:
    """A raw event read from a local file (same shape as a stream's RawEvent)."""

    file: str
    pos: int
    data: bytes
    artificial: bool = False


class HistoryLookup:
    """``tables(db, table)`` for the parser, answered from a schema view at the
    position of the event being decoded (``at``, set by the ChangeDecoder).

    ``include(db, table)`` wraps the task's filter: a table whose rows are held
    back at ``at`` (quarantined) is not decoded at all."""

    def __init__(self, view: SchemaView) -> None:
        self.view = view
        self.at: tuple[int, int, int] = (0, 0, 0)
        self.held_any = bool(view.quarantines)

    def __call__(self, db: str, table: str) -> TableDef | None:
        return self.view.definition_at((db, table), self.at)

    def hold(self, q: Quarantine) -> None:
        """Hold ``q``'s table back from its position on (found by this reader)."""
        self.view.quarantines.setdefault(q.key, []).append(q)
        self.held_any = True

    def including(self, include: Callable[[str, str], bool] | None) -> Callable[[str, str], bool]:
        memo: dict[tuple[str, str], bool] = {}
        view = self.view

        def included(db: str, table: str) -> bool:
            key = (db, table)
            ok = memo.get(key)
            if ok is None:
                ok = memo[key] = include is None or bool(include(db, table))
            if ok and self.held_any and view.held_at(key, self.at):
                return False
            return ok
        return included


class EarliestHistoryLookup(HistoryLookup):
    """A ``HistoryLookup`` that answers an event before the history's first record of a
    table with that record's definition: an XA transaction prepared before the pipeline
    began reading (``capture.xa.read_prepared``), whose tables no DDL can have changed
    since (it holds their metadata locks)."""

    def __call__(self, db: str, table: str) -> TableDef | None:
        found = self.view.definition_at((db, table), self.at)
        if found is None:
            versions = self.view.versions.get((db, table))
            found = versions[0].definition if versions else None
        return found


class ChangeDecoder:
    """Decodes raw events into envelope rows and remembers the last boundary.

    With a :class:`HistoryLookup` as ``tables``, definitions follow the schema
    history, rows of held-back tables are dropped, and every DDL the history
    recorded becomes a schema-change record (``op`` ``s``, or ``t`` for TRUNCATE).
    ``include_query`` puts the statement text of ANNOTATE_ROWS / ROWS_QUERY
    events (when the server writes them) into the ``query`` field of each row.
    ``columnar=False`` decodes every row image to a dict first (the reference path
    the columnar one is tested against). ``emit_rollbacks`` adds a record with
    ``op = x`` where a transaction that wrote rows ends with ROLLBACK (rows of tables
    that cannot roll back stay in the binlog; the plugins sink calls ``rollback_trx``).
    """

    def __init__(self, parser: BinlogParser, tables: TableLookup | None = None, *,
                 include: Callable[[str, str], bool] | None = None,
                 include_query: bool = False, ddl=None, columnar: bool = True,
                 emit_rollbacks: bool = False, statements_fatal: bool = False) -> None:
        self.parser = parser
        # capture (not an offline decode): a captured table's change logged as a
        # statement stops the read, its rows being nowhere in the binlog
        self.statements_fatal = statements_fatal
        # row images become envelope texts column by column (envelope.columnar)
        parser.set_defer_rows(columnar)
        self.ddl = ddl            # offline: follows the DDL in the files (capture.offline)
        self.tables = tables
        self.history = tables if isinstance(tables, HistoryLookup) else None
        if self.history is not None:
            parser.include = self.history.including(include or parser.include)
        self.include = include or parser.include
        self.include_query = include_query
        self.emit_rollbacks = emit_rollbacks
        self.query: str | None = None
        self.builder = EnvelopeBuilder()
        self.tracker = TxnTracker()
        self.keys: dict[int, tuple[str, ...] | None] = {}
        self._key_memo: dict[int, tuple] = {}   # id(TableState) -> (state, key columns)
        # system-versioned tables met: (db, table) -> (row_end column, its type)
        self._versioned: dict[tuple[str, str], tuple[str, str]] = {}
        self.boundary: tuple[str, int] | None = None
        self.events = 0
        self.passed_bytes = 0     # of events a stream passed over for it (PassOver)
        self.on_excluded: Callable[[], None] | None = None   # a table not decoded came by
        # A read task that finds its own batch end (capture.batchend) sets these: a DDL
        # at or after ``known`` (file number, pos) is not in the history the task carries,
        # so the decoder stops there (``halt`` = its file and pos); with ``check_since``
        # set, every new TABLE_MAP of an included table is checked against the history
        # and a table that disagrees is held back from it (``held``), as the driver's
        # schema keeper would have done before the task ran.
        self.known: tuple[int, int] | None = None
        self.check_since: BinlogPosition | None = None
        self.halt: tuple[str, int] | None = None
        self.held: list[Quarantine] = []
        self._file = ""
        self._file_number = 0
        # XA transactions (``capture.xa``, DESIGN.md decision 32). Prepared in this read:
        # xid -> (where its group begins, its rows or None); prepared before it and still
        # open (inherited from the batch before): xid -> (that position, any rows);
        # resolved in this read: xid -> the position of the prepare it resolved
        self.xa_held: dict[str, tuple[BinlogPosition, pa.RecordBatch | None]] = {}
        self.xa_open: dict[str, tuple[BinlogPosition, bool]] = {}
        self.xa_done: dict[str, str] = {}
        self._xa_at: tuple[str, int] | None = None    # the XA group being read began here
        # reads a prepared group again (``xa.Fetch``); ``xa_search_from``: where a commit
        # of an xid neither held nor inherited is looked for first (a slice task: its
        # batch's start); ``xa_missing(xid, file, pos)``: what is done when none is found
        # (default: the named error)
        self.xa_fetch: xa.Fetch | None = None
        self.xa_search_from: BinlogPosition | None = None
        self.xa_missing: Callable[[str, str, int], object] | None = None

    def feed(self, raw: RawEventLike) -> None:
        """Decode one raw event; artificial ones only update decoder state."""
        if raw.artificial:
            if self.history is not None:
                self.history.at = (self._file_number, raw.pos, 0)
            self.parser.parse(raw.data, raw.pos)
            return
        self.feed_raw(raw.file, raw.pos, raw.data)

    def feed_raw(self, file: str, pos: int, data: bytes) -> bool:
        """Decode one event read from ``file`` at ``pos`` (not an artificial one);
        True when it was a rows event (the builder may have grown)."""
        if file != self._file:
            self._file, self._file_number = file, binlog_file_number(file)
        self.events += 1
        code = data[4]
        if code in _SKIMMED:
            # the events of a transaction, from their bytes: the parser checks framing,
            # size and CRC32 and builds no event. When it cannot vouch for one, it is
            # parsed below, which decodes it or raises the named error.
            if code in _ROWS:
                if self._skim_rows(file, pos, data):
                    return True
            elif code == _XID:
                if self.parser.skim(data) == _XID:
                    self.tracker.observe_xid()          # always a boundary
                    if self._xa_at is not None:
                        self._xa_release()
                    self.query = None
                    self.boundary = (file, pos + len(data))
                    return False
            elif code == _MARIA_GTID:
                if self.tracker.observe_mariadb_gtid(self.parser.skim_mariadb_gtid(data)):
                    return False
            elif code == _TABLE_MAP:
                if self._skim_table_map(file, pos, data):
                    return False
            elif not self.include_query and self.parser.skim(data) == _ANNOTATE:
                if self.tracker.observe_annotate():
                    self.query = None
                    self.boundary = (file, pos + len(data))
                return False
        if self.history is not None:
            self.history.at = (self._file_number, pos, 0)
        events = self.parser.parse(data, pos)   # several for a TRANSACTION_PAYLOAD
        row_index = 0
        rows = boundary = False
        for ev in events:
            cls = ev.__class__                # event classes have no subclasses
            if cls is RowsEvent:
                row_index = self._rows(ev, file, pos, row_index)
                rows, boundary = True, False
                continue
            if cls is TableMapEvent:
                self._table_map(ev)
            elif cls is QueryEvent:
                self._query(ev, file, pos)
            elif cls is MariadbAnnotateRowsEvent or cls is RowsQueryEvent:
                if self.include_query:
                    self.query = ev.query
            elif cls is MariadbGtidEvent:
                if ev.flags2 & MARIADB_FL_PREPARED_XA:
                    self._xa_begin(file, pos)
            elif cls is XaPrepareEvent:
                self._xa_prepared(ev)
            boundary = self.tracker.observe(ev, file, pos)
        if boundary:
            self.query = None
            self.boundary = TxnTracker.next_position(events[-1], file, pos + len(data))
            if self._xa_at is not None:
                self._xa_release()
        return rows

    def _skim_rows(self, file: str, pos: int, data: bytes) -> bool:
        """A rows event of a shape the parser decoded before (``BinlogParser.skim_rows``),
        its rows added as ``_rows`` adds them; False when it must be parsed."""
        history = self.history
        if history is not None:
            history.at = (self._file_number, pos, 0)
        skimmed = self.parser.skim_rows(data)
        if skimmed is None:
            return False
        tracker = self.tracker
        if not tracker.in_txn:
            tracker.observe_table_map_bytes(data, file, pos)   # opens a txn context if needed
        if skimmed is EXCLUDED:
            return True       # a table filtered out: nothing of it is decoded
        (_, _, kind, table_id, schema, table, _, _), rows = skimmed
        if history is not None and history.view.before_catchup(history.at):
            return True       # a catch-up task: rows up to the quarantine were emitted
        self.builder.add_rows(kind, schema, table, rows, self.keys.get(table_id), tracker.ctx, file,
                              self._file_number, pos, 0, self.query, data[4])
        return True

    def _skim_table_map(self, file: str, pos: int, data: bytes) -> bool:
        """A TABLE_MAP the parser decoded before and still vouches for (see
        ``BinlogParser.skim_table_map``), accounted for as ``feed_raw`` does after
        parsing it; False when it must be parsed."""
        if self.history is not None:
            self.history.at = (self._file_number, pos, 0)
        state = self.parser.skim_table_map(data)
        if state is None:
            return False
        self._table_map(state.event)   # the fields parse would build, but the header
        if not self.tracker.in_txn:     # (inside one, observing it does nothing)
            self.tracker.observe_table_map_bytes(data, file, pos)
        return True

    def _query(self, ev: QueryEvent, file: str, pos: int) -> None:
        if ev.query[:1] in "Xx":
            said = xa.statement(ev.query)
            if said is not None:
                self._xa_statement(said[0], said[1], file, pos)
                return
        if self.emit_rollbacks and self.tracker.in_txn and _keyword(ev.query) == "ROLLBACK":
            self.builder.add_event(OP_ROLLBACK, ev.schema, None, None, None, "ROLLBACK",
                                   self.tracker.ctx, file, self._file_number, pos)
            return
        if self.known is not None and (self._file_number, pos) >= self.known \
                and classify(ev.query) != "ignore":
            self.halt = (file, pos)        # the history must apply it first
            return
        target = dml_target(ev.query, ev.schema or None) if self.statements_fatal else None
        if target is not None and (self.include is None or self.include(*target)):
            gtid = getattr(self.tracker.ctx, "gtid", None)
            raise StatementChangeError(
                f"{target[0]}.{target[1]} was changed by a statement logged as such at "
                f"{file}:{pos}{f' (transaction {gtid})' if gtid else ''}, not as rows, so "
                f"the changed rows are not in the binlog: {' '.join(ev.query.split())[:200]}")
        if self.history is not None:
            self._schema_changes(ev, file, pos)
        elif self.ddl is not None:
            self.ddl.query(ev)

    # -- XA transactions (capture.xa) -------------------------------------------------
    def _xa_begin(self, file: str, pos: int) -> None:
        """An XA transaction's group begins (MariaDB: its GTID event; MySQL: XA START):
        its rows are built apart from the rows before it."""
        if self._xa_at is None:
            self._xa_at = (file, pos)
            self.builder.stash()
            self.builder.holding = True

    def _xa_release(self) -> None:
        """The group ended, but not with an XA PREPARE: its rows are output as any
        transaction's (a group no server writes; nothing is held past its end)."""
        self._xa_at = None
        self.builder.holding = False

    def _xa_prepared(self, ev: XaPrepareEvent) -> None:
        at, self._xa_at = self._xa_at, None
        builder = self.builder
        builder.holding = False
        if at is None or ev.one_phase:
            return            # MySQL's XA COMMIT ... ONE PHASE: committed here, rows stay
        rows = builder.take_own()
        self.xa_held[xa.xid_of(ev.xid)] = (BinlogPosition.of(*at),
                                           rows if rows.num_rows else None)

    def _xa_statement(self, verb: str, xid: str, file: str, pos: int) -> None:
        if verb == "START":
            self._xa_begin(file, pos)
        elif verb in ("COMMIT", "ROLLBACK"):
            if verb == "ROLLBACK" and xid not in self.xa_held and xid not in self.xa_open:
                self.xa_done[xid] = ""    # prepared before this read: nothing to look up
                return
            found = self._xa_find(xid, file, pos, verb == "COMMIT")
            if found is None:
                return
            at, rows = found
            self.xa_done[xid] = str(at)
            if rows is not None and verb == "COMMIT":
                self.builder.put_ready(xa.as_committed(rows, self.tracker.ctx, file,
                                                       self._file_number, pos))

    def _xa_find(self, xid: str, file: str, pos: int, want_rows: bool):
        """The prepare an outcome at ``file:pos`` resolves: ``(its position, its rows or
        None)``, read again when it lies before this read."""
        held = self.xa_held.pop(xid, None)
        if held is not None:
            return held
        here = BinlogPosition(self._file_number, pos, file)
        inherited = self.xa_open.pop(xid, None)
        if inherited is not None:
            at, any_rows = inherited
            if not (any_rows and want_rows):
                return at, None
            if self.xa_fetch is not None:
                found = self.xa_fetch(xid, at, here)
                if found is not None:
                    return found
        elif self.xa_fetch is not None and self.xa_search_from is not None:
            found = self.xa_fetch(xid, self.xa_search_from, here)
            if found is not None:
                return found
        if self.xa_missing is not None:
            return self.xa_missing(xid, file, pos)
        raise xa.missing_error(xid, file, pos, "not in the range read, nor recorded open "
                                               "at its start")

    def xa_still_open(self) -> dict[str, list]:
        """The prepared transactions open at the end of what was read, for the next
        read: xid -> [position of their group, whether they changed a captured table]."""
        out = {x: [str(at), bool(rows)] for x, (at, rows) in self.xa_open.items()}
        out.update((x, [str(at), rows is not None]) for x, (at, rows) in self.xa_held.items())
        return out

    def _table_map(self, ev: TableMapEvent) -> None:
        """Remember the key columns of the table id, worked out once per table state
        (the parser hands out the same state while the table's definition holds)."""
        state = self.parser.table_maps.get(ev.table_id)
        hit = self._key_memo.get(id(state))
        if hit is not None and hit[0] is state:
            self.keys[ev.table_id] = hit[1]
            if self.on_excluded is not None and not state.included:
                self.on_excluded()
            return
        keys = self.keys[ev.table_id] = self._key_columns(ev)
        if state is not None:
            if self.on_excluded is not None and not state.included:
                self.on_excluded()
            if len(self._key_memo) > 10_000:
                self._key_memo.clear()
            self._key_memo[id(state)] = (state, keys)

    def check_table_maps(self, since: BinlogPosition) -> None:
        """Check every TABLE_MAP the parser decodes for an included table against the
        history; a table it cannot decode is held back from there (``held``), the
        quarantine's rows to be re-read from ``since`` once resolved."""
        self.check_since = since
        self.parser.vet = self._vet

    def _vet(self, ev: TableMapEvent) -> bool:
        why = table_map_problem(ev, self.tables(ev.schema, ev.table))
        if why is None:
            return True
        number, pos, _ = self.history.at
        q = Quarantine(ev.schema, ev.table, BinlogPosition(number, pos, self._file),
                       self.check_since, why)
        self.history.hold(q)
        self.held.append(q)
        return False

    def _rows(self, ev: RowsEvent, file: str, pos: int, row_index: int) -> int:
        self.tracker.observe(ev, file, pos)   # opens a txn context if needed
        if ev.rows is None:
            return row_index
        if self.history is not None and self.history.view.before_catchup(self.history.at):
            return row_index      # a catch-up task: rows up to the quarantine were emitted
        return self.builder.add_rows(
            ev.kind, ev.schema, ev.table, ev.rows, self.keys.get(ev.table_id),
            self.tracker.ctx, file, self._file_number, pos, row_index, self.query,
            ev.header.type_code,
        )

    def _schema_changes(self, ev: QueryEvent, file: str, pos: int) -> None:
        """Schema-change records for the DDL at this position, as the history has them."""
        view = self.history.view
        if view.before_catchup(self.history.at):
            return
        row = 0               # the statement's records in its order: a swap of names by
        for change in view.changes_at(file, pos):    # one RENAME is applied name by name
            if change.kind == "trust" or not self.include(change.db, change.table):
                continue
            op = OP_TRUNCATE if change.kind == "truncate" else OP_SCHEMA
            if change.kind == "reload":    # read by a catch-up task, which sees this table
                row = max(row, RELOAD_ROW)  # alone: clear of the statement's other records
            self.builder.add_event(
                op, change.db, change.table,
                None if change.before is None or op == OP_TRUNCATE else change.before.to_json(),
                None if op == OP_TRUNCATE or change.definition is None
                else change.definition.to_json(),
                change.ddl, self.tracker.ctx, file, self._file_number, pos, row=row,
            )
            row += 1
            if rekeys(change):
                # the table's rows have other key texts from here: what sinks hold under
                # the old ones is void (a ``t``), and the table is read again (a backfill
                # the schema keeper queued at this DDL; DESIGN.md decision 33)
                self.builder.add_event(
                    OP_TRUNCATE, change.db, change.table, None, None,
                    f"{REKEY_NOTE} {change.ddl}", self.tracker.ctx, file, self._file_number,
                    pos, row=row)
                row += 1
            elif change.kind == "create" and change.before is not None:
                # CREATE OR REPLACE: the old table's rows are gone with it
                self.builder.add_event(OP_TRUNCATE, change.db, change.table, None, None,
                                       change.ddl, self.tracker.ctx, file, self._file_number,
                                       pos, row=row)
                row += 1

    def _key_columns(self, ev: TableMapEvent) -> tuple[str, ...] | None:
        if ev.primary_key and ev.column_names:
            names = tuple(ev.column_names[i] for i in ev.primary_key)
            table = self.tables(ev.schema, ev.table) if self.tables else None
            return self._versioned_key(ev, table, names) if table is not None and \
                table.versioned else names
        state = self.parser.table_maps.get(ev.table_id)
        if state is not None and not state.included:
            return None           # not decoded: filtered out or held back
        table = self.tables(ev.schema, ev.table) if self.tables else None
        if table is None:
            return None
        if ev.column_names is None and len(table.columns) != len(ev.column_types):
            raise SchemaError(
                f"{ev.schema}.{ev.table}: the binlog row has {len(ev.column_types)} columns but "
                f"the table definition in force there has {len(table.columns)} "
                f"({', '.join(table.column_names)}), so its rows cannot be named safely",
                hint="Check `mysqlcdc schema history` for this table; set "
                "binlog_row_metadata=FULL on the server to carry names in the binlog.",
            )
        if table.versioned:
            return self._versioned_key(ev, table, table.primary_key)
        return table.primary_key or None

    def _versioned_key(self, ev: TableMapEvent, table, key: tuple[str, ...]):
        """A system-versioned table's key: the server's includes the row_end column; a
        row's identity is the rest (its old versions are not output). The table's rows
        are held to their current versions from here (``without_history_rows``)."""
        end = next(c for c in table.columns if c.system == "row_end")
        self._versioned[(ev.schema, ev.table)] = (end.name, end.data_type)
        return tuple(n for n in key if n != end.name) or None

    def take(self) -> pa.RecordBatch:
        batch = self.builder.take()
        if self._versioned and len(batch):
            batch = without_history_rows(batch, self._versioned)
        return batch


# A current row's row_end in a system-versioned table: the greatest TIMESTAMP(6), as the
# decoder writes it (MariaDB before 11.5, and 11.5+ on 64-bit where it is 2106's). A table
# versioned by transaction ids (BIGINT periods) is never decoded: its changes are logged
# as statements (``SchemaKeeper._refuse_statement_logged``).
_CURRENT_ENDS = {"timestamp": ('"2038-01-19T03:14:07.999999Z"', '"2106-02-07T06:28:15.999999Z"')}


def without_history_rows(batch: pa.RecordBatch,
                         tables: dict[tuple[str, str], tuple[str, str]]) -> pa.RecordBatch:
    """``batch`` as the changes of the system-versioned ``tables`` as their users see
    them (``tables``: (db, table) -> its row_end column's name and type): an UPDATE of
    such a table also inserts the row's old version (its row_end the moment it stopped
    being current), a DELETE is logged as the update that sets that row_end, and
    ``DELETE HISTORY`` deletes old versions. A sink that applied those by key would
    overwrite or keep the current row wrongly: old versions' inserts and deletes are left
    out, and the update that ends a version becomes the row's delete (``op = d``, its
    ``before`` kept)."""
    import orjson
    import pyarrow.compute as pc

    op, after, before = batch.column("op"), batch.column("after"), batch.column("before")
    history = ended = None
    for (db, table), (column, kind) in tables.items():
        ours = pc.and_(pc.equal(batch.column("db"), db), pc.equal(batch.column("table"), table))
        if not pc.any(ours).as_py():
            continue
        name = orjson.dumps(column).decode() + ":"

        def old_version(image):
            dated = pc.fill_null(pc.match_substring(image, name), False)
            for current in _CURRENT_ENDS.get(kind, ()):
                dated = pc.and_(dated, pc.invert(pc.fill_null(
                    pc.match_substring(image, name + current), False)))
            return dated

        old_after = old_version(after)
        gone = pc.and_(ours, pc.or_(pc.and_(pc.equal(op, "c"), old_after),
                                    pc.and_(pc.equal(op, "d"), old_version(before))))
        # a DELETE is logged as the update that ends the current version: it is the
        # delete of the row as the table shows it
        over = pc.and_(pc.and_(ours, pc.equal(op, "u")), old_after)
        history = gone if history is None else pc.or_(history, gone)
        ended = over if ended is None else pc.or_(ended, over)
    if history is None:
        return batch
    if pc.any(ended).as_py():
        columns = dict(zip(batch.schema.names, batch.columns))
        columns["op"] = pc.if_else(ended, pa.scalar("d", op.type), op)
        columns["after"] = pc.if_else(ended, pa.scalar(None, after.type), after)
        batch = pa.RecordBatch.from_arrays([columns[n] for n in batch.schema.names],
                                           schema=batch.schema)
    return batch.filter(pc.invert(history))


def pass_over_enabled() -> bool:
    """``MYSQLCDC_PASS_OVER=0``: decode every event one by one, also those of transactions
    of tables not captured (to compare: the output is the same; DESIGN.md decision 27)."""
    return os.environ.get("MYSQLCDC_PASS_OVER", "1").strip().lower() not in ("0", "false", "no", "off")


# After this many transactions in a row that it could not pass over, PassOver stops
# looking until a table that is not captured comes by again: a reader that captures
# every table it meets pays nothing for it.
_PATIENCE = 16


class PassOver:
    """What lets a :class:`~mysqlcdc.protocol.stream.ReplicationStream` pass over the
    inner events of a transaction that changes only tables its reader does not capture
    (``include`` says no), without handing them out one by one: the stream hands out
    the transaction's GTID event and its XID, and this accounts for what lies between
    as decoding it would have (its TABLE_MAPs put in force, its events counted in the
    decoder's ``events`` and ``passed_bytes``). Which transactions qualify is
    ``BinlogParser.skim_txn``'s to say, from their bytes; every other one is decoded
    as always. A table held back (quarantined) is not such a table: only the filter's
    own no counts, which does not change along the binlog.

    It is the stream's ``pass_over`` while it pays: from the start until
    :data:`_PATIENCE` transactions in a row could not be passed over, and again from
    the next TABLE_MAP of a table not decoded (``ChangeDecoder.on_excluded``) on; the
    stream looks at it once per batch of events it read."""

    __slots__ = ("decoder", "stream", "_skim", "_excluded", "_pending", "_misses", "events")

    def __init__(self, decoder: ChangeDecoder, include: Callable[[str, str], bool],
                 stream) -> None:
        self.decoder, self.stream = decoder, stream
        self._skim = decoder.parser.skim_txn
        memo: dict[tuple[str, str], bool] = {}

        def excluded(db: str, table: str) -> bool:
            key = (db, table)
            no = memo.get(key)
            if no is None:
                no = memo[key] = not include(db, table)
            return no
        self._excluded = excluded
        self._pending: tuple | None = None
        self._misses = 0
        self.events = 0           # passed over, for tests and logs
        decoder.on_excluded = self.wake
        stream.pass_over = self

    def wake(self) -> None:
        """A TABLE_MAP of a table not decoded: look at transactions again."""
        if self.stream.pass_over is None:
            self._misses = 0
            self.stream.pass_over = self

    def span(self, batch: list[bytes], i: int) -> int:
        """How many events after ``batch[i]``, a GTID event, the stream may pass over
        once it has handed that one out (0: none)."""
        found = self._skim(batch, i, self._excluded)
        if found is None:
            self._pending = None
            self._misses += 1
            if self._misses >= _PATIENCE:
                self.stream.pass_over = None      # until wake()
            return 0
        self._misses = 0
        self._pending = found
        return found[0] - i - 1

    def end(self) -> int:
        """The offset after the events :meth:`span` counted."""
        return self._pending[2]

    def passed(self, count: int) -> int:
        """The stream passed over the ``count`` events :meth:`span` found: account for
        them; returns the offset after them."""
        _, size, end, states = self._pending
        self._pending = None
        decoder = self.decoder
        decoder.parser.pass_txn(states)
        decoder.events += count
        decoder.passed_bytes += size
        self.events += count
        return end


def iter_change_batches(
    raws: Iterable[RawEventLike],
    decoder: ChangeDecoder,
    *,
    end: BinlogPosition | None = None,
    batch_rows: int = 8192,
) -> Iterator[pa.RecordBatch]:
    """Yield envelope batches for every event before ``end``.

    With ``end`` set, the input must reach it: running dry before ``end`` raises
    ConnectionLostError, because stopping short would silently lose changes.
    """
    fewer_collections()       # the row images a batch keeps are no cycle's part
    end_key = (end.file_number, end.pos) if end else None
    reached = end is None
    numbers: dict[str, int] = {}
    # Per event only ``raw.pos >= limit`` and a file name compared: ``limit`` is
    # where ``end`` falls in ``file`` (0 past end's file, never before it), and
    # the boundary is compared only when the decoder has moved it.
    file, limit = None, _NEVER
    seen = None
    feed, builder = decoder.feed_raw, decoder.builder
    for raw in raws:
        if raw.pos >= limit or raw.file != file:
            if not raw.artificial:
                if raw.file != file:
                    file, limit = raw.file, _limit_in(numbers, raw.file, end_key)
                if raw.pos >= limit:
                    reached = True
                    break
        if raw.artificial:
            decoder.feed(raw)
        elif feed(raw.file, raw.pos, raw.data) and len(builder) >= batch_rows:
            yield decoder.take()
        boundary = decoder.boundary
        if boundary is not seen:
            seen = boundary
            if end_key and boundary and (_number(numbers, boundary[0]), boundary[1]) >= end_key:
                reached = True
                break
    if len(decoder.builder):
        yield decoder.take()
    if not reached:
        raise ConnectionLostError(
            f"binlog stream ended before the end of the range ({end}); nothing after "
            f"{decoder.boundary} was emitted"
        )


_NEVER = 1 << 64   # above any binlog offset


def _keyword(query: str) -> str:
    return query.strip().rstrip(";").upper()


def _limit_in(cache: dict[str, int], file: str, end_key: tuple[int, int] | None) -> int:
    """The first offset of ``file`` at or past ``end_key`` (file number, offset)."""
    if end_key is None:
        return _NEVER
    number = _number(cache, file)
    return _NEVER if number < end_key[0] else end_key[1] if number == end_key[0] else 0


def _number(cache: dict[str, int], file: str) -> int:
    """A file's numeric extension, parsed once per file name."""
    n = cache.get(file)
    if n is None:
        n = cache[file] = binlog_file_number(file)
    return n
