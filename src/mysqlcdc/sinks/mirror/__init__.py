"""Mirror sink: the current state (or every version) of every captured table kept live in
a target.

``start_mirror(df, settings, checkpoint=...)`` starts a ``foreachBatch`` query that
applies each micro-batch as one target transaction (see :mod:`.writer`).
Targets: PostgreSQL (:mod:`.postgresql`), MySQL/MariaDB (:mod:`.mysql`),
Redis (:mod:`.redis`), Delta Lake (:mod:`.delta`, with :func:`read_consistent`).
History tables (``mode: history``): :mod:`.history`.
"""

from __future__ import annotations

from mysqlcdc.sinks.mirror.settings import MirrorSettings, from_sink_config

__all__ = ["MirrorSettings", "start_mirror", "make_target", "from_sink_config", "read_position",
           "read_consistent"]


def read_consistent(root):
    """All tables of a Delta mirror as of one binlog position (see :mod:`.delta`)."""
    from mysqlcdc.sinks.mirror.delta import read_consistent as read

    return read(root)


def make_target(settings: MirrorSettings, checkpoint: str | None = None):
    """A new (unconnected) target object for ``settings.target``; ``checkpoint`` names
    the Spark checkpoint whose query id the Delta target's application id includes."""
    if settings.target == "postgresql":
        from mysqlcdc.sinks.mirror.postgresql import PostgresTarget

        return PostgresTarget(settings)
    if settings.target == "mysql":
        from mysqlcdc.sinks.mirror.mysql import MySQLTarget

        return MySQLTarget(settings)
    if settings.target == "redis":
        from mysqlcdc.sinks.mirror.redis import RedisTarget

        return RedisTarget(settings)
    if settings.target == "delta":
        from mysqlcdc.sinks.mirror.delta import DeltaTarget
        from mysqlcdc.spark.checkpoint import query_id

        return DeltaTarget(settings, settings.app_id(query_id(checkpoint)))
    raise AssertionError(settings.target)   # MirrorSettings validates the name


def start_mirror(df, settings: MirrorSettings, *, checkpoint: str,
                 trigger_interval: str = "1 second", name: str | None = None,
                 available_now: bool = False):
    """Start the query keeping ``settings``' target equal to the source tables."""
    from mysqlcdc.sinks.mirror.writer import foreach_batch
    from mysqlcdc.spark.stopping import quiet_on_stop

    writer = (df.writeStream.foreachBatch(quiet_on_stop(foreach_batch(
        settings, lambda: make_target(settings, checkpoint), checkpoint)))
              .option("checkpointLocation", checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    return writer.start()


def read_position(settings: MirrorSettings) -> dict:
    """What the target's ledger says: the last committed batch id, its end binlog position
    (``file:pos``) and ``seq``, and the stopped tables. Every table of the target reflects
    the source exactly up to that position (one transaction per batch), except stopped ones.
    A Delta target adds ``tables``: each table's version and its last commit's batch id and
    position (a table may be ahead of the ledger while a batch is being applied)."""
    from mysqlcdc.sinks.mirror.writer import run_with_retries

    return run_with_retries(lambda: make_target(settings),
                            lambda t: t.read_position(settings.pipeline), attempts=1,
                            initial_delay_s=0, max_delay_s=0, what=f"{settings.target} mirror")
