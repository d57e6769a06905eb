"""Delta Lake mirror target: one Delta table per source table, written with delta-rs.

Layout under the root ``path``: source table ``db.t`` is the Delta table ``<path>/db/t``;
``<path>/_mysqlcdc_offsets`` is the ledger (a small Delta table: the last complete batch,
its end position and ``seq``, a partial-batch mark, and the stopped tables).
Types: see :mod:`.arrowvalues`.

Per micro-batch, on the driver (the ``foreachBatch`` process) — the apply loop
(:mod:`.writer`) reduces each table's changes to the last change per key and calls
:meth:`DeltaTarget.write_changes`, which converts the images to Arrow a column at a time
and runs ONE delta-rs MERGE for the table (deletes, updates and inserts together). The
merge runs in delta-rs's native threads, outside the JVM, on the reduced changes of
one table; memory is bounded by the batch (``source.max_events_per_batch``).

Idempotence goes through :func:`mysqlcdc.sinks.deltacommit.commit_once`, the one
idempotent Delta commit of every Delta writer: each commit to a table carries
``txn(app id, batch id)``, the batch's end position (``mysqlcdc.end_position``) and its
*step* (the ``seq`` of the last change it applies), so a replayed batch skips every
table, and every step, it already committed. The batch ends with a commit to the ledger
carrying the same application transaction: a batch is complete when the ledger has it.

Schema changes: added columns are a metadata commit; dropped, renamed and retyped
columns rewrite the table (streamed record batch by record batch into one overwrite
commit); a truncate is a delete of every row; a table rename moves its folder and a
drop removes it (both atomic renames on the local file system). Like MySQL's DDL these
are not part of one batch-wide transaction, so before each one the batch's earlier
changes are committed and the ledger is marked with how far the batch got; a replay
resumes after the mark. A type Delta cannot hold (DECIMAL wider than 38 digits), a
cast the rewrite cannot make, or a column name Delta refuses stops that table with
MIRROR_TABLE_STOPPED; the other tables keep flowing.

:func:`read_consistent` reads every table as of one binlog position (see DESIGN.md,
decision 16).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from mysqlcdc.errors import ChangelogWriteError
from mysqlcdc.schema.model import TableDef
from mysqlcdc.sinks.deltacommit import (APP_KEY, BATCH_KEY, commit_once, is_storage_error,
                                        open_table, table_uri)
from mysqlcdc.sinks.mirror.arrowvalues import UnsupportedType, arrow_schema, images_to_arrow
from mysqlcdc.sinks.mirror.history import HISTORY_COLUMNS, Change, drop_late, scd2
from mysqlcdc.sinks.mirror.writer import (ColumnChange, RetryableTargetError, TableRefused)
from mysqlcdc.types import BinlogPosition

__all__ = ["DeltaTarget", "read_consistent", "ConsistentCut", "table_positions", "maintain",
           "LEDGER"]

log = logging.getLogger(__name__)

LEDGER = "_mysqlcdc_offsets"
LEDGER_VACUUM_EVERY = 100           # batches; each ledger commit replaces its one small file
TRASH = "_mysqlcdc_trash"
POSITION_KEY = "mysqlcdc.end_position"
OP = "__mysqlcdc_op"
KIND = "__mysqlcdc_kind"

Key = tuple[str, str]

_LEDGER_SCHEMA = pa.schema([
    ("kind", pa.string()), ("pipeline", pa.string()), ("app_id", pa.string()),
    ("batch_id", pa.int64()), ("position", pa.string()), ("seq", pa.string()),
    ("partial_batch", pa.int64()), ("partial_seq", pa.string()), ("db", pa.string()),
    ("tbl", pa.string()), ("code", pa.string()), ("message", pa.string()),
    ("committed_at", pa.timestamp("us", tz="UTC")), ("compacted_batch", pa.int64()),
    ("compacted_at", pa.timestamp("us", tz="UTC")),
])


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:500]


class DeltaTarget:
    """Delta tables under one root (see writer.Target). Every table write is a commit of
    its own, idempotent per (batch, step); the ledger commit ends the batch."""

    transactional_ddl = False
    stopped_hint = ("Fix the cause; then, with the pipeline stopped, delete the table's folder "
                    "and its row (kind = 'stopped') from <path>/_mysqlcdc_offsets and "
                    "re-snapshot the table; the mirror skips it until then.")

    def __init__(self, settings, app_id: str | None = None) -> None:
        self.s = settings
        self.root = table_uri(settings.path)
        self.app_id = app_id or settings.app_id(None)
        self.history = settings.mode == "history"
        self.batch_id = -1
        self.position = ""
        self.step = Decimal(0)
        self._last: dict = {}
        self._stopped: dict[Key, dict] = {}

    # -- connection -----------------------------------------------------------------
    def connect(self) -> None:
        pass                          # the root is made by the first batch (start_batch)

    def close(self) -> None:
        pass

    # -- the ledger -------------------------------------------------------------------
    @property
    def ledger_uri(self) -> str:
        return os.path.join(self.root, LEDGER)

    def begin(self, pipeline: str):
        ledger = self._open(self.ledger_uri)
        rows = ledger.to_pyarrow_table().to_pylist() if ledger is not None else []
        self._last = next((r for r in rows if r["kind"] == "batch"), {})
        self._stopped = {(r["db"], r["tbl"]): r for r in rows if r["kind"] == "stopped"}
        committed = ledger.transaction_version(self.app_id) if ledger is not None else None
        return committed, set(self._stopped)

    def start_batch(self, batch_id: int, position: str) -> None:
        self.batch_id, self.position = batch_id, position
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as err:
            raise RetryableTargetError(f"cannot create {self.root}: {err.strerror}") from None

    def at(self, seq: Decimal) -> None:
        self.step = seq

    def partial(self, pipeline: str):
        b = self._last.get("partial_batch")
        return (b, self._last["partial_seq"]) if b is not None else None

    def mark(self, pipeline: str, batch_id: int, seq: str) -> None:
        """Note in the ledger how far batch ``batch_id`` got (before and after a DDL)."""
        from deltalake import CommitProperties

        rows = self._ledger_rows(pipeline, partial=(batch_id, seq))
        props = CommitProperties(custom_metadata={APP_KEY: self.app_id,
                                                  BATCH_KEY: str(batch_id),
                                                  "mysqlcdc.partial_seq": seq})
        self._write_ledger(rows, props)
        self._last = rows[0]

    def commit(self, pipeline: str, batch_id: int, position: str, seq: str) -> None:
        self.position = position
        compacted = self._compaction_due(batch_id)
        if compacted:
            maintain(self.root, self.s)
        rows = self._ledger_rows(pipeline, done=(batch_id, position, seq), compacted=compacted)
        try:
            commit_once(self.ledger_uri, self.app_id, batch_id,
                        lambda props: self._write_ledger(rows, props),
                        metadata={POSITION_KEY: position})
        except ChangelogWriteError as err:
            raise RetryableTargetError(err.message) from None
        if batch_id % LEDGER_VACUUM_EVERY == 0:
            _vacuum_ledger(self.ledger_uri)

    def _compaction_due(self, batch_id: int) -> bool:
        """``compact_every`` batches or seconds since the last compaction (kept in the
        ledger, so a restart does not reset the count; the first interval starts with the
        first batch)."""
        s = self.s
        if s.compact_batches is None and s.compact_seconds is None:
            return False
        since_batch = self._last.get("compacted_batch")
        since_at = self._last.get("compacted_at")
        if since_batch is None or since_at is None:
            return False
        if s.compact_batches is not None:        # (a new checkpoint counts from 0 again)
            return batch_id < since_batch or batch_id - since_batch >= s.compact_batches
        return (datetime.now(timezone.utc) - since_at).total_seconds() >= s.compact_seconds

    def _ledger_rows(self, pipeline: str, *, partial=None, done=None,
                     compacted: bool = False) -> list[dict]:
        now = datetime.now(timezone.utc)
        batch = {k: None for k in _LEDGER_SCHEMA.names}
        batch.update(kind="batch", pipeline=pipeline, app_id=self.app_id, committed_at=now,
                     batch_id=self._last.get("batch_id"), position=self._last.get("position"),
                     seq=self._last.get("seq"),
                     compacted_batch=self._last.get("compacted_batch"),
                     compacted_at=self._last.get("compacted_at"))
        if compacted or batch["compacted_at"] is None:       # the interval starts (again)
            batch.update(compacted_batch=done[0] if done else self.batch_id, compacted_at=now)
        if done is not None:
            batch.update(batch_id=done[0], position=done[1], seq=done[2] or None)
        if partial is not None:
            batch.update(partial_batch=partial[0], partial_seq=partial[1])
        stopped = [{**{k: None for k in _LEDGER_SCHEMA.names}, **r, "kind": "stopped",
                    "pipeline": pipeline} for r in self._stopped.values()]
        return [batch, *stopped]

    def _write_ledger(self, rows: list[dict], props) -> None:
        from deltalake import write_deltalake

        try:
            write_deltalake(self.ledger_uri, pa.Table.from_pylist(rows, schema=_LEDGER_SCHEMA),
                            mode="overwrite", schema_mode="overwrite", commit_properties=props)
        except Exception as err:    # noqa: BLE001 - storage errors are retried, others raised
            if is_storage_error(err):
                raise RetryableTargetError(_one_line(err)) from None
            raise

    def rollback(self) -> None:
        pass

    def savepoint(self) -> None:        # each table action is one atomic commit
        pass

    def rollback_savepoint(self) -> None:
        pass

    def release_savepoint(self) -> None:
        pass

    def stop_table(self, pipeline, db, table, code, message, seq) -> None:
        self._stopped[(db, table)] = {"db": db, "tbl": table, "code": code,
                                      "message": message, "seq": seq,
                                      "committed_at": datetime.now(timezone.utc)}

    def read_position(self, pipeline: str) -> dict:
        """The ledger's last complete batch and, per table, its last commit."""
        self.begin(pipeline)
        last = self._last
        return {"batch_id": last.get("batch_id"), "position": last.get("position"),
                "seq": last.get("seq"),
                "committed_at": str(last["committed_at"]) if last.get("committed_at") else None,
                "stopped": [{"table": f"{d}.{t}", "code": r["code"], "message": r["message"],
                             "seq": r["seq"]} for (d, t), r in sorted(self._stopped.items())],
                "tables": table_positions(self.root)}

    # -- tables -------------------------------------------------------------------------
    def _uri(self, db: str, table: str) -> str:
        return os.path.join(self.root, db, table)

    @staticmethod
    def _open(uri: str):
        try:
            return open_table(uri)
        except Exception as err:    # noqa: BLE001 - storage errors are retried, others raised
            if is_storage_error(err):
                raise RetryableTargetError(_one_line(err)) from None
            raise

    def table_exists(self, db: str, table: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self._uri(db, table))

    def _schema(self, d: TableDef) -> pa.Schema:
        try:
            return arrow_schema(d)
        except UnsupportedType as err:
            raise TableRefused(str(err)) from None

    def _commit(self, key: Key, step: Decimal, write, table=None) -> None:
        """One commit to ``key``'s table through the shared idempotent commit."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        uri = self._uri(*key)
        try:
            commit_once(uri, self.app_id, self.batch_id, write, step=step, table=table,
                        metadata={POSITION_KEY: self.position})
        except ChangelogWriteError as err:
            raise RetryableTargetError(err.message) from None
        except CommitFailedError as err:           # another writer committed in between
            raise RetryableTargetError(_one_line(err)) from None
        except (DeltaError, pa.ArrowException, UnsupportedType) as err:
            raise TableRefused(_one_line(err)) from None

    def create_table(self, d: TableDef) -> None:
        from deltalake import DeltaTable

        schema = self._schema(d)
        uri = self._uri(d.db, d.name)
        self._commit((d.db, d.name), Decimal(0),
                     lambda props: DeltaTable.create(uri, schema=schema, mode="overwrite",
                                                     commit_properties=props))

    def drop_table(self, db: str, table: str) -> None:
        """Move the table's folder aside (atomic), then delete it."""
        trash = os.path.join(self.root, TRASH, uuid.uuid4().hex)
        try:
            os.makedirs(os.path.dirname(trash), exist_ok=True)
            os.rename(self._uri(db, table), trash)
        except FileNotFoundError:
            return
        except OSError as err:
            raise RetryableTargetError(f"dropping {db}.{table}: {err.strerror}") from None
        shutil.rmtree(trash, ignore_errors=True)

    def rename_table(self, old: Key, new: Key) -> None:
        try:
            os.makedirs(os.path.join(self.root, new[0]), exist_ok=True)
            os.rename(self._uri(*old), self._uri(*new))
        except OSError as err:
            raise RetryableTargetError(f"renaming {old[0]}.{old[1]}: {err.strerror}") from None

    def truncate(self, db: str, table: str) -> None:
        self._commit((db, table), self.step,
                     lambda props: self._open(self._uri(db, table)).delete(
                         commit_properties=props))

    def close_all(self, db: str, table: str, ts_ms: int | None, seq: Decimal) -> None:
        """History mode's truncate: every current version ends at ``ts_ms`` / ``seq``."""
        micros = "NULL" if ts_ms is None else str(int(ts_ms) * 1000)
        when = f"arrow_cast({micros}, 'Timestamp(Microsecond, Some(\"UTC\"))')"
        updates = {"valid_to": f"CASE WHEN valid_from > {when} THEN valid_from ELSE {when} END",
                   "valid_to_seq": f"CAST('{int(seq)}' AS DECIMAL(38,0))",
                   "is_current": "false"}
        self._commit((db, table), self.step,
                     lambda props: self._open(self._uri(db, table)).update(
                         updates=updates, predicate="is_current = true",
                         commit_properties=props))

    def alter_table(self, before: TableDef, after: TableDef, changes: list[ColumnChange]) -> None:
        new = self._schema(after)
        uri = self._uri(after.db, after.name)
        table = self._open(uri)
        old = pa.schema(table.schema().to_arrow())
        renames = {ch.column.name: ch.old_name for ch in changes if ch.kind == "rename"}
        kept = [f for f in new if f.name in old.names]
        if not renames and set(old.names) <= set(new.names) and \
                all(old.field(f.name).type == f.type for f in kept):
            added = [f for f in new if f.name not in old.names]
            if added:
                self._add_columns((after.db, after.name), table, added)
            return
        self._commit((after.db, after.name), self.step,
                     lambda props: _rewrite(uri, table, new, renames, props), table=table)

    def _add_columns(self, key: Key, table, added: list[pa.Field]) -> None:
        from deltalake.schema import Schema

        fields = list(Schema.from_arrow(pa.schema(added)).fields)
        self._commit(key, self.step,
                     lambda props: table.alter.add_columns(fields, commit_properties=props),
                     table=table)

    # -- rows -----------------------------------------------------------------------------
    def write_changes(self, d: TableDef, changes: list[Change], *, history: bool) -> None:
        """One MERGE of a table's changes since its last flush (reduced per key, or every
        change in history mode) in one commit."""
        source_def, pk = _source_def(d)
        schema = self._schema(d)
        uri = self._uri(d.db, d.name)
        table = self._open(uri)
        try:
            if history:
                changes = drop_late(changes, _current_starts(table, source_def, schema,
                                                             changes))
                if not changes:
                    return
            source = (_history_source(source_def, schema, changes) if history
                      else _current_source(source_def, schema, changes))
        except (pa.ArrowException, UnsupportedType) as err:
            raise TableRefused(f"a value does not fit its Delta column: {_one_line(err)}") \
                from None
        merge = _merge_history if history else _merge_current
        self._commit((d.db, d.name), max(c.seq for c in changes),
                     lambda props: merge(table, source, pk, props), table=table)


