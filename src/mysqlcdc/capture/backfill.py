"""The snapshot phase of a stream, carried inside its offsets: the initial snapshot,
on-demand backfills while the stream goes on, and a new snapshot after a purge.

An offset is ``{"file", "pos"}`` (where the binlog stream stands) and, once a snapshot
ever ran, ``"snapshot"``::

    {"tables": [...],   # work not yet planned: "db.t" (initial snapshot) or a backfill
                        # request {"table", "where", "id", "kind": "backfill"}
     "after": [...],    # the first table's chunks continue after this chunk key
     "chunk": n,        # the next chunk number (the seq tells chunks read at one H apart)
     "plan": [...],     # this micro-batch's chunks: [table, lo, hi, chunk, extra]
     "signals": [f, p, r],  # the last signal (binlog order) taken into an offset
     "reset": {...},    # when_needed: this batch opens a new snapshot after a purge
     "done": k, "table_chunks": c}   # progress: tables finished, chunks of the first one

Spark's offset log is then the only record of progress: a batch replayed after a crash
reads the chunks its logged end offset lists (rows may differ: they are the state at
their new high watermark, equally valid), and a signal taken into an offset is never
taken again. The rules:

* initial snapshot (its tables are plain ``"db.t"`` entries): each batch plans the next
  chunks, the binlog waits at the snapshot's start ``S``; once every table is planned,
  streaming starts at ``S``;
* backfill: each batch streams its binlog range as usual and reads up to
  ``chunks_per_batch`` chunks beside it; signals found by the read tasks of committed
  batches (``capture.signals``) join the queue at the next batch;
* ``when_needed``: a stream whose start was purged opens a batch that moves the binlog
  position to the server's current one, records the tables' definitions there in the
  schema history, emits a ``t`` record per table (an ``s`` record first where the
  definition changed in the purged gap) and snapshots every table again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from mysqlcdc.capture.signals import forget_signals, parse_requests, read_signals, signal_folder
from mysqlcdc.capture.snapshot import (UNCHUNKED_SPAN, ChunkTask, SnapshotTable, decode_bound,
                                       encode_bound, probe_chunks, snapshot_seq,
                                       snapshot_table)
from mysqlcdc.envelope.model import ARROW_SCHEMA, OP_SCHEMA, OP_TRUNCATE
from mysqlcdc.errors import (BinlogPurgedError, MissingPrivilegeError, MysqlcdcError,
                             SnapshotRequestError)
from mysqlcdc.types import BinlogPosition

__all__ = ["SnapshotPhase", "ResetTask", "read_reset", "STATUS_FILE"]

log = logging.getLogger(__name__)

STATUS_FILE = "snapshot-status.json"
_KEYS = ("tables", "after", "chunk", "plan", "signals", "reset", "done", "table_chunks")


def _position(offset: dict) -> BinlogPosition:
    return BinlogPosition.of(offset["file"], int(offset["pos"]))


def _shape(d) -> list[tuple[str, str]]:
    """A table's columns as a chunk's rows carry them: names and base types."""
    return [(c.name, c.data_type) for c in d.columns if c.system is None]


def _base(offset: dict) -> dict:
    """The stream part of an offset, whatever else a planner put in it."""
    return {k: v for k, v in offset.items() if k != "snapshot"}


def _canonical(snap: dict) -> dict:
    """Stable key order (Spark compares offsets as JSON text) and no empty extras."""
    out = {"tables": list(snap.get("tables") or []), "after": snap.get("after"),
           "chunk": int(snap.get("chunk") or 0), "plan": list(snap.get("plan") or [])}
    for key in _KEYS[4:]:
        value = snap.get(key)
        if value:
            out[key] = value
    return out


def _entry(entry) -> tuple[str, str | None, str]:
    """(table, where, kind) of a pending entry."""
    if isinstance(entry, str):
        return entry, None, "snapshot"
    return entry["table"], entry.get("where"), entry.get("kind", "backfill")


def _own_request(entry) -> bool:
    """A backfill mysqlcdc queued itself (``SchemaKeeper._read_again``): a table renamed
    away or dropped again since (gh-ost's ``_t_del``) is passed over without an error."""
    return isinstance(entry, dict) and str(entry.get("id", "")).startswith(
        ("rename@", "rekey@", "fill@", "tables@", "failover@"))


@dataclass(frozen=True)
class ResetTask:
    """The records that open a new snapshot after a purge (a Spark read task)."""

    position: BinlogPosition          # S: where the stream goes on
    purged_from: str                  # the checkpoint's position, gone from the server
    chunk: int
    server_id: int
    changes: tuple = ()               # (db, table, before json | None, after json | None)
    tables: tuple = ()                # every table the records truncate, "db.t"


def read_reset(task: ResetTask) -> Iterator[pa.RecordBatch]:
    """``s`` records for tables whose definition changed in the purged gap, then a ``t``
    record per table, all at S and sorting before every snapshot row."""
    note = (f"-- mysqlcdc: snapshot again (snapshot.mode when_needed): the binlog from "
            f"{task.purged_from} to {task.position} was purged before it was read")
    rows: list[tuple] = [(OP_SCHEMA, db, t, b, a) for db, t, b, a in task.changes]
    rows += [(OP_TRUNCATE, *name.split(".", 1), None, None) for name in task.tables]
    if not rows:
        return
    ts = int(time.time() * 1000)
    cols: dict[str, list] = {f.name: [] for f in ARROW_SCHEMA}
    for i, (op, db, table, before, after) in enumerate(rows):
        values = {"op": op, "db": db, "table": table, "before": before, "after": after,
                  "key": None, "ts_ms": ts, "server_id": task.server_id, "gtid": None,
                  "txn_id": f"reset:{task.position}", "file": task.position.file,
                  "pos": task.position.pos, "row": i,
                  "seq": snapshot_seq(task.position, task.chunk, i), "query": note,
                  "moved_key": None}
        for name, value in values.items():
            cols[name].append(value)
    from decimal import Decimal

    cols["seq"] = [Decimal(v) for v in cols["seq"]]
    yield pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in ARROW_SCHEMA],
                                     schema=ARROW_SCHEMA)


