"""Typed settings of the mirror sink (picklable; the password is never in ``repr``)."""

from __future__ import annotations

from dataclasses import dataclass

from mysqlcdc.errors import ConfigError

__all__ = ["MirrorSettings", "TARGETS", "from_sink_config"]

TARGETS = ("postgresql", "mysql", "redis", "delta")
MODES = ("current", "history")
HISTORY_TARGETS = ("postgresql", "mysql", "delta")


@dataclass(frozen=True)
class MirrorSettings:
    """Where and how the mirror writes.

    ``history_dir``: the folder of the schema history the source keeps for this sink's
    query (``<checkpoint>/mysqlcdc-schema``); the mirror reads each table's definition
    in force at a row's position from it when it creates a target table.
    ``path``: the Delta target's root folder (one Delta table per source table under it).
    ``mode``: ``current`` (one row per key) or ``history`` (every version, see history.py).
    """

    target: str
    host: str = "127.0.0.1"
    port: int = 5432
    user: str | None = "postgres"
    password: str = ""
    database: str = "postgres"
    pipeline: str = "mysqlcdc"
    history_dir: str | None = None
    connect_timeout_s: float = 10.0
    key_template: str = "{db}:{table}:{pk}"
    ttl_s: float | None = None
    attempts: int = 8
    initial_delay_s: float = 0.5
    max_delay_s: float = 15.0
    path: str | None = None
    mode: str = "current"
    sink_index: int = 0
    compact_batches: int | None = None          # delta: compact every N batches
    compact_seconds: float | None = None        # or every this many seconds
    target_file_bytes: int = 128 << 20
    vacuum_after_s: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(f"mirror target must be one of {', '.join(TARGETS)}, "
                              f"got {self.target!r}")
        if self.mode not in MODES or (self.mode == "history" and
                                      self.target not in HISTORY_TARGETS):
            raise ConfigError(f"mirror mode {self.mode!r} is not available for target "
                              f"{self.target} (history: {', '.join(HISTORY_TARGETS)})")
        if self.target == "delta" and not self.path:
            raise ConfigError("the delta mirror target needs a path (its root folder)")

    def app_id(self, query_id: str | None) -> str:
        """The Delta application id of this sink: pipeline, sink and checkpoint (a new
        checkpoint, whose batch ids start again at 0, is never taken for a replay)."""
        base = f"mysqlcdc/{self.pipeline}/{self.sink_index}-mirror"
        return f"{base}/{query_id}" if query_id else base

    @property
    def unavailable_hint(self) -> str | None:
        """What MIRROR_TARGET_UNAVAILABLE tells to do, where the default does not fit."""
        if self.target == "delta":
            return ("Fix the storage under the mirror's path (space, permissions, mount) and "
                    "run the pipeline again: the batch is replayed and applied exactly once.")
        return None

    def __repr__(self) -> str:   # the password stays out of logs and plans
        if self.target == "delta":
            return (f"MirrorSettings(target='delta', path={self.path!r}, mode={self.mode!r}, "
                    f"pipeline={self.pipeline!r})")
        return (f"MirrorSettings(target={self.target!r}, host={self.host!r}, port={self.port}, "
                f"user={self.user!r}, database={self.database!r}, pipeline={self.pipeline!r}, "
                f"mode={self.mode!r})")

    __str__ = __repr__


def from_sink_config(sink, pipeline: str, history_dir: str | None,
                     index: int = 0) -> MirrorSettings:
    """Settings from a validated ``MirrorSinkConfig`` (sink ``index``) of the pipeline
    named ``pipeline``."""
    return MirrorSettings(
        target=sink.target, host=sink.host, port=sink.target_port(), user=sink.user,
        password=sink.password.reveal(), database=sink.target_database(), pipeline=pipeline,
        history_dir=history_dir, connect_timeout_s=sink.connect_timeout_s,
        key_template=getattr(sink, "key_template", MirrorSettings.key_template),
        ttl_s=getattr(sink, "ttl_s", None),
        attempts=sink.retry.attempts, initial_delay_s=sink.retry.initial_delay_s,
        max_delay_s=sink.retry.max_delay_s,
        path=str(sink.path) if getattr(sink, "path", None) else None,
        mode=getattr(sink, "mode", "current"), sink_index=index,
        **_compaction(sink),
    )


def _compaction(sink) -> dict:
    from mysqlcdc.config.fields import duration_seconds, parse_every

    every = getattr(sink, "compact_every", None)
    batches, seconds = parse_every(every) if every else (None, None)
    if not hasattr(sink, "vacuum_after"):
        return {}
    return {"compact_batches": batches, "compact_seconds": seconds,
            "target_file_bytes": sink.target_file_mb << 20,
            "vacuum_after_s": duration_seconds(sink.vacuum_after)}