def _source_def(d: TableDef) -> tuple[TableDef, tuple[str, ...]]:
    """The source table's definition inside a (history) table definition, and its key."""
    cols = tuple(c for c in d.columns if c.name not in HISTORY_COLUMNS)
    source = TableDef(d.db, d.name, cols, charset=d.charset)
    return source, source.primary_key


def _current_source(d: TableDef, schema: pa.Schema, changes: list[Change]) -> pa.Table:
    images = [c.after if c.op != "d" else c.key for c in changes]
    data = images_to_arrow(d, images, schema)
    return data.append_column(OP, pa.array(["d" if c.op == "d" else "u" for c in changes]))


def _current_starts(table, d: TableDef, schema: pa.Schema,
                    changes: list[Change]) -> dict[str, Decimal]:
    """For each key of ``changes`` with a current version in the history ``table``, that
    version's ``valid_from_seq`` (see history.drop_late). The keys are made Arrow values
    of the table's own types, the way its rows are written, and matched as such."""
    import pyarrow.dataset as ds

    texts = sorted({c.key for c in changes})
    pk = list(d.primary_key)
    keys = images_to_arrow(d, texts, schema)
    wanted = {tuple(keys.column(n)[i].as_py() for n in pk): t for i, t in enumerate(texts)}
    files = ds.dataset(table.file_uris(), schema=pa.schema(table.schema().to_arrow()),
                       format="parquet")
    where = ds.field("is_current") == True   # noqa: E712 - an Arrow expression
    for n in pk:
        where = where & ds.field(n).isin(keys.column(n).drop_null())
    found = files.to_table(columns=pk + ["valid_from_seq"], filter=where)
    out: dict[str, Decimal] = {}
    for row in found.to_pylist():
        text = wanted.get(tuple(row[n] for n in pk))
        if text is not None:
            out[text] = Decimal(row["valid_from_seq"])
    return out


