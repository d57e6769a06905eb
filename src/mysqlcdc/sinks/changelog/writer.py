"""The changelog: one row per change, partitioned by db and table, Parquet or Delta.

``format: parquet`` is written with Spark's own file sink, which commits each
micro-batch through its ``_spark_metadata`` log: a batch replayed after a crash
replaces its own files instead of adding duplicates. Spark reading the root folder
honours that log; a plain Parquet reader does not, so the sink removes a killed
batch's leftover files whenever it starts (``maintenance.remove_orphans``).

``format: delta`` writes a Delta Lake table with delta-rs from ``foreachBatch``:
the batch (bounded by ``source.max_events_per_batch``) is collected as Arrow on the
driver and appended in one Delta commit carrying the application transaction
``(app id, batch id)`` (``sinks.deltacommit``), so a replayed batch is skipped and
every reader at every moment sees whole batches exactly once. The commit's metadata
holds the batch id and the binlog position the batch ends at. Compaction, retention
and vacuum run between batches when ``compact_every`` says so.
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
    writer = writer.option("checkpointLocation", checkpoint).trigger(processingTime=trigger_interval)
    if name:
        writer = writer.queryName(name)
    return writer.start()


def _query_id(checkpoint: str | None) -> str | None:
    """The id Spark keeps in ``<checkpoint>/metadata`` for the life of the checkpoint."""
    from mysqlcdc.spark.checkpoint import local_dir

    local = local_dir(checkpoint) if checkpoint else None
    if local is None:
        return None
    try:
        return json.loads((local / "metadata").read_text().splitlines()[0]).get("id")
    except (OSError, ValueError, IndexError):
        return None


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


def delta_batch_writer(settings: ChangelogSettings, checkpoint: str | None):
    """The ``foreachBatch`` function of a Delta changelog."""
    from deltalake import write_deltalake

    from mysqlcdc.spark.checkpoint import batch_offset, local_dir

    uri = table_uri(settings.path)
    local = local_dir(checkpoint) if checkpoint else None
    state: dict = {}

    def run(df, batch_id: int) -> None:
        if "app_id" not in state:
            state["app_id"] = settings.app_id(_query_id(checkpoint))
            state["clock"] = _clock_from_history(settings) if settings.compacts else None
        data = df.toArrow()
        if data.num_rows:
            end = batch_offset(local, batch_id) if local is not None else None
            meta = {"mysqlcdc.end_position": str(end)} if end is not None else {}
            wrote = commit_once(
                uri, state["app_id"], batch_id,
                lambda props: write_deltalake(
                    uri, data, mode="append", partition_by=list(settings.partition_by) or None,
                    schema_mode="merge", commit_properties=props),
                metadata=meta)
            log.info("changelog %s: batch %d: %d changes%s", uri, batch_id, data.num_rows,
                     "" if wrote else " (already committed)")
        clock = state["clock"]
        if clock is not None and clock.tick():
            log.info("changelog %s: %s", uri, maintain_delta(settings).line())
    return run


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
