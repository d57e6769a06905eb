"""The mirror's apply loop: one micro-batch of envelope rows -> one target transaction.

Per batch (``apply_batch``), on the driver (``foreachBatch``):

1. Rows are taken in ``seq`` order. Per table, row changes are reduced to the last
   change per ``key`` (``c``/``u``/``r``: upsert of ``after``; ``d``: delete of the
   key), so the target sees at most one write per key. A primary-key change arrives
   as a ``d`` of the old key and a ``c`` of the new one (docs/ENVELOPE.md), which
   this reduction applies correctly with no special case.
2. A ``t`` (truncate) or ``s`` (schema change) record first flushes the table's
   pending changes, then is applied: truncate empties the table; ``s`` compares the
   definitions in ``before``/``after`` (create, drop, rename of the table — the new
   name's record has a ``before`` naming the old table —, added, dropped, renamed and
   retyped columns, a new primary key).
3. A table first written by rows is created from the definition in force at that
   row's position, read from the sink's schema history (``MirrorSettings.history_dir``).
4. Everything, including the ``mysqlcdc_offsets`` row (pipeline, batch id, end
   position), is one target transaction. A batch whose id the ledger already holds
   is skipped, so a replayed batch changes nothing.

A change the target refuses (a type it cannot hold, a retype it cannot cast) rolls
that table back to its savepoint and records it in ``mysqlcdc_mirror_stopped``
(:class:`MirrorTableStoppedError`); later batches skip the table; the others flow.
Transient target failures (server down, connection dropped) retry the whole batch
with exponential backoff on a new connection; wrong credentials fail at once.

History mode (``history=True``, ``mode: history``): every change of a key is kept
instead of the last one, and becomes a version of the row (:mod:`.history`).
Targets without one transaction for a whole batch (MySQL, whose DDL commits, and
Delta, which commits per table) commit in steps with a ledger mark around each DDL.

Memory: the batch's rows (bounded by ``source.max_events_per_batch``; a row change's
``before`` image stays in Spark) and one dict per table of the reduced changes, kept
as the envelope's JSON texts until a target converts them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Iterable, Protocol

from mysqlcdc.envelope.model import REKEY_NOTE
from mysqlcdc.errors import MirrorAuthError, MirrorTableStoppedError, MirrorUnavailableError
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.history import Change, drop_late, history_def, scd2, version_row
from mysqlcdc.types import BinlogPosition

__all__ = ["apply_batch", "Target", "TableChanges", "ColumnChange", "diff_columns",
           "Definitions", "BatchResult", "run_with_retries", "foreach_batch", "ledger_key"]

log = logging.getLogger(__name__)

Key = tuple[str, str]
ROW_OPS = ("c", "u", "r", "d")


class RetryableTargetError(Exception):
    """Raised by targets for a failure worth retrying on a new connection."""


class TargetAuthError(Exception):
    """Raised by targets when the credentials are refused."""


class TableRefused(Exception):
    """Raised by targets when one table's change cannot be applied (stops that table);
    ``code``: the server's error number, where it gave one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ColumnChange:
    kind: str                      # add | drop | rename | retype
    column: ColumnDef | None = None
    old_name: str | None = None


def diff_columns(before: TableDef, after: TableDef) -> list[ColumnChange]:
    """Column changes turning ``before`` into ``after`` (names compared exactly).

    A column missing from ``after`` and a new one at the same ordinal with the same
    ``column_type`` count as a rename (ALTER ... RENAME/CHANGE COLUMN); otherwise drop + add.
    """
    old = {c.name: c for c in before.columns}
    new = {c.name: c for c in after.columns}
    gone = [c for c in before.columns if c.name not in new]
    added = [c for c in after.columns if c.name not in old]
    out: list[ColumnChange] = []
    old_pos = {c.name: i for i, c in enumerate(before.columns)}
    new_pos = {c.name: i for i, c in enumerate(after.columns)}
    for g in list(gone):
        for a in added:
            if old_pos[g.name] == new_pos[a.name] and _same_type(g, a):
                out.append(ColumnChange("rename", a, g.name))
                gone.remove(g)
                added.remove(a)
                break
    out += [ColumnChange("drop", None, g.name) for g in gone]
    for name, col in new.items():
        if name in old and not _same_type(old[name], col):
            out.append(ColumnChange("retype", col, name))
    out += [ColumnChange("add", a) for a in added]
    return out