def _history_source(d: TableDef, schema: pa.Schema, changes: list[Change]) -> pa.Table:
    """Closes (key columns, the closing time) and new versions, told apart by KIND."""
    closes, versions = scd2(changes)
    images = [c.key for c in closes] + [v.after for v in versions]
    data = images_to_arrow(d, images, schema)
    n_close = len(closes)
    stamps = {
        "valid_from": [None] * n_close + [v.valid_from for v in versions],
        "valid_to": [c.ts_ms for c in closes] + [v.valid_to for v in versions],
        "valid_from_seq": [c.seq for c in closes] + [v.valid_from_seq for v in versions],
        "valid_to_seq": [c.seq for c in closes] + [v.valid_to_seq for v in versions],
        "is_current": [False] * n_close + [v.is_current for v in versions],
    }
    for name, values in stamps.items():
        typ = schema.field(name).type
        if name in ("valid_from", "valid_to"):
            arr = pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(typ)
        else:
            arr = pa.array(values, typ)
        data = data.set_column(schema.get_field_index(name), schema.field(name), arr)
    return data.append_column(KIND, pa.array(["close"] * n_close + ["version"] * len(versions)))


def _on(pk: tuple[str, ...]) -> str:
    return " AND ".join(f"t.{_q(n)} = s.{_q(n)}" for n in pk)


