"""The changelog: one row per change, partitioned by db and table, Parquet or Delta.

Where the changelog folder is local (or a mount every executor sees), the source's own
read tasks write the part files as they decode (``files.PartFiles``, DESIGN.md decision
20): the rows never enter the JVM, and the sink's query only commits the files the
tasks name, from ``foreachBatch`` on the driver:

* ``format: parquet``: the batch's entry in the ``_spark_metadata`` log Spark's file sink
  keeps (``sinklog.py``), so Spark reading the root folder reads exactly the committed
  batches, and a batch replayed after a crash is skipped. A plain Parquet reader does
  not read the log: the sink removes a killed batch's leftover files whenever it starts
  (``maintenance.remove_orphans``).
* ``format: delta``: one Delta commit adding the files, carrying the application
  transaction ``(app id, batch id)`` (``sinks.deltacommit``), so a replayed batch is
  skipped and every reader at every moment sees whole batches exactly once. The commit's
  metadata holds the batch id and the binlog position the batch ends at. Compaction,
  retention and vacuum run between batches when ``compact_every`` says so.

A remote folder (``s3a://``, ``hdfs://``) is written by Spark's own file sink; with an
ordered transform before the sink (``flatten``), the files are written by a
``mapInArrow`` after it (Delta) or by Spark's file sink (Parquet).
"""

from __future__ import annotations

import json
import logging
import time

from mysqlcdc.sinks.changelog.maintenance import (
    CompactionClock,
    local_path,
    maintain_delta,
    remove_orphans,
)
from mysqlcdc.sinks.changelog.files import FILES_DDL, PartFiles, owner_tag, remove_unfinished
from mysqlcdc.sinks.changelog.settings import ChangelogSettings
from mysqlcdc.sinks.changelog.sinklog import SinkLog
from mysqlcdc.sinks.deltacommit import commit_once, open_table, table_uri
from mysqlcdc.spark.stopping import quiet_on_stop
from mysqlcdc.spark.taskwrite import note_written

__all__ = ["start_changelog", "task_writer", "read_changelog", "current_state_sql",
           "delta_batch_writer", "parquet_batch_committer"]

log = logging.getLogger(__name__)


def task_writer(settings: ChangelogSettings) -> PartFiles | None:
    """The writer the source's read tasks run for this changelog (DESIGN.md decision 20),
    None where they cannot: a folder that is not local (``s3a://``, ``hdfs://``) is
    written by Spark's own file sink."""
    if local_path(settings.path) is None:
        return None
    root = table_uri(settings.path) if settings.format == "delta" else \
        str(local_path(settings.path))
    return PartFiles(root=root, partition_by=tuple(settings.partition_by),
                     owner=owner_tag(settings.pipeline, settings.sink_index))


def start_changelog(df, settings: ChangelogSettings, *, checkpoint: str, trigger_interval: str,
                    name: str | None = None, written=None):
    """Start the streaming query that appends ``df`` to the changelog.

    ``written``: ``df`` holds what :func:`task_writer`'s files the read tasks wrote (one
    row per file) rather than changes; the value is the envelope's Arrow schema (what the
    files hold, partition columns included). The query then only commits them."""
    root = local_path(settings.path)
    if root is not None and root.is_dir():
        gone = remove_unfinished(str(root), owner_tag(settings.pipeline, settings.sink_index))
        if gone:
            log.warning("changelog %s: removed %d unfinished file(s) of killed tasks",
                        settings.path, gone)
    if settings.format == "delta":
        writer = df.writeStream.foreachBatch(quiet_on_stop(
            delta_batch_writer(settings, checkpoint, written=written)))
    elif written is not None:
        SinkLog(root).begin()
        remove_orphans(settings.path)
        writer = df.writeStream.foreachBatch(quiet_on_stop(parquet_batch_committer(settings,
                                                                                 checkpoint)))
    else:
        remove_orphans(settings.path)
        writer = df.writeStream.format("parquet").option("path", settings.path).outputMode("append")
        if settings.partition_by:
            writer = writer.partitionBy(*settings.partition_by)
        if settings.retention_s is not None:
            # Spark's file-sink TTL: its log compactions leave out files older than this
            writer = writer.option("retention", f"{int(settings.retention_s * 1000)}ms")
    writer = writer.option("checkpointLocation", checkpoint).trigger(processingTime=trigger_interval)
    if name:
        writer = writer.queryName(name)
    query = writer.start()
    if settings.format != "delta" and written is None and settings.retention_s is not None:
        _remove_expired_while_running(df.sparkSession, query, settings.path)
    return query


