"""XA transactions through ``mysqlcdc run`` (capture.xa, DESIGN.md decision 32): across
runs of the pipeline, its snapshot and its read tasks, the changelog's current state is
the table's, with no rolled-back change in it."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.sinks.changelog import current_state_sql, read_changelog

from tests.support.mariadb import xa_finish
from tests.e2e.test_backfill import _config, _in_process, _source, own  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e


def _prepare(server, xid: str, *statements: str) -> None:
    server.sql(f"XA START '{xid}'", *statements, f"XA END '{xid}'", f"XA PREPARE '{xid}'")


def test_prepared_transactions_appear_when_they_commit_and_never_when_rolled_back(
        spark, own, tmp_path):
    own.sql("CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.t SELECT seq, seq FROM shop.seq_1_to_200")
    # prepared before the pipeline ever ran: not in its snapshot (not committed)
    _prepare(own, "before", "INSERT INTO shop.t VALUES (1000, 1)",
             "UPDATE shop.t SET v = -1 WHERE id = 1")
    config = _config(tmp_path, own, ["shop.t"], 7971, mode="initial")
    _in_process(spark, config)
    _prepare(own, "later", "INSERT INTO shop.t VALUES (1001, 2)", "DELETE FROM shop.t WHERE id = 2")
    _prepare(own, "undone", "INSERT INTO shop.t VALUES (1002, 3)", "UPDATE shop.t SET v = 0 WHERE id = 3")
    own.sql("INSERT INTO shop.t VALUES (1003, 4)")
    _in_process(spark, config)                       # all three still open here
    xa_finish(own, "XA COMMIT 'before'")
    xa_finish(own, "XA ROLLBACK 'undone'")
    own.sql("INSERT INTO shop.t VALUES (1004, 5)")
    xa_finish(own, "XA COMMIT 'later'")
    own.sql("UPDATE shop.t SET v = 7 WHERE id = 1001")
    _in_process(spark, config)
    changelog = str(tmp_path / "changelog")
    read_changelog(spark, changelog).createOrReplaceTempView("xa")
    current = {json.dumps(json.loads(r["row"]), sort_keys=True)
               for r in spark.sql(current_state_sql("xa", "shop", "t")).collect()}
    assert current == _source(own, "shop", "t")
    rows = [r.asDict() for r in read_changelog(spark, changelog).collect()]
    assert not [r for r in rows if r["key"] == '{"id":1002}' or r["after"] == '{"id":3,"v":0}']
    [ins] = [r for r in rows if r["key"] == '{"id":1000}']
    assert ins["op"] == "c"                          # at the commit, after the snapshot
    assert int(ins["seq"]) > max(int(r["seq"]) for r in rows if r["key"] == '{"id":1003}')