def _merge_current(table, source: pa.Table, pk: tuple[str, ...], props) -> None:
    (table.merge(source, _on(pk), source_alias="s", target_alias="t", streamed_exec=False,
                 commit_properties=props)
     .when_matched_delete(f"s.{OP} = 'd'")
     .when_matched_update_all(f"s.{OP} <> 'd'", except_cols=[OP])
     .when_not_matched_insert_all(f"s.{OP} <> 'd'", except_cols=[OP])
     .execute())


def _merge_history(table, source: pa.Table, pk: tuple[str, ...], props) -> None:
    on = f"{_on(pk)} AND t.is_current = true AND s.{KIND} = 'close'"
    (table.merge(source, on, source_alias="s", target_alias="t", streamed_exec=False,
                 commit_properties=props)
     .when_matched_update({"valid_to": "CASE WHEN t.valid_from > s.valid_to THEN t.valid_from "
                                        "ELSE s.valid_to END",    # history._end_time
                           "valid_to_seq": "s.valid_to_seq", "is_current": "false"})
     .when_not_matched_insert_all(f"s.{KIND} = 'version'", except_cols=[KIND])
     .execute())


def _rewrite(uri: str, table, new: pa.Schema, renames: dict[str, str], props) -> None:
    """The table again, with ``new``'s columns (renamed, dropped, cast, added as nulls),
    streamed record batch by record batch into one overwrite commit."""
    from deltalake import write_deltalake

    import pyarrow.dataset as ds

    old = pa.schema(table.schema().to_arrow())
    have = set(old.names)
    sources = {f.name: renames.get(f.name, f.name) for f in new}
    read = sorted({s for s in sources.values() if s in have})
    # the files of the current version, read by Arrow itself: delta-rs's own dataset would
    # run its runtime inside the writer's (the mirror writes no deletion vectors)
    files = ds.dataset(table.file_uris(), schema=old, format="parquet")

    def batches():
        for batch in files.to_batches(columns=read):
            arrays = [_cast(batch.column(sources[f.name]), f.type) if sources[f.name] in have
                      else pa.nulls(batch.num_rows, f.type) for f in new]
            yield pa.RecordBatch.from_arrays(arrays, schema=new)

    write_deltalake(uri, pa.RecordBatchReader.from_batches(new, batches()), mode="overwrite",
                    schema_mode="overwrite", commit_properties=props)