def _same_type(a: ColumnDef, b: ColumnDef) -> bool:
    return ((a.column_type or a.data_type), a.unsigned, a.charset == "binary") == \
        ((b.column_type or b.data_type), b.unsigned, b.charset == "binary")


class SqlSavepoints:
    """``savepoint``/``rollback_savepoint``/``release_savepoint`` of writer.Target for a
    SQL target: nested savepoints ``mirror_<depth>``, each statement run by the target's
    ``_x``."""

    _sp = 0

    def savepoint(self) -> None:
        self._sp += 1
        self._x(f"SAVEPOINT mirror_{self._sp}")

    def rollback_savepoint(self) -> None:
        self._x(f"ROLLBACK TO SAVEPOINT mirror_{self._sp}")
        self._x(f"RELEASE SAVEPOINT mirror_{self._sp}")
        self._sp -= 1

    def release_savepoint(self) -> None:
        self._x(f"RELEASE SAVEPOINT mirror_{self._sp}")
        self._sp -= 1


class Target(Protocol):
    """What a mirror target implements (see postgresql.py). Every method runs inside
    the batch transaction opened by :meth:`begin`."""

    def connect(self) -> None: ...
    def close(self) -> None: ...
    def begin(self, pipeline: str) -> tuple[int | None, set[Key]]: ...
    def table_exists(self, db: str, table: str) -> bool: ...
    def create_table(self, definition: TableDef) -> None: ...
    def drop_table(self, db: str, table: str) -> None: ...
    def rename_table(self, old: Key, new: Key) -> None: ...
    def alter_table(self, before: TableDef, after: TableDef, changes: list[ColumnChange]) -> None: ...
    def truncate(self, db: str, table: str) -> None: ...
    def upsert(self, definition: TableDef, rows: list[dict]) -> None: ...
    def delete(self, definition: TableDef, keys: list[dict]) -> None: ...
    def savepoint(self) -> None: ...
    def rollback_savepoint(self) -> None: ...
    def release_savepoint(self) -> None: ...
    def stop_table(self, pipeline: str, db: str, table: str, code: str, message: str,
                   seq: str) -> None: ...
    def commit(self, pipeline: str, batch_id: int, position: str, seq: str) -> None: ...
    def rollback(self) -> None: ...
    def read_position(self, pipeline: str) -> dict: ...
    # history mode (``mode: history``, see history.py): versions are upserts into the history
    # table; ``close_versions(definition, closes)`` ends current versions and
    # ``close_all(db, table, ts_ms, seq)`` replaces truncate.
    # Targets whose DDL commits implicitly set ``transactional_ddl = False`` and add
    # ``mark(pipeline, batch_id, seq)`` and ``partial(pipeline) -> (batch_id, seq) | None``.
    # Optional: ``start_batch(batch_id, position)`` after begin; ``at(seq)`` before each
    # table action (the step it is); ``write_changes(definition, changes, history=...)``
    # to take a flush's changes unconverted (the Delta target).


class Definitions:
    """Table definitions at a binlog position, from the sink's schema history folder,
    plus the ``s`` records of the batches seen so far (which carry definitions too)."""

    def __init__(self, history_dir: str | None,
                 fallback: Callable[[str, str], TableDef | None] | None = None) -> None:
        self.history = SchemaHistory(history_dir) if history_dir else None
        self.fallback = fallback
        self.latest: dict[Key, TableDef] = {}

    def refresh(self) -> None:
        if self.history is not None:
            self.history.reload()

    def at(self, db: str, table: str, file: str, pos: int) -> TableDef | None:
        if self.history is not None:
            found = self.history.definition(db, table, BinlogPosition.of(file, pos))
            if found is not None:
                return found
        if (db, table) in self.latest:
            return self.latest[(db, table)]
        return self.fallback(db, table) if self.fallback else None


