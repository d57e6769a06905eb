"""FlexCDC-style changelog tables in PostgreSQL or MySQL/MariaDB (see :mod:`.writer`)."""

from __future__ import annotations

from mysqlcdc.sinks.changelog_table.settings import ChangelogTableSettings, from_sink_config

__all__ = ["ChangelogTableSettings", "start_changelog_table", "from_sink_config"]


def start_changelog_table(df, settings: ChangelogTableSettings, *, checkpoint: str,
                          trigger_interval: str = "1 second", name: str | None = None,
                          available_now: bool = False):
    """Start the query appending every change of ``df`` to its changelog table."""
    from mysqlcdc.sinks.changelog_table.writer import ChangelogDefinitions, changelog_rows
    from mysqlcdc.sinks.mirror import make_target
    from mysqlcdc.sinks.mirror.writer import foreach_batch
    from mysqlcdc.spark.stopping import quiet_on_stop

    target = settings.target
    run = foreach_batch(target, lambda: make_target(target), checkpoint,
                        definitions=ChangelogDefinitions(target.history_dir, settings.suffix),
                        transform=lambda rows, last: changelog_rows(rows, settings.suffix,
                                                                    last_rows=last),
                        ledger_name=settings.ledger_name, keep_on_create=True)
    writer = df.writeStream.foreachBatch(quiet_on_stop(run)).option("checkpointLocation",
                                                                    checkpoint)
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    return writer.start()
