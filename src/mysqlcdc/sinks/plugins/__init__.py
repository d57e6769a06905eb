"""Plugins sink: FlexCDC-style callbacks per transaction and row image (see :mod:`.plugin`).

``start_plugins(df, settings, checkpoint=...)`` creates the plugin instances, calls their
``init``, starts the query whose every micro-batch calls them in binlog order on the
driver, and calls ``deinit`` when the query ends (stopped or failed). The reader of this
sink's query must run with the ``emitRollbacks`` option, or ROLLBACKs go unseen.
"""

from __future__ import annotations

import logging

from mysqlcdc.sinks.plugins.plugin import CALLBACKS, Plugin, PluginContext
from mysqlcdc.sinks.plugins.settings import PluginsSettings

__all__ = ["Plugin", "PluginContext", "PluginsSettings", "start_plugins", "stopped",
           "CALLBACKS"]

log = logging.getLogger(__name__)

# each started query's plugin runner until its deinit was called, by the query object's
# id (no call into the JVM, which may be gone when the pipeline is interrupted)
_RUNNERS: dict[int, tuple[object, object]] = {}


def start_plugins(df, settings: PluginsSettings, *, checkpoint: str,
                  trigger_interval: str = "1 second", name: str | None = None):
    """Start the query calling the plugins for every change of ``df``."""
    from mysqlcdc.sinks.plugins.writer import PluginRunner
    from mysqlcdc.spark.stopping import quiet_on_stop

    runner = PluginRunner(settings)

    def each_batch(batch_df, batch_id: int) -> None:
        runner.run_batch(int(batch_id), batch_df.toArrow())

    writer = (df.writeStream.foreachBatch(quiet_on_stop(each_batch))
              .option("checkpointLocation", checkpoint).trigger(processingTime=trigger_interval))
    if name:
        writer = writer.queryName(name)
    try:
        query = writer.start()
    except Exception:
        runner.deinit()
        raise
    _deinit_when_done(df.sparkSession, query, runner)
    return query


def stopped(query) -> None:
    """``query`` has stopped: call its plugins' ``deinit`` now (if not called yet), so that
    it comes before anything the caller does next, such as running the pipeline again.
    The listener's termination event arrives on its own thread, possibly later."""
    started = _RUNNERS.get(id(query))     # holds the query: its id is not reused meanwhile
    if started is not None:
        _deinit(started[1])


def _deinit_when_done(spark, query, runner) -> None:
    """Call ``deinit`` once the query terminates (a listener on the driver, or
    :func:`stopped`), and at exit."""
    import atexit

    from pyspark.sql.streaming import StreamingQueryListener

    class _Done(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            pass

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            # by run id: a query restarted from the same checkpoint keeps its id, and the
            # previous run's termination may be delivered after this run started
            if str(event.runId) == str(query.runId):
                _deinit(runner)
                try:
                    spark.streams.removeListener(self)
                except Exception:   # noqa: BLE001 - the session may be stopping
                    pass

    _RUNNERS[id(query)] = (query, runner)
    spark.streams.addListener(_Done())
    atexit.register(_deinit, runner)


def _deinit(runner) -> None:
    for key, (_, known) in list(_RUNNERS.items()):
        if known is runner:
            _RUNNERS.pop(key, None)
    try:
        runner.deinit()
    except Exception as err:   # noqa: BLE001 - a plugin failing at the very end is logged
        log.error("%s", err)