@dataclass
class TableChanges:
    """Row changes of one table since its last flush: the last change per key (current
    mode) or every change (``every``, history mode), as the envelope's texts."""

    definition_at: tuple[str, int] | None = None     # (file, pos) of the first row
    last: dict[str, Change] = field(default_factory=dict)
    every: list[Change] | None = None
    last_seq: Decimal | None = None

    def add(self, change: Change, file: str, pos: int) -> None:
        if self.definition_at is None:
            self.definition_at = (file, pos)
        if self.every is not None:
            self.every.append(change)
        else:
            self.last[change.key] = change     # changes() orders them by seq again
        self.last_seq = change.seq

    def changes(self) -> list[Change]:
        """The reduced changes (current mode) or all of them (history mode), seq order."""
        if self.every is not None:
            return self.every
        return sorted(self.last.values(), key=lambda c: c.seq)

    def upserts(self) -> list[dict]:
        return [json.loads(c.after) for c in self.last.values() if c.op != "d"]

    def deletes(self, pk: tuple[str, ...]) -> list[dict]:
        keys = [json.loads(c.key) for c in self.last.values() if c.op == "d"]
        return [{n: k.get(n) for n in pk} for k in keys]


@dataclass
class BatchResult:
    skipped: bool = False
    rows: int = 0
    stopped: list[Key] = field(default_factory=list)


