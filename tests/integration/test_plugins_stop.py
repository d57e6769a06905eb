"""The plugins sink's ``deinit`` when its query stops: called once, and before the code
that stopped the query goes on (the query listener's event arrives on its own thread,
possibly after a new run of the same pipeline has started)."""

from __future__ import annotations

import threading

import pytest

from mysqlcdc.sinks.plugins import PluginsSettings, start_plugins, stopped

pytestmark = pytest.mark.integration


class Calls:
    seen: list[str] = []
    lock = threading.Lock()

    def init(self, ctx):
        with Calls.lock:
            Calls.seen.append("init")

    def deinit(self):
        with Calls.lock:
            Calls.seen.append("deinit")


def test_deinit_is_called_once_and_before_stopped_returns(spark, tmp_path):
    Calls.seen = []
    df = spark.readStream.format("rate").option("rowsPerSecond", 1).load().where("false")
    settings = PluginsSettings(classes=(("Calls", Calls),), state_dir=str(tmp_path / "state"))
    for run in range(2):
        query = start_plugins(df, settings, checkpoint=str(tmp_path / "ck"),
                              trigger_interval="100 milliseconds")
        query.processAllAvailable()
        query.stop()
        stopped(query)
        assert Calls.seen == ["init", "deinit"] * (run + 1)
    query.awaitTermination(10)
    stopped(query)                        # again, and the listener's late event: no effect
    assert Calls.seen == ["init", "deinit", "init", "deinit"]
