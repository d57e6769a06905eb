"""Typed settings of the mirror sink (picklable; the password is never in ``repr``)."""

from __future__ import annotations

from dataclasses import dataclass

from mysqlcdc.errors import ConfigError

__all__ = ["MirrorSettings", "TARGETS", "from_sink_config"]

TARGETS = ("postgresql", "mysql", "redis")


@dataclass(frozen=True)
class MirrorSettings:
    """Where and how the mirror writes.

    ``history_dir``: the folder of the schema history the source keeps for this sink's
    query (``<checkpoint>/mysqlcdc-schema``); the mirror reads each table's definition
    in force at a row's position from it when it creates a target table.
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

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(f"mirror target must be one of {', '.join(TARGETS)}, "
                              f"got {self.target!r}")

    def __repr__(self) -> str:   # the password stays out of logs and plans
        return (f"MirrorSettings(target={self.target!r}, host={self.host!r}, port={self.port}, "
                f"user={self.user!r}, database={self.database!r}, pipeline={self.pipeline!r})")

    __str__ = __repr__


def from_sink_config(sink, pipeline: str, history_dir: str | None) -> MirrorSettings:
    """Settings from a validated ``MirrorSinkConfig`` of the pipeline named ``pipeline``."""
    return MirrorSettings(
        target=sink.target, host=sink.host, port=sink.target_port(), user=sink.user,
        password=sink.password.reveal(), database=sink.target_database(), pipeline=pipeline,
        history_dir=history_dir, connect_timeout_s=sink.connect_timeout_s,
        key_template=getattr(sink, "key_template", MirrorSettings.key_template),
        ttl_s=getattr(sink, "ttl_s", None),
        attempts=sink.retry.attempts, initial_delay_s=sink.retry.initial_delay_s,
        max_delay_s=sink.retry.max_delay_s,
    )
