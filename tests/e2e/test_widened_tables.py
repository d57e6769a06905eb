"""A pipeline whose ``source.tables`` the user widens between runs: the tables it captures
now that the last run left out are read as a backfill, so their current state in the
changelog is the table's (their rows before the run were never in the stream)."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.sinks.changelog import current_state_sql, read_changelog

from tests.e2e.test_backfill import _config, _in_process, _source, own  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e


def test_tables_added_to_the_filter_are_read_again(spark, own, tmp_path):
    own.sql("CREATE TABLE shop.a (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.a SELECT seq, seq FROM shop.seq_1_to_50",
            "CREATE TABLE shop.b (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.b SELECT seq, seq FROM shop.seq_1_to_300",
            "CREATE TABLE shop.c (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.c SELECT seq, seq FROM shop.seq_1_to_5")
    _in_process(spark, _config(tmp_path, own, ["shop.a"], 7991, mode="initial"))
    own.sql("UPDATE shop.b SET v = -v WHERE id <= 10", "INSERT INTO shop.a VALUES (1000, 1)")
    config = _config(tmp_path, own, ["shop.a", "shop.b"], 7991, mode="initial")
    _in_process(spark, config)                       # b added: read again
    own.sql("DELETE FROM shop.b WHERE id = 300")
    _in_process(spark, config)                       # the same filter: nothing read again
    changelog = str(tmp_path / "changelog")
    read_changelog(spark, changelog).createOrReplaceTempView("widened")
    for table in ("a", "b"):
        current = {json.dumps(json.loads(r["row"]), sort_keys=True)
                   for r in spark.sql(current_state_sql("widened", "shop", table)).collect()}
        assert current == _source(own, "shop", table), table
    rows = [r.asDict() for r in read_changelog(spark, changelog).collect()]
    assert sum(1 for r in rows if r["table"] == "b" and r["op"] == "r") == 300
    assert sum(1 for r in rows if r["table"] == "a" and r["op"] == "r") == 50   # once
    assert not [r for r in rows if r["table"] == "c"]