def apply_batch(target: Target, rows: Iterable[dict], *, batch_id: int, pipeline: str,
                definitions: Definitions, end_position: str | None = None,
                keep_on_create: bool = False, history: bool = False) -> BatchResult:
    """Apply one batch of envelope rows (dicts with op, db, table, before, after, key,
    file, pos, seq, ts_ms) to ``target`` in one transaction; see the module docstring.

    ``end_position``: the batch's end offset (``file:pos``, a transaction boundary) to
    record in the ledger; default the position of the batch's last change.
    ``keep_on_create``: a created table whose target table exists keeps it (and its rows)
    instead of replacing it (append-only changelog tables).
    ``history``: keep every version of every row (``mysqlcdc.sinks.mirror.history``)."""
    ordered = sorted(rows, key=lambda r: Decimal(r["seq"]))
    result = BatchResult()
    committed, stopped = target.begin(pipeline)
    if committed is not None and committed >= batch_id:
        target.rollback()
        log.info("mirror: batch %d already committed (ledger at %d); skipped", batch_id, committed)
        result.skipped = True
        return result
    last_row = ordered[-1] if ordered else None
    position = end_position or (f"{last_row['file']}:{last_row['pos']}" if last_row else "")
    if hasattr(target, "start_batch"):
        target.start_batch(batch_id, position)
    resume_after = None
    if not getattr(target, "transactional_ddl", True):
        mark = target.partial(pipeline)
        if mark is not None and mark[0] == batch_id:
            resume_after = Decimal(mark[1])        # a replay of a batch cut by its DDL
            ordered = [r for r in ordered if Decimal(r["seq"]) > resume_after]
    definitions.refresh()
    pending: dict[Key, TableChanges] = {}
    known: dict[Key, TableDef] = {}
    shape = _history_shape if history else (lambda d: d)

    def stop(key: Key, err: Exception, seq) -> None:
        target.rollback_savepoint()
        stop_unguarded(key, err, seq)

    transactional = getattr(target, "transactional_ddl", True)

    def guarded(key: Key, seq, action: Callable[[], None], *, ddl: bool = False) -> None:
        if hasattr(target, "at"):
            target.at(Decimal(seq))                # the step a commit of this action records
        if ddl and not transactional:
            # DDL commits implicitly here: first everything before it, with a ledger mark
            # saying how far this batch got, so a replay resumes after it (see begin()).
            for other in list(pending):
                flush(other, seq)
            target.mark(pipeline, batch_id, str(Decimal(seq) - 1))
            try:
                action()
            except TableRefused as err:
                target.rollback()
                stop_unguarded(key, err, seq)
            target.mark(pipeline, batch_id, str(seq))
            return
        target.savepoint()
        try:
            action()
        except TableRefused as err:
            stop(key, err, seq)
        else:
            target.release_savepoint()

    def stop_unguarded(key: Key, err: Exception, seq) -> None:
        message = f"{key[0]}.{key[1]}: {err}"
        target.stop_table(pipeline, key[0], key[1], MirrorTableStoppedError.code, message, str(seq))
        stopped.add(key)
        result.stopped.append(key)
        pending.pop(key, None)
        log.error("%s", MirrorTableStoppedError(message, db=key[0], table=key[1],
                                                hint=getattr(target, "stopped_hint", None)))

    def definition_for(key: Key, file: str, pos: int) -> TableDef:
        if key in known:
            return known[key]
        found = definitions.at(key[0], key[1], file, pos)
        if found is None:
            raise TableRefused("no definition of the table in the schema history")
        if not found.primary_key:
            raise TableRefused("the table has no primary key; the mirror needs one")
        if not target.table_exists(*key):
            target.create_table(shape(found))
        known[key] = found
        return found

    def flush(key: Key, seq) -> None:
        changes = pending.pop(key, None)
        if not changes or changes.last_seq is None:
            return

        def write() -> None:
            definition = definition_for(key, *changes.definition_at)
            write_rows(target, shape(definition), changes, history)
        if not transactional and key not in known:
            # CREATE TABLE commits implicitly: make the table outside any savepoint. Writes
            # committed early by it are safe to repeat on replay (last value per key).
            try:
                definition_for(key, *changes.definition_at)
            except TableRefused as err:
                stop_unguarded(key, err, seq)
                return
        guarded(key, seq, write)

    def schema_change(key: Key, rec: dict) -> None:
        before = _def(rec["before"])
        after = _def(rec["after"])

        def run() -> None:
            if after is None:                      # dropped
                if target.table_exists(*key):
                    target.drop_table(*key)
                known.pop(key, None)
                definitions.latest.pop(key, None)
                return
            definitions.latest[key] = after
            if before is None:                     # created
                if not after.primary_key:
                    raise TableRefused("the table has no primary key; the mirror needs one")
                if target.table_exists(*key):
                    if keep_on_create:
                        known[key] = after
                        return
                    target.drop_table(*key)
                target.create_table(shape(after))
                known[key] = after
                return
            old_key = (before.db, before.name)
            if old_key != key:                     # renamed here from old_key
                known.pop(old_key, None)
                definitions.latest.pop(old_key, None)
                if not target.table_exists(*old_key):
                    known.pop(key, None)
                    return
                if target.table_exists(*key):
                    target.drop_table(*key)
                target.rename_table(old_key, key)
            elif not target.table_exists(*key):    # never written yet: created when rows come
                known.pop(key, None)
                return
            if not after.primary_key:
                raise TableRefused("the primary key was dropped; the mirror needs one")
            changes = diff_columns(before, after)
            if changes or before.primary_key != after.primary_key:
                target.alter_table(shape(before), shape(after), changes)
            known[key] = after
        guarded(key, rec["seq"], run, ddl=True)

    def truncate(key: Key, rec: dict) -> None:
        if not target.table_exists(*key):
            return
        if history:                                # the versions stay, none is current
            target.close_all(key[0], key[1], rec.get("ts_ms"), Decimal(rec["seq"]))
        else:
            target.truncate(*key)

    # A rename gives, at one position, a record for the old name (after null) and one for
    # the new name whose ``before`` names the old table: the old name's record is no drop.
    renamed_away: set[tuple[str, int, str, str]] = set()
    for r in ordered:
        if r["op"] == "s" and r["before"] is not None and r["after"] is not None:
            b = json.loads(r["before"])
            if (b["db"], b["table"]) != (r["db"], r["table"]):
                renamed_away.add((r["file"], r["pos"], b["db"], b["table"]))

    last = None
    for r in ordered:
        key = (r["db"], r["table"])
        last = r
        op = r["op"]
        if op in ROW_OPS:
            if key in stopped:
                continue
            if op != "d" and not _has_key_columns(r["after"], r["key"]):
                stop_unguarded(key, TableRefused(
                    f"the row image at {r['file']}:{r['pos']} lacks its key columns (written "
                    f"with binlog_row_image MINIMAL): a mirror needs whole rows; set it to "
                    f"FULL, then snapshot the table again"), r["seq"])
                continue
            result.rows += 1
            tc = pending.get(key)
            if tc is None:
                tc = pending[key] = TableChanges(every=[] if history else None)
            seq = r["seq"]
            tc.add(Change(op, r["after"] if op != "d" else None, r["key"],
                          seq if isinstance(seq, Decimal) else Decimal(seq), r.get("ts_ms")),
                   r["file"], r["pos"])
        elif op == "t":
            if key in stopped or (r.get("query") or "").startswith(REKEY_NOTE):
                continue       # a key change: the target's rows follow the new key already
            if not history:
                pending.pop(key, None)           # changes before a truncate do not matter
            else:
                flush(key, r["seq"])             # they are versions: kept, then closed
            guarded(key, r["seq"], lambda k=key, rec=r: truncate(k, rec))
        elif op == "s":
            if r["after"] is None and (r["file"], r["pos"], *key) in renamed_away:
                flush(key, r["seq"])             # its rows land before the rename
                continue
            before = _def(r["before"])
            old_key = (before.db, before.name) if before is not None else key
            if key in stopped or old_key in stopped:
                if old_key in stopped and key not in stopped:   # stays stopped when renamed
                    stopped.add(key)
                    target.stop_table(pipeline, key[0], key[1], MirrorTableStoppedError.code,
                                      f"renamed from the stopped table {old_key[0]}.{old_key[1]}",
                                      str(r["seq"]))
                continue
            flush(key, r["seq"])
            schema_change(key, r)
    for key in list(pending):
        flush(key, last["seq"])
    target.commit(pipeline, batch_id, position, str(last["seq"]) if last else "")
    return result