@dataclass
class _Progress:
    began_table: dict = field(default_factory=dict)   # table -> when its chunks began
    estimates: dict = field(default_factory=dict)     # table -> estimated chunks


class SnapshotPhase:
    """The snapshot side of the stream reader's planning (one per query, driver-side).

    ``planner()`` gives the query's ``RangePlanner`` (its SQL connection, schema keeper);
    ``options`` are its ``SourceOptions``."""

    def __init__(self, options, planner: Callable[[], object]) -> None:
        self.options = options
        self.planner = planner
        self._progress = _Progress()
        self._waiting: tuple | None = None       # the backfill last said to wait
        folder = options.schema_history
        self._status = None if folder is None else Path(folder) / STATUS_FILE
        # the signal table's requests, and mysqlcdc's own (a table renamed into capture)
        self._signals = None if folder is None else signal_folder(folder)
        if options.signal_table is not None and folder is None:
            log.warning("signalTable is set but schemaHistory is not: the read tasks have "
                        "nowhere to hand signals to the driver, so signals are ignored")

    # -- the first offset -------------------------------------------------------------
    def initial(self, start: BinlogPosition, offset: dict | None = None) -> dict:
        """The first offset: ``offset`` (the stream's, by default ``start`` alone) with the
        initial snapshot's work when the mode asks for one."""
        offset = dict(offset or {"file": start.file, "pos": start.pos})
        if self.options.snapshot_mode == "never":
            return offset
        p = self.planner()
        # The schema history starts at S now: the snapshot takes a while, and a DDL made
        # meanwhile must be one the history sees, not one a later bootstrap refuses.
        p._ensure_history(start)
        tables = self._tables()
        self._check_readable(tables)
        if tables:
            offset["snapshot"] = _canonical({"tables": tables})
        return offset

    def _tables(self) -> list[str]:
        from mysqlcdc.schema.introspect import load_tables

        found = load_tables(self.planner()._sql(), self.options.tables.user)
        first = {name: i for i, name in enumerate(self.options.snapshot_first)}
        # the tables a sink's flatten references first (snapshotFirst), so that the rows
        # pointing at them find them read; then by name
        return sorted((f"{db}.{table}" for db, table in found),
                      key=lambda name: (first.get(name, len(first)), name))

    def _check_readable(self, tables: list[str]) -> None:
        """Every table must answer a SELECT before the snapshot starts (not hours in).
        information_schema hides a table the user may not read, so the tables the
        include patterns name literally are tried as well."""
        from mysqlcdc.protocol.connection import query

        conn = self.planner()._sql()
        named = [p for p in self.options.tables.include if not any(c in p for c in "*?[")]
        for name in sorted(set(tables) | {n for n in named if self.options.tables.user(
                *n.split(".", 1))}):
            db, table = name.split(".", 1)
            try:
                query(conn, f"SELECT 1 FROM `{db.replace('`', '``')}`."
                            f"`{table.replace('`', '``')}` LIMIT 0")
            except MissingPrivilegeError as exc:
                raise MissingPrivilegeError(
                    f"the capture user may not SELECT from {name}, which the snapshot must "
                    f"read ({exc.message})",
                    hint=f"GRANT SELECT ON `{db}`.`{table}` TO the capture user, or exclude "
                    "the table from source.tables.") from exc
            except MysqlcdcError as exc:
                if getattr(exc, "server_code", 0) not in (1146, 1049):   # not there (yet)
                    raise

    # -- planning ----------------------------------------------------------------------
    def held(self, start: dict) -> dict | None:
        """The next offset while the initial snapshot holds the binlog at its start
        (None: the stream moves). ``initial_only``: the start itself once done."""
        snap = start.get("snapshot")
        if snap is None:
            return None
        tables = snap.get("tables") or []
        if tables and _entry(tables[0])[2] == "snapshot":
            planned = self._plan(snap)
            self._report(planned, "initial")
            return {**_base(start), "snapshot": planned}
        if self.options.snapshot_mode == "initial_only":
            return start
        return None

    def after_stream(self, start: dict, end: dict, here: dict | None = None) -> dict:
        """``end`` (the stream's next offset) with the backfill state: signals of
        committed batches taken, and the next chunks planned beside the stream. ``here``:
        where ``start`` stands when it is a rule (resolved to where its tasks ended): the
        signals before it are those of committed batches."""
        snap = start.get("snapshot")
        taken = self._take_signals(here or start, snap or {})
        if snap is None and taken is None:
            return end
        snap = dict(snap or {})
        snap.pop("reset", None)
        if taken is not None:
            snap["tables"], snap["signals"] = taken
        if snap.get("tables"):
            snap = self._plan(snap, _position(end))
            self._report(snap, "backfill")
        else:
            snap["plan"] = []
            if start.get("snapshot", {}).get("plan"):
                self._report(snap, "backfill")
        return {**_base(end), "snapshot": _canonical(snap)}

    def _plan(self, snap: dict, stream_end: BinlogPosition | None = None) -> dict:
        """Probe the next chunks from ``snap``'s cursor; the cursor after them.
        ``stream_end``: where the stream's batch ends; a backfill of a table the server
        has already altered past it waits (``_ahead``)."""
        tables, after = list(snap.get("tables") or []), snap.get("after")
        chunk, done = int(snap.get("chunk") or 0), int(snap.get("done") or 0)
        table_chunks = int(snap.get("table_chunks") or 0)
        count = self.options.chunks_per_batch
        plan: list = []
        sql = self.planner()._sql()
        while tables and len(plan) < count:
            name, where, kind = _entry(tables[0])
            table = self._table(sql, name)
            if table is not None and kind != "snapshot" and stream_end is not None \
                    and self._ahead(sql, table, stream_end):
                break                          # planned again with the next batches
            pieces = None
            if table is not None:
                pieces = self._probe(sql, table, after, count - len(plan), where, kind, name)
            elif kind != "snapshot" and not _own_request(tables[0]):
                log.error("%s", SnapshotRequestError(f"the snapshot request for {name} cannot "
                                                     "run: the table does not exist"))
            if pieces is None:                 # gone, or a refused request: nothing to read
                tables.pop(0)
                after, table_chunks = None, 0
                continue
            pieces, finished = pieces
            rest_initial = any(_entry(e)[2] == "snapshot" for e in tables[1:])
            for i, piece in enumerate(pieces):
                extra: dict = {}
                if where:
                    extra["where"] = where
                if kind != "snapshot":
                    extra["kind"] = kind
                if piece.nulls:
                    extra["nulls"] = True
                if finished and i == len(pieces) - 1:
                    extra["last"] = "snapshot" if kind == "snapshot" and not rest_initial \
                        else "table"
                plan.append([name, encode_bound(piece.lo), encode_bound(piece.hi), chunk, extra])
                chunk += UNCHUNKED_SPAN if (piece.nulls or piece.whole) else 1
            table_chunks += len(pieces)
            if finished:
                tables.pop(0)
                after, table_chunks, done = None, 0, done + 1
                self._finished(name, kind)
            else:
                after = encode_bound(pieces[-1].hi)
        out = {**snap, "tables": tables, "after": after, "chunk": chunk, "plan": plan,
               "done": done, "table_chunks": table_chunks}
        return _canonical(out)

    def _ahead(self, sql, table: SnapshotTable, stream_end: BinlogPosition) -> bool:
        """Whether the server's table has columns the stream has not reached: a DDL
        logged after ``stream_end``. A chunk reads the table as it is now, and its rows
        sort after every change up to its read, but arrive in this batch, before the
        DDL's ``s`` record: a mirror would get columns it does not have yet (or values
        of a type it has not changed to). So the backfill waits until the stream has
        passed the DDL; a table the history does not know, and a difference that stays
        once the stream has caught up with the server, do not hold it."""
        from mysqlcdc.capture.server import current_position

        d = table.definition
        known = self.planner().history.definition(d.db, d.name, stream_end)
        if known is None or _shape(known) == _shape(d):
            return False
        if stream_end >= current_position(sql):
            return False
        if self._waiting != (d.db, d.name, stream_end.file):
            self._waiting = (d.db, d.name, stream_end.file)
            log.info("backfill of %s.%s waits for the stream to reach the DDL the server ran "
                     "on it after %s", d.db, d.name, stream_end)
        return True

    def _table(self, sql, name: str) -> SnapshotTable | None:
        from mysqlcdc.schema.introspect import load_keys, load_table

        db, table = name.split(".", 1)
        definition = load_table(sql, db, table)
        if definition is None:
            log.warning("table %s is gone; its snapshot is skipped", name)
            return None
        return snapshot_table(definition, load_keys(sql, db, table),
                              self.options.chunk_key(name))

    def _probe(self, sql, table: SnapshotTable, after, count: int, where: str | None,
               kind: str, name: str):
        """Chunks of the table; for a backfill request a refusal is logged and the request
        dropped (the running stream goes on), for the initial snapshot it stops the query."""
        try:
            return probe_chunks(sql, table, decode_bound(after), self.options.snapshot_chunk_rows,
                                count, where)
        except MysqlcdcError as exc:
            if kind == "snapshot" or exc.transient:
                raise
            err = exc if isinstance(exc, SnapshotRequestError) else SnapshotRequestError(
                f"the snapshot request for {name}{'' if not where else f' WHERE {where}'} "
                f"cannot run: [{exc.code}] {exc.message}")
            log.error("%s", err)
            return None

    def _finished(self, name: str, kind: str) -> None:
        log.info("%s of %s: every chunk planned", "snapshot" if kind == "snapshot"
                 else "backfill", name)

    # -- signals -------------------------------------------------------------------------
    def _take_signals(self, start: dict, snap: dict) -> tuple[list, list] | None:
        """The pending entries after the signals of committed batches, and the last signal
        taken (None: no new signal)."""
        if self._signals is None:
            return None
        pos = _position(start)
        # the start offset is logged: the signals it took are never needed again
        forget_signals(self._signals, snap.get("signals"))
        found = read_signals(self._signals, snap.get("signals"), (pos.file_number, pos.pos, 0))
        if not found:
            return None
        tables = list(snap.get("tables") or [])
        for signal in found:
            requests, refused = parse_requests(signal, self.options.pipeline)
            if refused:
                log.error("%s", SnapshotRequestError(f"signal {signal.id!r} is ignored: {refused}"))
                continue
            for r in requests:
                tables = self._apply(tables, r, started=snap.get("after") is not None)
        return tables, list(found[-1].key)

    def _apply(self, tables: list, request, started: bool = False) -> list:
        """``tables`` (the pending entries) with ``request`` applied. ``started``: the
        first entry's table is being read (a cursor is set)."""
        if request.action == "stop":
            kept = [e for e in tables if _entry(e)[2] == "snapshot"
                    or (request.table is not None and _entry(e)[0] != request.table)]
            log.warning("signal %s: %d pending backfill(s) dropped", request.id,
                        len(tables) - len(kept))
            return kept
        db, _, table = (request.table or "").partition(".")
        if not table or not self.options.tables.user(db, table):
            log.error("%s", SnapshotRequestError(
                f"signal {request.id!r} asks for a snapshot of {request.table!r}, which this "
                "pipeline does not capture"))
            return tables
        if request.where is None:
            waiting = tables[1:] if started else tables
            if any(_entry(e) == (request.table, None, "backfill") for e in waiting):
                # a read of the whole table not begun yet reads it as the server has it
                # when it begins, after this request's DDL: one read serves both
                log.info("signal %s: a backfill of %s not begun yet is queued already and "
                         "serves this one too", request.id, request.table)
                return tables
        log.warning("signal %s: backfill of %s%s queued", request.id, request.table,
                    f" WHERE {request.where}" if request.where else "")
        entry = {"table": request.table, "where": request.where, "id": request.id,
                 "kind": "backfill"}
        return [*tables, {k: v for k, v in entry.items() if v is not None}]

    # -- when_needed -----------------------------------------------------------------
    def purged(self, start: dict, exc: BinlogPurgedError) -> dict:
        """The offset that snapshots again after the stream's start was purged."""
        if self.options.snapshot_mode != "when_needed":
            raise exc
        p = self.planner()
        now = p.current()
        changes = p.keeper.rebase(now)
        tables = self._tables()
        snap = dict(start.get("snapshot") or {})
        chunk = int(snap.get("chunk") or 0)
        log.warning("the binlog at %s was purged before it was read: snapshotting %d table(s) "
                    "again from %s (snapshot.mode when_needed)", _position(start), len(tables),
                    now)
        reset = {"from": str(_position(start)), "chunk": chunk,
                 "changed": len(changes)}
        fresh = {"tables": tables, "chunk": chunk + UNCHUNKED_SPAN, "reset": reset,
                 "signals": snap.get("signals")}
        planned = self._plan(fresh) if tables else _canonical(fresh)
        out: dict = {"file": now.file, "pos": now.pos}
        if start.get("epoch"):                 # the seq epoch survives a new snapshot
            out["epoch"] = start["epoch"]
        return {**out, "snapshot": planned}

    def streams(self, end: dict) -> bool:
        """False for the batch that opens a new snapshot: its range was purged."""
        return "reset" not in (end.get("snapshot") or {})

    # -- read tasks ----------------------------------------------------------------------
    def tasks(self, end: dict) -> list:
        """The chunk (and reset) tasks of the batch ending at ``end``."""
        snap = end.get("snapshot") or {}
        out: list = []
        if snap.get("reset"):
            out.append(self._reset_task(end, snap["reset"]))
        plan = snap.get("plan") or []
        if plan:
            out.extend(self._chunk_tasks(plan))
        return out

    def _reset_task(self, end: dict, reset: dict) -> ResetTask:
        p = self.planner()
        at = _position(end)
        mark = BinlogPosition(at.file_number, at.pos - 1, at.file)
        changes, names = [], set()
        for key, versions in p.history.changes.items():
            for c in versions:
                if c.kind == "rebase" and c.pos == mark and self.options.tables.user(*key):
                    changes.append((c.db, c.table,
                                    None if c.before is None else json.dumps(c.before.to_json()),
                                    None if c.definition is None
                                    else json.dumps(c.definition.to_json())))
        for state in (p.history.tables_at(BinlogPosition.parse(reset["from"])),
                      p.history.tables_at(mark)):
            names.update(f"{db}.{t}" for db, t in state if self.options.tables.user(db, t))
        from mysqlcdc.protocol.connection import query

        server_id = int(query(p._sql(), "SELECT @@server_id")[0][0])
        return ResetTask(at, reset["from"], int(reset["chunk"]), server_id,
                         tuple(sorted(changes)), tuple(sorted(names)))

    def _chunk_tasks(self, plan: list) -> list[ChunkTask]:
        o = self.options
        sql = self.planner()._sql()
        tables: dict[str, SnapshotTable | None] = {}
        tasks = []
        for entry in plan:
            name, lo, hi, chunk = entry[:4]
            extra = entry[4] if len(entry) > 4 else {}
            if name not in tables:
                tables[name] = self._table(sql, name)
            table = tables[name]
            if table is None:
                continue
            tasks.append(ChunkTask(
                settings=o.settings, server_id=0, table=table, lo=decode_bound(lo),
                hi=decode_bound(hi), chunk=int(chunk), retry=o.retry, batch_rows=o.batch_rows,
                nulls=bool(extra.get("nulls")), where=extra.get("where"),
                kind=extra.get("kind", "snapshot"), last=extra.get("last", ""),
                timeout_s=o.snapshot_timeout_s, rows_hint=o.snapshot_chunk_rows))
        return tasks

    # -- progress ------------------------------------------------------------------------
    def _report(self, snap: dict, phase: str) -> None:
        """``snapshot-status.json`` beside the schema history, for ``mysqlcdc run`` and
        ``mysqlcdc status`` (best effort): the table being read, its chunks done (those of
        committed batches) against the server's row estimate, and an ETA."""
        if self._status is None:
            return
        tables = [_entry(e) for e in snap.get("tables") or []]
        plan = snap.get("plan") or []
        current = plan[-1][0] if plan else (tables[0][0] if tables else None)
        now = time.time()
        status = {"phase": phase if (tables or plan) else "idle", "table": current,
                  "tables_done": int(snap.get("done") or 0), "tables_left": len(tables),
                  "updated": now}
        if current is not None:
            in_batch = sum(1 for e in plan if e[0] == current)
            planned = int(snap.get("table_chunks") or 0) or in_batch
            done = max(0, planned - in_batch)
            since = self._progress.began_table.setdefault(current, now)
            estimate = self._estimate(current)
            eta = None
            if estimate and done and now > since:
                eta = round((now - since) / done * max(0, estimate - done), 1)
            status.update({"chunks_done": done, "chunks_estimate": estimate, "eta_s": eta})
        try:
            tmp = self._status.with_suffix(".tmp")
            tmp.write_text(json.dumps(status))
            os.replace(tmp, self._status)
        except OSError:
            pass

    def _estimate(self, name: str) -> int | None:
        """Chunks a table will take, from the server's row estimate (cached)."""
        cache = self._progress.estimates
        if name not in cache:
            from mysqlcdc.protocol.connection import query

            db, table = name.split(".", 1)
            try:
                rows = query(self.planner()._sql(),
                             "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                             f"TABLE_SCHEMA = '{_esc(db)}' AND TABLE_NAME = '{_esc(table)}'")
                n = int(rows[0][0] or 0) if rows else 0
            except MysqlcdcError:
                n = 0
            cache[name] = max(1, -(-n // self.options.snapshot_chunk_rows)) if n else None
        return cache[name]


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
