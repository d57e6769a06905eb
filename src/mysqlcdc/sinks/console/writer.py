"""The console sink: prints each micro-batch (for trying things out)."""

from __future__ import annotations

__all__ = ["start_console"]


def start_console(df, *, checkpoint: str, trigger_interval: str, max_rows: int = 20,
                  truncate: bool = True, name: str | None = None):
    writer = (
        df.writeStream.format("console")
        .option("numRows", str(max_rows))
        .option("truncate", "true" if truncate else "false")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger_interval)
    )
    if name:
        writer = writer.queryName(name)
    return writer.start()
