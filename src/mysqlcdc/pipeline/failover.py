"""Following a failover: the pipeline's source now answers as another server of the same
replication topology, and the pipeline continues from its GTID set.

Designed with the identity check of DESIGN.md decision 11, not around it. Each sink's
``source.json`` records the server it read; before a start the recorded identity is
compared with the configured server's:

* the same server (or only its GTID state went backwards: RESET MASTER, another datadir
  with the same ids) -> nothing here; the planner stops with SOURCE_CHANGED as before;
* **another server** (another ``server_id`` or ``server_uuid``) -> a failover, followed
  only if the checkpoint's last committed offset carries a GTID set and the new server
  has logged every transaction of it (MariaDB: each domain-server's sequence number in
  ``@@gtid_binlog_state`` reaches ours, which needs ``log_slave_updates``; MySQL: the
  set is inside ``@@gtid_executed``). Otherwise SOURCE_CHANGED, saying which.

Following it is a seek by GTID set on the new server: the batches planned after the
last commit are dropped (their positions are the old server's), the schema history and
the identity record are moved aside (the new server's identity is recorded at the next
start), and the next micro-batch is a seek batch to where the GTID set ends on the new
server. The new history starts there with the old history's definitions at the last
committed position: the same transactions have run on both servers up to that point, so
the tables are what they were, and the DDL logged since on the new server (the pipeline
may be far behind it after an outage) is walked as the stream reaches it. A table still
quarantined there is quarantined again at the new position (its rows wait for
``mysqlcdc schema resolve``, as before), one skipped stays skipped, and one resolved
by ``reload`` carries the reloaded definition. The offsets'
``epoch`` grows by one, so every seq from the new server sorts after the old server's.
At most the uncommitted batch is read again (from the new server).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from mysqlcdc.capture.control import SeekRequest, StreamControl
from mysqlcdc.capture.positions import PositionFinder
from mysqlcdc.capture.server import SourceIdentity, source_identity
from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.errors import SourceChangedError
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.protocol.connection import connect_sql, query
from mysqlcdc.schema.history import Quarantine, SchemaHistory
from mysqlcdc.types import BinlogPosition
from mysqlcdc.spark.checkpoint import committed_batches, local_dir, offset_data

__all__ = ["follow_failover", "missing_transactions"]

log = logging.getLogger(__name__)


def follow_failover(cfg: PipelineConfig) -> list[str]:
    """Check every sink's recorded server against the configured one; follow a failover
    (see the module doc). Returns one line per sink that followed one."""
    from mysqlcdc.pipeline.runner import (connection_settings, retry_policy,
                                          schema_history_dir, sink_checkpoint)
    from mysqlcdc.protocol import retry

    notes: list[str] = []
    conn = None
    try:
        for index in range(len(cfg.sinks)):
            folder = schema_history_dir(cfg, index)
            checkpoint = local_dir(sink_checkpoint(cfg, index))
            record = _record(folder)
            if record is None or checkpoint is None or not (checkpoint / "offsets").is_dir():
                continue
            if conn is None:       # a pipeline with a checkpoint waits out an outage here
                settings = connection_settings(cfg)              # as everywhere else
                conn, now = retry.call(lambda: _identity(settings), retry_policy(cfg),
                                       settings.address)
            old = SourceIdentity.from_json(record["identity"])
            if old.differs(now) is None or not _another_server(old, now):
                continue                  # the same server: the planner's checks apply
            notes.append(_follow(cfg, index, Path(folder), checkpoint, old, now, conn))
    finally:
        if conn is not None:
            conn.close()
    for note in notes:
        log.warning("pipeline %s: %s", cfg.name, note)
    return notes


def _identity(settings) -> tuple[object, SourceIdentity]:
    conn = connect_sql(settings)
    try:
        return conn, source_identity(conn)
    except BaseException:
        conn.close()
        raise


def _record(folder: str | None) -> dict | None:
    path = None if folder is None else Path(folder) / "source.json"
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    return data if isinstance(data.get("identity"), dict) else None


def _another_server(old: SourceIdentity, now: SourceIdentity) -> bool:
    if old.server_uuid and now.server_uuid and old.server_uuid != now.server_uuid:
        return True
    return old.server_id != now.server_id


def _follow(cfg: PipelineConfig, index: int, folder: Path, checkpoint: Path,
            old: SourceIdentity, now: SourceIdentity, conn) -> str:
    from mysqlcdc.pipeline.control import archive_history, drop_uncommitted
    from mysqlcdc.pipeline.runner import connection_settings, retry_policy

    settings = connection_settings(cfg)
    where = f"{settings.address} (server_id {now.server_id}) is another server than the one " \
            f"sink {index} captured from (server_id {old.server_id})"
    done = committed_batches(checkpoint)
    committed = offset_data(checkpoint, done[0]) if done else None
    if committed is None or not committed.get("gtid"):
        raise SourceChangedError(
            f"{where}, and the checkpoint has no committed position with a GTID set to "
            "find on it", hint="Point source.host/port back at the server this pipeline "
            "captured from, or start a new pipeline (a new spark.checkpoint) on this one.")
    ours = GtidSet.parse(committed["gtid"])
    missing = missing_transactions(conn, ours)
    if missing:
        raise SourceChangedError(
            f"{where}, and it has not logged transaction(s) {missing} this pipeline already "
            "captured: not a server of the same replication topology, one that is behind, "
            "or one without log_slave_updates")
    finder = PositionFinder(settings, cfg.source.sink_server_id(index), lambda: conn,
                            retry_policy(cfg))
    position, _ = finder.resolve_gtid(ours)
    carried, held = _definitions_at(folder, committed)
    dropped = drop_uncommitted(checkpoint)
    archive_history(folder, "failover")
    if carried is not None:
        history = SchemaHistory(folder)
        history.bootstrap(position, carried)
        for q, skip in held:            # still held: their rows wait for a resolution
            history.quarantine(Quarantine(
                q.db, q.table, position, position,
                f"quarantined on the old server before the failover: {q.reason}", q.ddl))
            if skip:
                history.resolve(q.db, q.table, "skip", None)
    source = folder / "source.json"
    if source.exists():
        source.rename(folder / f"source.json.failover-{time.strftime('%Y%m%d-%H%M%S')}")
    unfinished = _snapshot_left(folder, committed, position)
    epoch = int(committed.get("epoch", 0)) + 1
    StreamControl(folder).request_seek(SeekRequest.new(
        position, gtid=str(ours), ts=committed.get("ts"), epoch=epoch, history="reset",
        reason="failover"))
    return (f"sink {index} follows a failover to {settings.address} (server_id "
            f"{now.server_id}, was {old.server_id}): GTID set {ours} ends at {position} there"
            + (f"; batch(es) {dropped} planned on the old server are read again from it"
               if dropped else "")
            + (f"; the snapshot of {', '.join(unfinished)} it had not finished is read "
               "from it as a backfill" if unfinished else ""))


def _definitions_at(folder: Path, committed: dict) -> tuple[dict | None,
                                                           list[tuple[Quarantine, bool]]]:
    """Every table's definition in the sink's schema history at the committed offset's
    position on the old server (where its GTID set ends there), and the quarantines still
    open there or resolved by ``skip`` (True), their tables left out: the new history
    holds them again. None when the old history was never bootstrapped."""
    history = SchemaHistory(folder)
    if not history.bootstrapped:
        return None, []
    tables = history.tables_at(BinlogPosition.of(committed["file"], int(committed["pos"])))
    held: list[tuple[Quarantine, bool]] = []
    for db, table in sorted(history.quarantines):
        q, skip = history.open_quarantine(db, table), history.skipped(db, table)
        if q is not None or skip:
            tables.pop((db, table), None)
            held.append((q or history.quarantines[(db, table)][-1], skip and q is None))
    return tables, held


def _snapshot_left(folder: Path, committed: dict, position) -> list[str]:
    """Carry the snapshot work of the committed offset over to the new server, as
    requests keyed just before the seek's position (so the first batch after the seek
    batch takes them; the seek batch ends the snapshot phase):

    * each table of an initial snapshot not finished (whole: its chunks read so far are
      read again) and each backfill request not finished, with its filter;
    * each signal the committed batches' read tasks found but no batch took yet. Signals
      at or after the committed position are deleted: the new server's stream reads
      those transactions, and their signals, again. Signal files are named by the old
      server's positions, which mean nothing on the new one.

    Returns the tables of the unfinished snapshot work."""
    from mysqlcdc.capture.signals import put_signal, request_snapshot, signal_folder

    signals = signal_folder(str(folder))
    snap = committed.get("snapshot") or {}
    taken = tuple(snap["signals"]) if snap.get("signals") else None
    at = BinlogPosition.of(committed["file"], int(committed["pos"]))
    waiting: list[tuple[tuple, str]] = []
    for path in sorted(signals.glob("*.json")) if signals.is_dir() else []:
        try:
            key = tuple(int(p) for p in path.name[:-5].split("."))
        except ValueError:
            continue
        if taken is None or key > taken:
            if key < (at.file_number, at.pos, 0):
                waiting.append((key, path.read_text()))
        path.unlink()
    here = (position.file_number, position.pos - 1)
    names: list[str] = []
    row = 0
    for entry in snap.get("tables") or []:
        table, where = (entry, None) if isinstance(entry, str) else \
            (entry.get("table"), entry.get("where"))
        if table:
            request_snapshot(signals, here, f"failover@{position}#{row}", [table],
                             where=where, row=row)
            row += 1
            if table not in names:
                names.append(table)
    for _, text in waiting:
        try:
            put_signal(signals, (here[0], here[1], row), json.loads(text))
        except ValueError:
            log.error("signal file of the old server is unreadable; not carried over: %s",
                      text[:200])
        row += 1
    return names


def missing_transactions(conn, ours: GtidSet) -> str | None:
    """What of ``ours`` the server has not logged (None: it has logged all of it)."""
    if ours.empty:
        return None
    if ours.flavor == "mariadb":
        text = str(query(conn, "SELECT @@global.gtid_binlog_state")[0][0] or "")
        state: dict[tuple[int, int], int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            d, s, n = (int(x) for x in part.split("-"))
            state[(d, s)] = max(state.get((d, s), 0), n)
        lacking = [f"{d}-{s}-{n}" for d, s, n in ours.maria if state.get((d, s), 0) < n]
        return ",".join(lacking) or None
    executed = GtidSet.parse(str(query(conn, "SELECT @@global.gtid_executed")[0][0] or ""))
    return None if ours.issubset(executed) else f"{ours} (the server has {executed})"
