"""The plugins sink's runner (no Spark): callback order, trx ids and gsns, rollbacks,
missing methods, replays and failures."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mysqlcdc.errors import PluginError
from mysqlcdc.sinks.plugins.settings import PluginsSettings
from mysqlcdc.sinks.plugins.writer import PluginRunner

from tests.unit.transforms.rows import batch, row

pytestmark = pytest.mark.unit


class Recorder:
    calls: list = []

    def init(self, ctx):
        Recorder.calls.append(("init", ctx.options["x"]))
        self.ctx = ctx

    def begin_trx(self, trx_id, gsn_hwm):
        Recorder.calls.append(("begin", trx_id, gsn_hwm, self.ctx.batch_id))

    def commit_trx(self, trx_id, last_gsn):
        Recorder.calls.append(("commit", trx_id, last_gsn))

    def rollback_trx(self, trx_id):
        Recorder.calls.append(("rollback", trx_id))

    def insert(self, row, db, table, trx_id, gsn):
        Recorder.calls.append(("insert", row["id"], table, trx_id, gsn))

    def delete(self, row, db, table, trx_id, gsn):
        Recorder.calls.append(("delete", row["id"], table, trx_id, gsn))

    def update_before(self, row, db, table, trx_id, gsn):
        Recorder.calls.append(("before", row["v"], trx_id, gsn))

    def update_after(self, row, db, table, trx_id, gsn):
        Recorder.calls.append(("after", row["v"], trx_id, gsn))

    def deinit(self):
        Recorder.calls.append(("deinit",))


class OnlyInserts:
    seen: list = []

    def insert(self, row, db, table, trx_id, gsn):
        if row["id"] == 99:
            raise KeyError("no 99")
        OnlyInserts.seen.append(gsn)


def _runner(tmp_path, *classes):
    Recorder.calls = []
    return PluginRunner(PluginsSettings(classes=tuple((c.__name__, c) for c in classes),
                                        state_dir=str(tmp_path), options={"x": 1}))


def _batch1():
    rows = [row("c", "t", after={"id": 1}, txn="a", seq=3),
            row("u", "t", before={"id": 1, "v": 1}, after={"id": 1, "v": 2}, txn="a", seq=5),
            row("s", "t", after={"table": "t"}, txn="ddl", seq=6),
            row("c", "m", after={"id": 2}, txn="b", seq=7),
            dict(row("c", "m", txn="b", seq=8), op="x", table=None, key=None),
            row("d", "t", before={"id": 1, "v": 2}, txn="c", seq=9)]
    b = batch(*rows)
    return pa.Table.from_batches([b]).take([5, 3, 0, 4, 1, 2])     # arrives unordered


def test_callbacks_in_binlog_order(tmp_path):
    runner = _runner(tmp_path, Recorder)
    runner.run_batch(0, _batch1())
    assert Recorder.calls == [
        ("init", 1),
        ("begin", 1, 0, 0), ("insert", 1, "t", 1, 1), ("before", 1, 1, 2), ("after", 2, 1, 3),
        ("commit", 1, 3),
        ("begin", 2, 3, 0), ("insert", 2, "m", 2, 4), ("rollback", 2),
        ("begin", 3, 4, 0), ("delete", 1, "t", 3, 5), ("commit", 3, 5)]
    Recorder.calls.clear()
    runner.run_batch(0, _batch1())                         # a replay numbers the same
    assert Recorder.calls[0] == ("begin", 1, 0, 0) and Recorder.calls[-1] == ("commit", 3, 5)
    Recorder.calls.clear()
    runner.run_batch(1, pa.Table.from_batches([batch(row("c", "t", after={"id": 5},
                                                         txn="d", seq=20))]))
    assert Recorder.calls == [("begin", 4, 5, 1), ("insert", 5, "t", 4, 6), ("commit", 4, 6)]
    runner.deinit()
    runner.deinit()
    assert Recorder.calls[-1] == ("deinit",) and Recorder.calls.count(("deinit",)) == 1
    # a new run (a restart) continues the numbering from the checkpoint folder
    again = _runner(tmp_path, Recorder)
    again.run_batch(2, pa.Table.from_batches([batch(row("c", "t", after={"id": 6},
                                                        txn="e", seq=30))]))
    assert Recorder.calls[1:] == [("begin", 5, 6, 2), ("insert", 6, "t", 5, 7), ("commit", 5, 7)]


def test_missing_methods_are_skipped_and_failures_are_named(tmp_path):
    OnlyInserts.seen = []
    runner = _runner(tmp_path, OnlyInserts, Recorder)
    runner.run_batch(0, _batch1())
    assert OnlyInserts.seen == [1, 4]
    bad = pa.Table.from_batches([batch(row("c", "t", after={"id": 99}, txn="z", seq=40))])
    with pytest.raises(PluginError) as err:
        runner.run_batch(1, bad)
    assert "OnlyInserts: insert()" in err.value.message and "KeyError" in err.value.message
    assert "seq 40" in err.value.message and "raise KeyError" in err.value.detail