def write_rows(target: Target, definition: TableDef, changes: TableChanges,
               history: bool) -> None:
    """One table's changes since its last flush, written as the target takes them."""
    if hasattr(target, "write_changes"):            # the target reduces and converts itself
        target.write_changes(definition, changes.changes(), history=history)
    elif history:
        every = changes.changes()
        every = drop_late(every, target.current_starts(definition, {c.key for c in every}))
        closes, versions = scd2(every)
        if closes:
            target.close_versions(definition, closes)
        if versions:                       # keyed by (key, valid_from_seq): a replay rewrites
            target.upsert(definition, [version_row(v) for v in versions])
    else:
        # deletes first: a key deleted then re-inserted in the batch keeps only its upsert
        deletes = changes.deletes(definition.primary_key)
        upserts = changes.upserts()
        if deletes:
            target.delete(definition, deletes)
        if upserts:
            target.upsert(definition, upserts)


def key_index_name(table: str, names: tuple[str, ...]) -> str:
    """The name of a changelog table's index on the source key ``names`` (unique per key,
    short enough for PostgreSQL's 63 bytes and MySQL's 64 characters)."""
    import hashlib

    digest = hashlib.sha1("\0".join(names).encode()).hexdigest()[:10]
    return f"{table[:40]}_key_{digest}"


def _last_by_key(items: list[tuple], query, values: int, part: int) -> dict[tuple, tuple]:
    """The last row of each bound key of ``items``, looked up ``part`` keys at a time with
    ``query(keys)`` (rows of the key columns then ``values`` more, in order): key ->
    those values."""
    last: dict[tuple, tuple] = {}
    for start in range(0, len(items), part):
        for row in query(items[start:start + part]):
            last[tuple(row[:-values])] = tuple(row[-values:])
    return last


