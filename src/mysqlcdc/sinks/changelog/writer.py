"""The changelog: one row per change, partitioned by db and table, Parquet or Delta.

``format: parquet`` is written with Spark's own file sink, which commits each
micro-batch through its ``_spark_metadata`` log: a batch replayed after a crash
replaces its own files instead of adding duplicates. Spark reading the root folder
honours that log; a plain Parquet reader does not, so the sink removes a killed
batch's leftover files whenever it starts (``maintenance.remove_orphans``).

``format: delta`` writes a Delta Lake table with delta-rs from ``foreachBatch``:
the read tasks write the batch's Parquet files into the table folder (streamed, one
file per partition value per task) and return their names and statistics; the driver
makes one Delta commit adding them, carrying the application transaction
``(app id, batch id)`` (``sinks.deltacommit``), so a replayed batch is skipped and
every reader at every moment sees whole batches exactly once. The commit's metadata
holds the batch id and the binlog position the batch ends at. Compaction, retention
and vacuum run between batches when ``compact_every`` says so. The path must be a
folder every Spark executor sees (local, or a shared mount on a cluster).
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
from mysqlcdc.sinks.changelog.settings import ChangelogSettings
from mysqlcdc.sinks.deltacommit import commit_once, open_table, table_uri

__all__ = ["start_changelog", "read_changelog", "current_state_sql", "delta_batch_writer"]

log = logging.getLogger(__name__)


def start_changelog(df, settings: ChangelogSettings, *, checkpoint: str, trigger_interval: str,
                    name: str | None = None):
    """Start the streaming query that appends ``df`` to the changelog."""
    if settings.format == "delta":
        writer = df.writeStream.foreachBatch(delta_batch_writer(settings, checkpoint))
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
    if settings.format != "delta" and settings.retention_s is not None:
        _remove_expired_while_running(df.sparkSession, query, settings.path)
    return query


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


_FILES_DDL = "path STRING, size BIGINT, partition_values STRING, modification_time BIGINT, stats STRING"


def delta_batch_writer(settings: ChangelogSettings, checkpoint: str | None):
    """The ``foreachBatch`` function of a Delta changelog.

    The read tasks write the batch's Parquet files into the table folder themselves
    (``_write_files``, one file per partition value per task, streamed: no task holds
    more than a record batch per partition), and return only each file's name, size
    and statistics; the driver then makes the batch's one Delta commit naming those
    files. Files of a batch killed before its commit are in no version: no reader
    sees them, and vacuum removes them."""
    from mysqlcdc.spark.checkpoint import batch_offset, local_dir, query_id

    uri = table_uri(settings.path)
    local = local_dir(checkpoint) if checkpoint else None
    state: dict = {}

    def run(df, batch_id: int) -> None:
        if "app_id" not in state:
            state["app_id"] = settings.app_id(query_id(checkpoint))
            state["clock"] = _clock_from_history(settings) if settings.maintains else None
        if not _already(uri, state["app_id"], batch_id):
            started = time.perf_counter()
            schema = _arrow_schema(df.schema)
            files = df.mapInArrow(_write_files(uri, batch_id, settings.partition_by),
                                  _FILES_DDL).collect()
            written = time.perf_counter()
            if files:
                end = batch_offset(local, batch_id) if local is not None else None
                meta = {"mysqlcdc.end_position": str(end)} if end is not None else {}
                rows = _commit_files(uri, state["app_id"], batch_id, files, schema,
                                     settings.partition_by, meta)
                log.info("changelog %s: batch %d: %d changes in %d file(s) (write %.2f s, "
                         "commit %.2f s)", uri, batch_id, rows, len(files),
                         written - started, time.perf_counter() - written)
        clock = state["clock"]
        if clock is not None and clock.tick():
            log.info("changelog %s: %s", uri,
                     maintain_delta(settings, compact=settings.compacts).line())
    return run


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
        from deltalake.schema import Field, Schema

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


def _escape(value) -> str:
    from urllib.parse import quote

    return "__HIVE_DEFAULT_PARTITION__" if value is None else quote(str(value), safe="")


def _write_files(root: str, batch_id: int, partition_by: tuple[str, ...]):
    """The ``mapInArrow`` function: the task's rows -> Parquet files under ``root``."""
    parts = list(partition_by)

    def write(batches):
        import os
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        token = uuid.uuid4().hex
        open_files: dict[tuple, dict] = {}

        def file_for(key: tuple, schema) -> dict:
            entry = open_files.get(key)
            if entry is None:
                folder = "/".join(f"{c}={_escape(v)}" for c, v in zip(parts, key))
                rel = (f"{folder}/" if folder else "") + \
                    f"part-{batch_id:010d}-{token}-{len(open_files):04d}.snappy.parquet"
                os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
                entry = {"rel": rel, "values": dict(zip(parts, key)), "rows": 0,
                         "min": None, "max": None, "nulls": 0,
                         "writer": pq.ParquetWriter(os.path.join(root, rel), schema,
                                                    compression="snappy")}
                open_files[key] = entry
            return entry

        def add(key: tuple, table) -> None:
            data = table.drop_columns(parts) if parts else table
            entry = file_for(key, data.schema)
            entry["writer"].write_table(data)
            entry["rows"] += data.num_rows
            if "ts_ms" in data.column_names:
                ts = data.column("ts_ms")
                entry["nulls"] += ts.null_count
                lo, hi = pc.min(ts).as_py(), pc.max(ts).as_py()
                if lo is not None:
                    entry["min"] = lo if entry["min"] is None else min(entry["min"], lo)
                    entry["max"] = hi if entry["max"] is None else max(entry["max"], hi)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            if not parts:
                add((), table)
                continue
            for combo in table.select(parts).group_by(parts).aggregate([]).to_pylist():
                mask = None
                for c in parts:
                    v = combo[c]
                    m = pc.is_null(table.column(c)) if v is None else pc.equal(table.column(c), v)
                    mask = m if mask is None else pc.and_(mask, m)
                add(tuple(combo[c] for c in parts), table.filter(mask))

        out = {"path": [], "size": [], "partition_values": [], "modification_time": [],
               "stats": []}
        for entry in open_files.values():
            entry["writer"].close()
            full = os.path.join(root, entry["rel"])
            stats = {"numRecords": entry["rows"]}
            if entry["min"] is not None:
                stats.update(minValues={"ts_ms": entry["min"]}, maxValues={"ts_ms": entry["max"]},
                             nullCount={"ts_ms": entry["nulls"]})
            out["path"].append(entry["rel"])
            out["size"].append(os.path.getsize(full))
            out["partition_values"].append(json.dumps(
                {k: (None if v is None else str(v)) for k, v in entry["values"].items()}))
            out["modification_time"].append(int(os.path.getmtime(full) * 1000))
            out["stats"].append(json.dumps(stats))
        if out["path"]:
            yield pa.RecordBatch.from_pydict(out, schema=pa.schema([
                ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
                ("modification_time", pa.int64()), ("stats", pa.string())]))
    return write


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
    table's latest TRUNCATE (``op = 't'``); schema changes (``op = 's'``) are not rows. ``after`` holds the row as
    JSON; ``from_json`` or ``get_json_object`` turns it into columns.
    """
    return f"""
SELECT key, after AS row, seq AS last_seq
FROM (
  SELECT key, op, after, seq,
         ROW_NUMBER() OVER (PARTITION BY key ORDER BY seq DESC) AS rn
  FROM {view}
  WHERE db = '{_quote(db)}' AND `table` = '{_quote(table)}' AND op IN ('c', 'u', 'd', 'r')
    AND seq > (SELECT coalesce(max(seq), -1) FROM {view}
               WHERE db = '{_quote(db)}' AND `table` = '{_quote(table)}' AND op = 't')
)
WHERE rn = 1 AND op <> 'd'
""".strip()


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
