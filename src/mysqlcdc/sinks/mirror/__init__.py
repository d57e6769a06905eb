"""Mirror sink: the current state of every captured table kept live in a target database.

``start_mirror(df, settings, checkpoint=...)`` starts a ``foreachBatch`` query that
applies each micro-batch as one target transaction (see :mod:`.writer`).
Targets: PostgreSQL (:mod:`.postgresql`), MySQL/MariaDB (:mod:`.mysql`),
Redis (:mod:`.redis`).
"""

from __future__ import annotations

from mysqlcdc.sinks.mirror.settings import MirrorSettings, from_sink_config

__all__ = ["MirrorSettings", "start_mirror", "make_target", "from_sink_config"]


def make_target(settings: MirrorSettings):
    """A new (unconnected) target object for ``settings.target``."""
    if settings.target == "postgresql":
        from mysqlcdc.sinks.mirror.postgresql import PostgresTarget

        return PostgresTarget(settings)
    if settings.target == "mysql":
        from mysqlcdc.sinks.mirror.mysql import MySQLTarget

        return MySQLTarget(settings)
    if settings.target == "redis":
        from mysqlcdc.sinks.mirror.redis import RedisTarget

        return RedisTarget(settings)
    raise AssertionError(settings.target)   # MirrorSettings validates the name


def start_mirror(df, settings: MirrorSettings, *, checkpoint: str,
                 trigger_interval: str = "1 second", name: str | None = None,
                 available_now: bool = False):
    """Start the query keeping ``settings``' target equal to the source tables."""
    from mysqlcdc.sinks.mirror.writer import foreach_batch

    writer = (df.writeStream.foreachBatch(foreach_batch(settings, lambda: make_target(settings)))
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    return writer.start()
