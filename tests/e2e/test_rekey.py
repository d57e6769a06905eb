"""A DDL that changes a table's key (DESIGN.md decision 33) through ``mysqlcdc run``: the
same row has another key text after it, so the rows sinks hold under the old one are
void (a ``t`` after the ``s``) and the table is read again; the changelog's current
state and a PostgreSQL mirror equal the table after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mysqlcdc.envelope.model import REKEY_NOTE
from mysqlcdc.sinks.changelog import current_state_sql, read_changelog

from tests.e2e.test_backfill import _in_process, _source, own  # noqa: F401 (a fixture)
from tests.support.mirror import assert_target_equals_source

pytestmark = pytest.mark.e2e


def _config(tmp_path: Path, server, pg) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: rekey
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: 7981
  tables: {{include: ["shop.*"]}}
  snapshot: {{mode: initial, chunk_rows: 50}}
spark:
  master: "local[2]"
  checkpoint: {tmp_path}/checkpoint
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog: {{path: {tmp_path}/changelog}}
  - mirror: {{target: postgresql, host: {pg.host}, port: {pg.port}, user: {pg.user},
              password_env: REKEY_PG_PASSWORD, database: postgres}}
""")
    return path


def test_a_key_change_reads_the_table_again(spark, own, postgres, tmp_path, monkeypatch):
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.nokey (a INT, b INT)",
            "INSERT INTO shop.nokey SELECT seq, seq FROM shop.seq_1_to_120",
            "CREATE TABLE shop.keyed (id INT PRIMARY KEY, v INT NOT NULL)",
            "INSERT INTO shop.keyed SELECT seq, seq FROM shop.seq_1_to_120",
            "CREATE TABLE shop.plain (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.plain SELECT seq, seq FROM shop.seq_1_to_10")
    config = _config(tmp_path, own, postgres)
    _in_process(spark, config)
    own.sql("ALTER TABLE shop.nokey ADD COLUMN c INT",         # every column is the key
            "DELETE FROM shop.nokey WHERE a <= 10", "UPDATE shop.nokey SET b = -b WHERE a > 100",
            "ALTER TABLE shop.keyed DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)",
            "DELETE FROM shop.keyed WHERE id <= 10", "UPDATE shop.keyed SET v = -v WHERE id > 100",
            "ALTER TABLE shop.plain ADD COLUMN w INT",          # the key stays: no re-read
            "UPDATE shop.plain SET w = 1 WHERE id = 1")
    _in_process(spark, config)
    changelog = str(tmp_path / "changelog")
    read_changelog(spark, changelog).createOrReplaceTempView("rekey")
    for table in ("nokey", "keyed"):
        current = {json.dumps(json.loads(r["row"]), sort_keys=True)
                   for r in spark.sql(current_state_sql("rekey", "shop", table)).collect()}
        assert current == _source(own, "shop", table), table
    plain = {r["key"] for r in spark.sql(current_state_sql("rekey", "shop", "plain")).collect()}
    assert len(plain) == 10           # (its images from before the ADD COLUMN lack w)
    rows = [r.asDict() for r in read_changelog(spark, changelog).collect()]
    resets = sorted(r["table"] for r in rows if r["op"] == "t")
    assert resets == ["keyed", "nokey"]
    assert all(r["query"].startswith(REKEY_NOTE) for r in rows if r["op"] == "t")
    again = [r for r in rows if r["op"] == "r" and r["table"] == "keyed"
             and json.loads(r["key"]).keys() == {"id", "v"}]
    assert len(again) == 110                          # read again, under the new key
    assert not [r for r in rows if r["op"] == "r" and r["table"] == "plain"
                and json.loads(r["after"]).get("w") is not None]
    assert_target_equals_source(own, postgres, "postgresql", "shop", ["keyed", "plain"])
