"""Typed settings of the changelog sink, built from its config model."""

from __future__ import annotations

from dataclasses import dataclass

from mysqlcdc.config.fields import duration_seconds, parse_every

__all__ = ["ChangelogSettings", "from_sink_config", "RETENTION_CHECK_S"]

RETENTION_CHECK_S = 3600.0     # how often retention runs when no compaction is configured


@dataclass(frozen=True)
class ChangelogSettings:
    path: str
    format: str = "parquet"                       # parquet | delta
    partition_by: tuple[str, ...] = ("db", "table")
    pipeline: str = "mysqlcdc"
    sink_index: int = 0
    compact_batches: int | None = None            # compact every N batches (delta)
    compact_seconds: float | None = None          # or every this many seconds (delta)
    target_file_bytes: int = 128 << 20
    vacuum_after_s: float = 7 * 86400.0
    retention_s: float | None = None              # drop changes older than this (both formats)

    @property
    def compacts(self) -> bool:
        return self.compact_batches is not None or self.compact_seconds is not None

    @property
    def maintains(self) -> bool:
        """Whether a Delta changelog runs maintenance between batches: to compact, or to
        apply ``retention`` (hourly when no ``compact_every`` says otherwise)."""
        return self.compacts or self.retention_s is not None

    @property
    def maintenance_every(self) -> tuple[int | None, float | None]:
        """(batches, seconds) between maintenance passes of a Delta changelog."""
        if self.compacts:
            return self.compact_batches, self.compact_seconds
        return None, RETENTION_CHECK_S if self.retention_s is not None else None

    def app_id(self, query_id: str | None) -> str:
        """The Delta application id of this sink: pipeline, sink and checkpoint.

        The checkpoint's query id is part of it, so a pipeline restarted from a *new*
        checkpoint (whose batch ids start again at 0) is never mistaken for a replay
        of the batches the table already holds."""
        base = f"mysqlcdc/{self.pipeline}/{self.sink_index}-changelog"
        return f"{base}/{query_id}" if query_id else base


def from_sink_config(sink, pipeline: str, index: int) -> ChangelogSettings:
    """``ChangelogSinkConfig`` -> ``ChangelogSettings``."""
    batches, seconds = parse_every(sink.compact_every) if sink.compact_every else (None, None)
    return ChangelogSettings(
        path=str(sink.path), format=sink.format, partition_by=tuple(sink.partition_by),
        pipeline=pipeline, sink_index=index, compact_batches=batches, compact_seconds=seconds,
        target_file_bytes=sink.target_file_mb << 20,
        vacuum_after_s=duration_seconds(sink.vacuum_after),
        retention_s=duration_seconds(sink.retention) if sink.retention else None,
    )