def current_starts_of(d: TableDef, keys: set[str], bind, query, *,
                      part: int = 500) -> dict[str, Decimal]:
    """``current_starts``' common part: for each key text of ``keys`` whose history table
    ``d`` has a current version, that version's ``valid_from_seq``. ``query(pk, bound
    keys)`` returns rows of the key columns and ``valid_from_seq`` of current versions."""
    cols = {c.name: c for c in d.columns}
    pk = [n for n in d.primary_key if n != "valid_from_seq"]
    by_bound = {tuple(bind(cols[n], json.loads(t).get(n)) for n in pk): t for t in keys}
    found = _last_by_key(list(by_bound), lambda part_: query(pk, part_), 1, part)
    return {by_bound[k]: Decimal(v[0]) for k, v in found.items() if k in by_bound}


def last_rows_of(keys: list[dict], names: tuple[str, ...], bind, query, *,
                 part: int = 500) -> list[tuple[int, Decimal] | None]:
    """``last_rows``' common part: ``keys`` bound with ``bind(column, value)``, looked up
    ``part`` at a time with ``query(bound keys)`` (rows of the key columns, ``dml_type``
    and ``gsn`` of the counted rows, ``dml_type`` not 0, in ``gsn`` order). For each key
    its last counted row's ``(dml_type, gsn)``, or None when the table counts none."""
    bound = [tuple(bind(n, key.get(n)) for n in names) for key in keys]
    found = _last_by_key(list(dict.fromkeys(bound)), query, 2, part)
    return [None if k not in found else (int(found[k][0]), Decimal(found[k][1]))
            for k in bound]


def _has_key_columns(after: str | None, key: str | None) -> bool:
    """Whether the ``after`` image names every column of ``key`` (both JSON objects). A
    MINIMAL row image of an update has only the columns the statement set. Quoted names
    are searched in the text: inside a JSON string a quote is escaped, so ``"name":``
    only occurs as an object's key."""
    if after is None or key is None:
        return after is not None
    names = json.loads(key)
    if all(json.dumps(n, ensure_ascii=False) + ":" in after for n in names):
        return True
    image = json.loads(after)                  # another spelling of a name, or missing
    return all(n in image for n in names)


def _history_shape(d: TableDef) -> TableDef:
    try:
        return history_def(d)
    except ValueError as err:
        raise TableRefused(str(err)) from None


def _def(text) -> TableDef | None:
    return None if text is None else TableDef.from_json(json.loads(text))


def run_with_retries(make_target: Callable[[], Target], work: Callable[[Target], BatchResult],
                     *, attempts: int, initial_delay_s: float, max_delay_s: float,
                     what: str = "mirror target", sleep=time.sleep,
                     labels: tuple[str, str] = ("", "mirror"),
                     hint: str | None = None) -> BatchResult:
    """Run ``work`` on a fresh connection; retry transient failures with backoff.
    ``labels`` (pipeline, sink) name the retries and failures in ``mysqlcdc.stats``;
    ``hint``: what the final MIRROR_TARGET_UNAVAILABLE tells to do (default: start the
    server)."""
    from mysqlcdc import stats

    delay = initial_delay_s
    for attempt in range(1, attempts + 1):
        target = make_target()
        try:
            target.connect()
            return work(target)
        except TargetAuthError as err:
            raise MirrorAuthError(f"{what} refused the credentials: {err}") from None
        except RetryableTargetError as err:
            stats.count("sink_errors" if attempt == attempts else "sink_retries", *labels)
            if attempt == attempts:
                raise MirrorUnavailableError(
                    f"{what} unavailable after {attempts} attempts: {err}", hint=hint) from None
            log.warning("mirror: %s failed (attempt %d/%d): %s; retrying in %.1fs",
                        what, attempt, attempts, err, delay)
            sleep(delay)
            delay = min(delay * 2, max_delay_s)
        finally:
            try:
                target.close()
            except Exception:   # noqa: BLE001 - the connection may be gone already
                pass
    raise AssertionError("unreachable")