def _cast(array: pa.Array, to: pa.DataType) -> pa.Array:
    """``array`` as ``to``, refused when a value does not fit. Arrow judges an integer
    cast to a decimal by the integer type's width (an ``int32`` needs precision 10 plus
    the scale), not by the values, so ``INT`` to ``DECIMAL(10,2)`` failed although the
    server had just converted every value; such a cast goes through a decimal wide
    enough for any integer, and the second step checks each value."""
    if pa.types.is_decimal(to) and pa.types.is_integer(array.type):
        array = array.cast(pa.decimal256(76, to.scale))
    return array.cast(to)


# -- maintenance ----------------------------------------------------------------------------

def _vacuum_ledger(uri: str) -> None:
    """Delete the ledger's replaced files: only its newest version is ever read (its log
    keeps the history), so they go at once rather than after ``vacuum_after``."""
    try:
        open_table(uri).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    except Exception as err:        # noqa: BLE001 - maintenance never stops the mirror
        log.warning("delta mirror: vacuuming the ledger %s failed (%s)", uri, _one_line(err))


def maintain(root: str, settings) -> None:
    """Compaction (``optimize.compact``) and vacuum of every table and the ledger. Readers
    see the same rows before and after (compaction only rewrites files); it carries no
    position, so the consistent cut passes over it. A failure is logged, not raised: the
    mirror is exact without it, and the next interval tries again."""
    started = datetime.now(timezone.utc)
    hours = max(0, int(settings.vacuum_after_s // 3600))
    done = 0
    for uri in [os.path.join(root, db, t) for db, t in _tables(root)] + \
            [os.path.join(root, LEDGER)]:
        try:
            table = open_table(uri)
            if table is None:
                continue
            metrics = table.optimize.compact(target_size=settings.target_file_bytes)
            done += int(metrics.get("numFilesRemoved", 0) or 0)
            table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
        except Exception as err:    # noqa: BLE001 - maintenance never stops the mirror
            log.warning("delta mirror: compacting %s failed (%s); retried at the next interval",
                        uri, _one_line(err))
    log.info("delta mirror %s: compacted %d files in %.1f s", root, done,
             (datetime.now(timezone.utc) - started).total_seconds())


# -- reading --------------------------------------------------------------------------------

def _tables(root: str) -> list[Key]:
    """The (db, table) folders under ``root`` that hold a Delta table."""
    from deltalake import DeltaTable

    out = []
    base = Path(root)
    if not base.is_dir():
        return out
    for db in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("_mysqlcdc")):
        for t in sorted(p for p in db.iterdir() if p.is_dir()):
            if DeltaTable.is_deltatable(str(t)):
                out.append((db.name, t.name))
    return out


def _commits(table, depth: int | None = None):
    """(version, batch id, end position or None) of the table's commits, newest first;
    the log is read in growing slices from the newest entry, up to ``depth`` entries."""
    seen, limit = 0, 16
    while True:
        limit = min(limit, depth) if depth else limit
        entries = table.history(limit=limit)
        for entry in entries[seen:]:
            pos = entry.get(POSITION_KEY)
            batch = entry.get(BATCH_KEY)
            yield entry["version"], (int(batch) if batch is not None else None), \
                (BinlogPosition.parse(pos) if pos else None)
        if len(entries) < limit or (depth and limit >= depth):
            return
        seen, limit = len(entries), limit * 8


def table_positions(root: str | Path) -> list[dict]:
    """Per Delta table under ``root``: its version, and the batch id and binlog end position
    of its last mirror commit."""
    out = []
    for db, name in _tables(table_uri(root)):
        table = open_table(os.path.join(table_uri(root), db, name))
        last = next(((b, p) for _, b, p in _commits(table, 64) if p is not None), (None, None))
        out.append({"table": f"{db}.{name}", "version": table.version(),
                    "batch_id": last[0], "position": str(last[1]) if last[1] else None})
    return out


@dataclass
class ConsistentCut:
    """Every mirrored table as of one binlog position (a transaction boundary).

    ``tables``: ``"db.table"`` -> ``DeltaTable`` loaded at the version that reflects the
    source exactly at ``position``; ``versions`` the same as numbers (for ``polars``'
    ``scan_delta(version=...)``, Spark's ``versionAsOf``); ``stopped``: tables the mirror
    stopped (left out: they reflect an earlier position)."""

    position: BinlogPosition | None
    batch_id: int | None
    tables: dict[str, object] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)

    def to_arrow(self, name: str) -> pa.Table:
        """One table of the cut as an Arrow table."""
        return self.tables[name].to_pyarrow_table()


