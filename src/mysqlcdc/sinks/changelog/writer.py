"""The Parquet changelog: one row per change, partitioned by db and table.

Written with Spark's own file sink, which commits each micro-batch through
its ``_spark_metadata`` log: a batch replayed after a crash replaces its own
files instead of adding duplicates, so the changelog holds every change
exactly once. Read it from the root folder (``spark.read.parquet(path)``),
which honours that log; globbing the part files directly does not.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["start_changelog", "read_changelog", "current_state_sql"]


def start_changelog(df, *, path: str, checkpoint: str, trigger_interval: str,
                    partition_by: Sequence[str] = ("db", "table"), name: str | None = None):
    """Start the streaming query that appends ``df`` to the changelog at ``path``."""
    writer = (
        df.writeStream.format("parquet")
        .option("path", path)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime=trigger_interval)
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if name:
        writer = writer.queryName(name)
    return writer.start()


def read_changelog(spark, path: str):
    """The changelog as a DataFrame (only committed batches)."""
    return spark.read.parquet(path)


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