_COLUMNS = ("op", "db", "table", "before", "after", "key", "file", "pos", "seq", "txn_id",
            "server_id", "ts_ms", "query")


def _collect(df, keep_before: bool):
    """The batch's rows as dicts in ``seq`` order. Without ``keep_before`` a row change's
    ``before`` image (half an update's bytes) is left in Spark: only ``s`` records need it.
    A ``t``'s ``query`` tells a truncate from a key change (``REKEY_NOTE``), an ``r``'s a
    snapshot's read from a backfill's."""
    cols = [f"`{c}`" for c in _COLUMNS]
    cols[-1] = "CASE WHEN op IN ('t', 'r') THEN `query` END AS `query`"
    if not keep_before:
        cols[3] = "CASE WHEN op = 's' THEN `before` END AS `before`"
    return df.selectExpr(*cols).toArrow().sort_by("seq").to_pylist()


def ledger_key(name: str, checkpoint: str | None) -> str:
    """A sink's row in the target's ledger: its name and the Spark checkpoint's query id,
    so a pipeline started again from a NEW checkpoint (whose batch ids begin at 0 again)
    is not taken for a replay of the batches an earlier checkpoint committed."""
    from mysqlcdc.spark.checkpoint import query_id

    found = query_id(checkpoint)
    return f"{name}@{found}" if found else name


def foreach_batch(settings, make_target: Callable[[], Target], checkpoint: str | None = None,
                  *, definitions: Definitions | None = None,
                  transform: Callable[[list[dict], Callable], list[dict]] | None = None,
                  ledger_name: str | None = None, keep_on_create: bool = False):
    """The function ``foreachBatch`` calls: collect the batch (bounded by the source's
    batch size) as Arrow on the driver and apply it. With a local ``checkpoint`` the
    ledger records the batch's end offset from Spark's offset log. ``transform`` turns
    the envelope rows into the rows to apply (the changelog_table sink); its second
    argument, ``live(db, table, file, pos, names, keys)``, asks the target which keys
    its table holds (``last_rows``) with the table's definition at ``file:pos``."""
    from mysqlcdc.spark.checkpoint import batch_offset, local_dir

    definitions = definitions or Definitions(settings.history_dir)
    local = local_dir(checkpoint) if checkpoint else None
    base = ledger_name or settings.pipeline
    history = getattr(settings, "mode", "current") == "history"
    keys: dict[str, str] = {}

    def run(df, batch_id: int) -> None:
        name = keys.setdefault("ledger", ledger_key(base, checkpoint))   # Spark wrote it
        started = time.perf_counter()
        rows = _collect(df, keep_before=transform is not None)
        if not rows:
            return
        collected = time.perf_counter()
        end = batch_offset(local, batch_id) if local is not None else None

        def made(t: Target) -> list[dict]:
            if transform is None:
                return rows

            def last_rows(db, table, file, pos, names, keys):
                d = definitions.at(db, table, file, pos)
                if d is None or not t.table_exists(db, table):
                    return [None] * len(keys)
                return t.last_rows(d, tuple(names), keys)
            return transform(rows, last_rows)
        result = run_with_retries(
            make_target,
            lambda t: apply_batch(t, made(t), batch_id=batch_id, pipeline=name,
                                  definitions=definitions, keep_on_create=keep_on_create,
                                  end_position=str(end) if end is not None else None,
                                  history=history),
            attempts=settings.attempts, initial_delay_s=settings.initial_delay_s,
            max_delay_s=settings.max_delay_s, what=f"{settings.target} {name}",
            labels=(settings.pipeline, "changelog_table" if transform is not None else "mirror"),
            hint=getattr(settings, "unavailable_hint", None))
        log.info("mirror: batch %d: %d changes%s (read %.2f s, apply %.2f s)", batch_id,
                 result.rows, " (already applied)" if result.skipped else "",
                 collected - started, time.perf_counter() - collected)
    return run