def parquet_batch_committer(settings: ChangelogSettings, checkpoint: str | None = None):
    """The ``foreachBatch`` function of a Parquet changelog whose read tasks write the files:
    collect the files' names (the tasks write them as they run) and list them in the
    ``_spark_metadata`` log as the batch's entry. A batch the log holds already (replayed
    after a crash) is not read again. After a log compaction that ``retention`` made drop
    files, they are deleted."""
    from mysqlcdc.spark.checkpoint import query_id

    root = str(local_path(settings.path))
    sink_log = SinkLog(root, retention_s=settings.retention_s)
    state: dict = {}

    def run(df, batch_id: int) -> None:
        if "query" not in state:
            state["query"] = query_id(checkpoint) if checkpoint else None
        if batch_id <= sink_log.latest():
            log.info("changelog %s: batch %d already committed; skipped", root, batch_id)
            return
        started = time.perf_counter()
        files = [r.asDict() for r in df.collect()]
        written = time.perf_counter()
        sink_log.add(batch_id, files)
        note_written(state["query"], batch_id, _changes(files))
        log.debug("changelog %s: batch %d: %d file(s) (write %.2f s, commit %.2f s)", root,
                  batch_id, len(files), written - started, time.perf_counter() - written)
        if settings.retention_s is not None and sink_log.is_compaction(batch_id):
            try:
                remove_orphans(settings.path, settled_only=True)
            except OSError as exc:          # retried after the next compaction
                log.warning("changelog %s: removing expired files failed: %s", root, exc)
    return run


