"""Driver-side keeper of the schema history.

Before a micro-batch ``[start, end)`` is handed to read tasks, the driver walks
its events (the planner's framing scan: no rows are decoded) and, in binlog
order:

* applies every DDL to the catalog and records the resulting versions;
* checks every TABLE_MAP of an included table against the version in force;
* quarantines a table whose DDL it cannot apply with certainty, or whose
  TABLE_MAP disagrees with the history. Its rows are then held back; the other
  tables keep flowing.

Read tasks receive a :class:`SchemaView` and only look versions up, so a task
never parses SQL and a replayed batch sees exactly what it saw the first time.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from mysqlcdc.binlog.events import Event, QueryEvent, TableMapEvent
from mysqlcdc.errors import (SchemaBootstrapError, SchemaError, TableQuarantinedError,
                             UnsupportedTableError)
from mysqlcdc.schema.compat import table_map_problem
from mysqlcdc.schema.ddl import Catalog, classify, targets
from mysqlcdc.schema.history import Change, Quarantine, SchemaHistory, rekeys
from mysqlcdc.schema.introspect import (load_databases, load_server_settings, load_tables,
                                        load_transaction_versioned)
from mysqlcdc.types import BinlogPosition

__all__ = ["SchemaKeeper"]

log = logging.getLogger(__name__)

Include = Callable[[str, str], bool]


def _key(p: BinlogPosition) -> tuple[int, int]:
    return (p.file_number, p.pos)


@dataclass
class _Touch:
    pos: BinlogPosition
    ddl: str
    creates: bool


class SchemaKeeper:
    """Keeps ``history`` up to date with the binlog; see the module docstring."""

    def __init__(self, history: SchemaHistory, include: Include, sql: Callable[[], object],
                 *, bootstrap: str = "exact") -> None:
        self.history = history
        self.include = include
        self.sql = sql                 # returns the planner's (live) SQL connection
        self.bootstrap_mode = bootstrap
        self.catalog: Catalog | None = None
        self.applied_to: tuple[int, int] = (-1, -1)
        self.trust_until: tuple[int, int] | None = None
        self._batch_start: BinlogPosition | None = None
        self._checked: dict[tuple[int, bytes], object] = {}
        self._generation = 0

    def generation(self, file: str, pos: int) -> tuple[int, bool]:
        """Changes whenever a TABLE_MAP seen before could be judged differently here:
        after any DDL (applied now or on an earlier run), quarantine, resolution or
        history reload, and across the end of a ``schema_bootstrap: current`` trust."""
        trusted = self.trust_until is not None and \
            (BinlogPosition.of(file, pos).file_number, pos) < self.trust_until
        return self._generation, trusted

    def changed(self) -> None:
        """The history changed outside the keeper (reloaded): check TABLE_MAPs afresh."""
        self._generation += 1

    # -- bootstrap -------------------------------------------------------------
    def ensure(self, start: BinlogPosition, current: BinlogPosition,
               scan: Callable[[BinlogPosition, BinlogPosition, Callable], None]) -> None:
        """Make sure the history has versions at ``start`` and the catalog is loaded."""
        if self.catalog is not None:
            return
        conn = self.sql()
        self._refuse_statement_logged(conn)
        if not self.history.bootstrapped:
            self._bootstrap(conn, start, current, scan)
        self._load_catalog(conn)

    def _refuse_statement_logged(self, conn) -> None:
        """A captured table versioned by transaction ids stops the pipeline before it
        reads anything: MariaDB logs its changes as statements even under
        ``binlog_format=ROW``, so they never reach the stream as rows."""
        found = [f"{db}.{t}" for db, t in load_transaction_versioned(conn) if self.include(db, t)]
        if found:
            raise UnsupportedTableError(
                f"{', '.join(found[:10])}{' ...' if len(found) > 10 else ''}: system-versioned "
                f"by transaction ids (BIGINT UNSIGNED GENERATED ALWAYS AS ROW END), whose "
                f"changes the server logs as statements, not rows")

    def _bootstrap(self, conn, start: BinlogPosition, current: BinlogPosition, scan) -> None:
        from mysqlcdc.capture.server import current_position

        tables = load_tables(conn)
        # A DDL that ran after ``current`` was read but before the definitions were (a
        # table altered as the pipeline starts) is in them: the walk must reach it. Its
        # binlog event is written before its metadata lock, which information_schema
        # waits for, is released, so the position read now is past it.
        current = max(current, current_position(conn))
        if start < current:
            touched = self._touched(start, current, scan, tables)
            unsafe = {k: t for k, t in touched.items() if not t.creates}
            if unsafe and self.bootstrap_mode != "current":
                listing = "; ".join(f"{db}.{t} at {v.pos}: {v.ddl[:120]}"
                                    for (db, t), v in sorted(unsafe.items())[:10])
                raise SchemaBootstrapError(
                    f"cannot start the schema history at {start}: the binlog between it and the "
                    f"server's position {current} changes {len(unsafe)} table(s) that exist today, "
                    f"so today's definitions do not describe their older rows ({listing})")
            if unsafe:
                log.warning("schema history bootstrapped from today's definitions for events "
                            "before %s, as asked (schema_bootstrap=current); tables changed in "
                            "between: %s", current, sorted(unsafe))
                self.trust_until = _key(current)
            else:
                for key in touched:          # created after the start: absent at it
                    tables.pop(key, None)
        self.history.bootstrap(start, tables)
        if self.trust_until is not None:
            self.history.record([Change(current, "trust", "", "", None)])

    def _touched(self, start, current, scan, tables) -> dict[tuple[str, str], _Touch]:
        """Tables (existing or created) that a DDL in ``[start, current)`` touches first."""
        touched: dict[tuple[str, str], _Touch] = {}
        unknown: list[str] = []

        def observe(file: str, pos: int, events: list[Event]) -> None:
            for ev in events:
                if not isinstance(ev, QueryEvent) or classify(ev.query) == "ignore":
                    continue
                found = targets(ev.query, ev.schema or None)
                if found is None:
                    unknown.append(f"{file}:{pos}: {ev.query[:120]}")
                    continue
                creates = _plain_create(ev.query)
                for key in found:
                    if key not in touched:
                        touched[key] = _Touch(BinlogPosition.of(file, pos), ev.query, creates)

        scan(start, current, observe)
        if unknown and self.bootstrap_mode != "current":
            raise SchemaBootstrapError(
                f"cannot start the schema history at {start}: DDL between it and {current} "
                f"touches tables that cannot be determined ({'; '.join(unknown[:5])})")
        return touched

    def _load_catalog(self, conn) -> None:
        h = self.history
        marks = [c for v in h.changes.values() for c in v]
        trust = [c for c in h.changes.get(("", ""), []) if c.kind == "trust"]
        if trust:
            self.trust_until = _key(trust[-1].pos)
        last = max((c.pos for c in marks if c.kind not in ("bootstrap", "trust")),
                   default=None, key=_key)
        quarantined = [q.pos for qs in h.quarantines.values() for q in qs]
        if quarantined:
            qlast = max(quarantined, key=_key)
            last = qlast if last is None or _key(qlast) > _key(last) else last
        if last is not None:
            self.applied_to = _key(last)
            tables = h.tables_at(last)
        else:
            boots = [c.pos for c in marks if c.kind == "bootstrap"]
            tables = h.tables_at(max(boots, key=_key)) if boots else {}
        tables.pop(("", ""), None)
        for key, qs in h.quarantines.items():
            if h.is_quarantined(*key):
                tables.pop(key, None)
        self.catalog = Catalog(tables=dict(tables), databases=load_databases(conn),
                               **load_server_settings(conn))

    def resolved(self, db: str, table: str, definition) -> None:
        """A quarantine was resolved: later DDL applies to ``definition`` (None: skipped)."""
        if self.catalog is None:
            return
        if definition is None:
            self.catalog.tables.pop((db, table), None)
        else:
            self.catalog.tables[(db, table)] = definition
        self._checked.clear()
        self._generation += 1

    def rebase(self, at: BinlogPosition) -> list[Change]:
        """Start again at ``at`` after the binlog before it was purged: every table whose
        definition now differs from the history's last one gets a version just before
        ``at`` (kind ``rebase``, the old one in ``before``; a table gone: None), and the
        catalog follows the server from there."""
        conn = self.sql()
        now = load_tables(conn)
        mark = BinlogPosition(at.file_number, at.pos - 1, at.file)
        known = self.history.tables_at(mark)
        known.pop(("", ""), None)
        records = [Change(mark, "rebase", db, table, now.get((db, table)),
                          "-- the binlog before this position was purged; definitions re-read",
                          before=known.get((db, table)))
                   for db, table in sorted(set(known) | set(now))
                   if known.get((db, table)) != now.get((db, table))]
        self.history.record(records)
        self.catalog = None
        self._checked.clear()
        self._generation += 1
        self._load_catalog(conn)
        self.applied_to = max(self.applied_to, _key(mark))
        return records

    # -- per batch ---------------------------------------------------------------
    def observer(self, batch_start: BinlogPosition) -> Callable[[str, int, list[Event]], None]:
        """The scan callback for the micro-batch starting at ``batch_start``."""
        self._batch_start = batch_start
        return self.observe

    def observe(self, file: str, pos: int, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, QueryEvent):
                self._query(ev, file, pos)
            elif isinstance(ev, TableMapEvent):
                self._table_map(ev, file, pos)

    def _query(self, ev: QueryEvent, file: str, pos: int) -> None:
        if classify(ev.query) == "ignore":
            return
        self._generation += 1          # definitions in force may differ from here on
        here = (BinlogPosition.of(file, pos).file_number, pos)
        if here <= self.applied_to:
            return
        if self.trust_until is not None and here < self.trust_until:
            return
        at = BinlogPosition.of(file, pos)
        default_db = ev.schema or None
        try:
            changes = self.catalog.execute(ev.query, default_db)   # applied to the catalog
        except SchemaError as e:
            found = getattr(e, "tables", None)
            if found is None:
                found = targets(ev.query, default_db, self.catalog)
            if found is None:
                raise TableQuarantinedError(
                    f"DDL at {at} cannot be applied to the schema history and the tables it "
                    f"touches cannot be determined, so no table can be held back alone: "
                    f"{ev.query[:500]} ({e.message})",
                    hint="Restart from a position after this statement once you know it changed "
                    "no captured table, with source.schema_bootstrap: current.") from e
            for db, table in sorted(found):
                self.catalog.tables.pop((db, table), None)
                if self.include(db, table) and not self.history.is_quarantined(db, table):
                    self._quarantine(db, table, at, f"the DDL cannot be applied: {e.message}",
                                     ev.query)
            self.applied_to = here
            return
        records: list[Change] = []
        for ch in changes:
            if ch.kind == "rename" and ch.old is not None:
                records.append(Change(at, "rename", ch.old[0], ch.old[1], None, ev.query,
                                      before=ch.before))
            records.append(Change(at, ch.kind, ch.db, ch.table, ch.after, ev.query, ch.old,
                                  ch.before))
        self.history.record(records)
        self.applied_to = here
        for c in records:
            if self.include(c.db, c.table):
                log.info("schema history: %s %s.%s at %s", c.kind, c.db, c.table, at)
        renamed_in = [ch for ch in changes if ch.kind == "rename" and ch.old is not None
                      and self.include(ch.db, ch.table)]
        rekeyed = [c for c in records if rekeys(c) and self.include(c.db, c.table)]
        again = {c.key for c in rekeyed}
        filled = [ch for ch in changes if ch.kind == "alter" and ch.filled
                  and self.include(ch.db, ch.table) and (ch.db, ch.table) not in again]
        if renamed_in or rekeyed or filled:
            self._read_again(renamed_in, rekeyed, at, filled)

    def _read_again(self, renamed_in: list, rekeyed: list[Change], at: BinlogPosition,
                    filled: list = ()) -> None:
        """Tables the DDL at ``at`` leaves with rows no sink has under their names and
        keys, read again as one backfill, taken once the batch of the DDL is committed:
        tables renamed to a captured name (the cut-over of an online schema change:
        gh-ost's ``_t_gho``, pt-online-schema-change's ``_t_new``, becoming ``t``), whose
        rows were never captured under it (DESIGN.md decision 33); and tables whose key
        the DDL changed (``rekeys``: the decoder outputs a ``t`` there); and tables whose
        existing rows the DDL gave values no row event carries (``TableChange.filled``:
        an added column with a default, a column made NOT NULL)."""
        from mysqlcdc.capture.signals import request_snapshot, signal_folder

        names = [f"{ch.db}.{ch.table}" for ch in renamed_in]
        names += [n for n in (f"{c.db}.{c.table}" for c in rekeyed) if n not in names]
        names += [n for n in (f"{c.db}.{c.table}" for c in filled) if n not in names]
        why = []
        if renamed_in:
            why.append("renamed to a captured name: " + ", ".join(
                f"{ch.db}.{ch.table} (from {ch.old[0]}.{ch.old[1]})" for ch in renamed_in))
        if rekeyed:
            why.append("key changed (its rows have other key texts now): "
                       + ", ".join(f"{c.db}.{c.table}" for c in rekeyed))
        if filled:
            why.append("existing rows given values by the DDL: " + ", ".join(
                f"{c.db}.{c.table} ({', '.join(c.filled)})" for c in filled))
        said = "; ".join(why)
        if self.history.path is None:
            log.warning("at %s %s; their rows are not read again (there is no schema history "
                        "folder to queue a backfill in: run `mysqlcdc snapshot` for them)",
                        at, said)
            return
        log.warning("at %s %s; their rows are read again as a backfill", at, said)
        request_snapshot(signal_folder(str(self.history.path.parent)),
                         (at.file_number, at.pos),
                         f"{'rename' if renamed_in else 'rekey' if rekeyed else 'fill'}@{at}",
                         names)

    def _table_map(self, ev: TableMapEvent, file: str, pos: int) -> None:
        db, table = ev.schema, ev.table
        if not self.include(db, table) or self.history.is_quarantined(db, table) \
                or self.history.skipped(db, table):
            return
        at = BinlogPosition.of(file, pos)
        if self.trust_until is not None and (at.file_number, pos) < self.trust_until:
            definition = self.catalog.tables.get((db, table))
        else:
            definition = self.history.definition(db, table, at)
        memo = (ev.table_id, bytes(ev.column_types))
        if self._checked.get(memo) is definition and definition is not None:
            return
        if ev.column_names is not None:
            self._cross_check(ev, definition, at)
            self._checked[memo] = definition
            return
        why = table_map_problem(ev, definition)
        if why is not None:
            self._quarantine(db, table, at, why, None)
            return
        self._checked[memo] = definition

    def _cross_check(self, ev: TableMapEvent, definition, at: BinlogPosition) -> None:
        """Full metadata in the binlog wins; a history that disagrees is reported."""
        if definition is None:
            return
        if tuple(ev.column_names) != definition.column_names:
            log.warning("schema history for %s.%s at %s lists columns %s, the binlog's own "
                        "metadata %s; decoding with the binlog's", ev.schema, ev.table, at,
                        definition.column_names, ev.column_names)

    def _quarantine(self, db: str, table: str, at: BinlogPosition, reason: str,
                    ddl: str | None) -> None:
        self.quarantined(Quarantine(db, table, at, self._batch_start or at, reason, ddl))

    def quarantined(self, q: Quarantine) -> None:
        """Hold ``q``'s table back from its position (found here, or by a read task that
        checked the TABLE_MAPs of its range itself); a table held already stays as it is."""
        if self.history.is_quarantined(q.db, q.table):
            return
        db, table, at, reason, ddl = q.db, q.table, q.pos, q.reason, q.ddl
        self._generation += 1
        self.history.quarantine(q)
        self.catalog.tables.pop((db, table), None)
        err = TableQuarantinedError(f"{db}.{table} is quarantined at {at}: {reason}"
                                    + (f"; DDL: {ddl[:500]}" if ddl else ""))
        log.error("%s", err)


def _plain_create(sql: str) -> bool:
    """``CREATE TABLE`` without IF NOT EXISTS / OR REPLACE: the table did not exist before."""
    text = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S).strip().upper()
    return bool(re.match(r"CREATE\s+TABLE\s", text)) and "IF NOT EXISTS" not in text[:200]
