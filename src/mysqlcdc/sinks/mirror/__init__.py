"""Mirror sink: the current state of every captured table kept live in a target database.

``start_mirror(df, settings, checkpoint=...)`` starts a ``foreachBatch`` query that
applies each micro-batch as one target transaction (see :mod:`.writer`).
Targets: PostgreSQL (:mod:`.postgresql`), MySQL/MariaDB (:mod:`.mysql`),
Redis (:mod:`.redis`).
"""

from __future__ import annotations

from mysqlcdc.sinks.mirror.settings import MirrorSettings, from_sink_config

__all__ = ["MirrorSettings", "start_mirror", "make_target", "from_sink_config", "read_position"]


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

    writer = (df.writeStream.foreachBatch(foreach_batch(settings, lambda: make_target(settings),
                                                        checkpoint))
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    return writer.start()


def read_position(settings: MirrorSettings) -> dict:
    """What the target's ledger says: the last committed batch id, its end binlog position
    (``file:pos``) and ``seq``, and the stopped tables. Every table of the target reflects
    the source exactly up to that position (one transaction per batch), except stopped ones."""
    from mysqlcdc.sinks.mirror.writer import run_with_retries

    return run_with_retries(lambda: make_target(settings),
                            lambda t: t.read_position(settings.pipeline), attempts=1,
                            initial_delay_s=0, max_delay_s=0, what=f"{settings.target} mirror")