def read_consistent(root: str | Path) -> ConsistentCut:
    """All tables of the Delta mirror under ``root`` as of one common binlog position.

    The position is the end of the ledger's last complete batch: every table has
    committed every change up to it (a table with no commit since simply had no change).
    Each table is time-travelled to its highest version whose commits all lie at or
    before that position, so a table already holding part of a later batch (a batch in
    progress, or cut by a crash) is read without it. The result never shows half of a
    source transaction: batch ends are transaction boundaries.

    >>> cut = read_consistent("/data/mirror")                  # doctest: +SKIP
    >>> orders, users = cut.to_arrow("shop.orders"), cut.to_arrow("shop.users")
    """
    uri = table_uri(root)
    rows = _read_ledger(os.path.join(uri, LEDGER))
    last = next((r for r in rows if r["kind"] == "batch"), {})
    position = BinlogPosition.parse(last["position"]) if last.get("position") else None
    cut = ConsistentCut(position, last.get("batch_id"))
    cut.stopped = sorted(f"{r['db']}.{r['tbl']}" for r in rows if r["kind"] == "stopped")
    if position is None:
        return cut
    for db, name in _tables(uri):
        full = f"{db}.{name}"
        if full in cut.stopped:
            continue
        table = open_table(os.path.join(uri, db, name))
        version = _version_at(table, position)
        if version is None:
            continue                  # created after the cut
        table.load_as_version(version)
        cut.tables[full] = table
        cut.versions[full] = version
    return cut


def _read_ledger(uri: str, attempts: int = 3) -> list[dict]:
    """The ledger's rows; read again when the writer replaced (and vacuumed) the file
    between our reading of the log and of the file."""
    for attempt in range(attempts):
        try:
            ledger = open_table(uri)
            return ledger.to_pyarrow_table().to_pylist() if ledger is not None else []
        except Exception as err:    # noqa: BLE001 - only storage errors are read again
            if attempt == attempts - 1 or not is_storage_error(err):
                raise
    return []


def _version_at(table, position: BinlogPosition) -> int | None:
    """The newest version of ``table`` no commit of which lies after ``position``."""
    newest = table.version()
    for version, _, pos in _commits(table):
        if pos is not None and pos > position:
            newest = version - 1
        elif pos is not None:
            break
    return newest if newest >= 0 else None