def _remove_expired_while_running(spark, query, path: str) -> None:
    """After each of ``query``'s log compactions (where Spark's ``retention`` drops files),
    delete the files its log no longer lists, so plain Parquet readers drop them when
    Spark does. Only files older than the newest log entry go: none of a batch being
    written."""
    from pyspark.sql.streaming import StreamingQueryListener

    query_id, root = str(query.id), local_path(path)
    if root is None:
        return

    class RemoveExpired(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            progress = event.progress
            if str(progress.id) != query_id:
                return
            if not (root / "_spark_metadata" / f"{progress.batchId}.compact").exists():
                return
            try:
                remove_orphans(path, settled_only=True)
            except OSError as exc:          # retried after the next compaction
                log.warning("changelog %s: removing expired files failed: %s", path, exc)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            if str(event.id) == query_id:
                spark.streams.removeListener(self)

    spark.streams.addListener(RemoveExpired())


def _clock_from_history(settings: ChangelogSettings) -> CompactionClock:
    """A compaction clock that remembers the table's last compaction across restarts."""
    clock = CompactionClock(settings)
    table = open_table(table_uri(settings.path))
    if table is None:
        return clock
    writes = 0
    for entry in table.history(limit=max(settings.compact_batches or 0, 1000)):
        if entry.get("operation") == "OPTIMIZE":
            age_s = max(0.0, time.time() - int(entry.get("timestamp", 0)) / 1000)
            clock.since = clock.clock() - age_s
            break
        if entry.get("operation") == "WRITE":
            writes += 1
    clock.batches = writes
    return clock


def delta_batch_writer(settings: ChangelogSettings, checkpoint: str | None, *, written=None):
    """The ``foreachBatch`` function of a Delta changelog.

    Tasks write the batch's Parquet files into the table folder themselves
    (``files.PartFiles``: one file per partition value per task, streamed) and return
    only each file's name, size and statistics; the driver then makes the batch's one
    Delta commit naming those files. With ``written`` (the envelope's Arrow schema) the
    source's read tasks wrote them already and ``df`` holds the file rows; without it
    ``df`` holds the changes and a ``mapInArrow`` writes them. Files of a batch killed
    before its commit are in no version: no reader sees them, and vacuum removes them."""
    from mysqlcdc.spark.checkpoint import batch_offset, local_dir, query_id

    uri = table_uri(settings.path)
    local = local_dir(checkpoint) if checkpoint else None
    state: dict = {}

    def run(df, batch_id: int) -> None:
        if "app_id" not in state:
            state["query"] = query_id(checkpoint)
            state["app_id"] = settings.app_id(state["query"])
            state["clock"] = _clock_from_history(settings) if settings.maintains else None
        if not _already(uri, state["app_id"], batch_id):
            started = time.perf_counter()
            if written is not None:
                schema, files = written, df.collect()
                note_written(state["query"], batch_id, _changes(files))
            else:
                schema = _arrow_schema(df.schema)
                files = df.mapInArrow(PartFiles(uri, tuple(settings.partition_by), batch_id,
                                                owner=owner_tag(settings.pipeline,
                                                                settings.sink_index)),
                                      FILES_DDL).collect()
            done = time.perf_counter()
            if files:
                end = batch_offset(local, batch_id) if local is not None else None
                meta = {"mysqlcdc.end_position": str(end)} if end is not None else {}
                rows = _commit_files(uri, state["app_id"], batch_id, files, schema,
                                     settings.partition_by, meta)
                log.info("changelog %s: batch %d: %d changes in %d file(s) (write %.2f s, "
                         "commit %.2f s)", uri, batch_id, rows, len(files),
                         done - started, time.perf_counter() - done)
        clock = state["clock"]
        if clock is not None and clock.tick():
            log.info("changelog %s: %s", uri,
                     maintain_delta(settings, compact=settings.compacts).line())
    return run


def _changes(files) -> int:
    """The changes the files of a batch hold (their statistics' record counts)."""
    return sum(json.loads(f["stats"])["numRecords"] for f in files)


def _already(uri: str, app_id: str, batch_id: int) -> bool:
    from mysqlcdc.sinks.deltacommit import applied_version

    done = applied_version(uri, app_id)
    if done is not None and done >= batch_id:
        log.info("changelog %s: batch %d already committed; skipped", uri, batch_id)
        return True
    return False


def _arrow_schema(spark_schema):
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


def _commit_files(uri: str, app_id: str, batch_id: int, files, schema, partition_by,
                  meta: dict) -> int:
    """One Delta commit adding ``files`` (creating the table on its first batch)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    table = open_table(uri)
    if table is None:
        table = DeltaTable.create(uri, schema=schema, mode="ignore",
                                  partition_by=list(partition_by) or None)
    have = {f.name for f in pa.schema(table.schema().to_arrow())}
    added = [f for f in schema if f.name not in have]
    if added:                                   # a column the envelope gained since
        from deltalake.schema import Schema

        new = Schema.from_arrow(pa.schema(added))
        table.alter.add_columns(list(new.fields))
        table = DeltaTable(uri)
    actions = [AddAction(r["path"], r["size"], json.loads(r["partition_values"]),
                         r["modification_time"], True, r["stats"]) for r in files]
    commit_once(uri, app_id, batch_id,
                lambda props: table.create_write_transaction(
                    actions, mode="append", schema=pa.schema(table.schema().to_arrow()),
                    partition_by=list(partition_by) or None, commit_properties=props),
                metadata=meta)
    return sum(json.loads(r["stats"])["numRecords"] for r in files)


def read_changelog(spark, path: str, format: str = "parquet"):
    """The changelog as a Spark DataFrame: only committed batches, each change once.

    A Delta changelog is read without Delta's Spark jars: delta-rs names the files of
    the table's current version, which Spark's Parquet reader reads with the
    envelope's schema (partition columns recovered from the folder names)."""
    if format != "delta":
        return spark.read.parquet(path)
    from mysqlcdc.envelope.model import ENVELOPE_DDL

    table = open_table(table_uri(path))
    ddl = _table_ddl(table) if table is not None else ENVELOPE_DDL
    files = table.file_uris() if table is not None else []
    if not files:
        return spark.createDataFrame([], ddl)
    root = local_path(path)
    return (spark.read.schema(ddl).option("basePath", str(root) if root is not None else path)
            .parquet(*files))


def _table_ddl(table) -> str:
    """The Delta table's columns as a Spark DDL string (envelope types where known)."""
    import pyarrow as pa

    from mysqlcdc.envelope.model import ENVELOPE_FIELDS

    known = {name: ddl for name, ddl, _ in ENVELOPE_FIELDS}
    cols = []
    for f in pa.schema(table.schema().to_arrow()):
        cols.append(f"`{f.name}` {known.get(f.name) or _spark_type(f.type)}")
    return ", ".join(cols)


def _spark_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_integer(t):
        return "BIGINT" if t.bit_width > 32 else "INT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BINARY"
    return "STRING"


def current_state_sql(view: str, db: str, table: str) -> str:
    """SQL giving a table's current rows from its changelog view.

    The latest change per primary key wins (``seq`` orders changes exactly);
    keys whose latest change is a delete are gone, and so is every change before the
    table's latest TRUNCATE (``op = 't'``, also after a DDL that changed its key) or the
    latest DDL that created, dropped or renamed a table of that name (an ``s`` without
    ``before`` or ``after``, or whose ``before`` is another table: its rows then come
    again as the backfill the pipeline queued there); schema changes are not rows.
    ``after`` holds the row as JSON; ``from_json`` or ``get_json_object`` turns it into
    columns.
    """
    where = f"db = '{_quote(db)}' AND `table` = '{_quote(table)}'"
    return f"""
SELECT key, after AS row, seq AS last_seq
FROM (
  SELECT key, op, after, seq,
         ROW_NUMBER() OVER (PARTITION BY key ORDER BY seq DESC) AS rn
  FROM {view}
  WHERE {where} AND op IN ('c', 'u', 'd', 'r')
    AND seq > (SELECT coalesce(max(seq), -1) FROM {view}
               WHERE {where} AND (op = 't' OR (op = 's' AND (
                 `before` IS NULL OR `after` IS NULL
                 OR get_json_object(`before`, '$.db') <> db
                 OR get_json_object(`before`, '$.table') <> `table`))))
)
WHERE rn = 1 AND op <> 'd'
""".strip()


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
