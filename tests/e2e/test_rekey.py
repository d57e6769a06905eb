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


def _config(tmp_path: Path, server, pg, redis=None, batch: int | None = None) -> Path:
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
{"" if batch is None else f"  max_events_per_batch: {batch}"}
spark:
  master: "local[2]"
  checkpoint: {tmp_path}/checkpoint
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog: {{path: {tmp_path}/changelog}}
  - mirror: {{target: postgresql, host: {pg.host}, port: {pg.port}, user: {pg.user},
              password_env: REKEY_PG_PASSWORD, database: postgres}}
""" + ("" if redis is None else f"""  - mirror: {{target: redis, host: {redis.host}, port: {redis.port},
              password_env: REKEY_REDIS_PASSWORD}}
"""))
    return path


def _current_equals_source(spark, own, tmp_path: Path, view: str, tables) -> str:
    """Each of ``tables``' current state in the changelog is the server's table; returns
    the changelog's path (registered as ``view``)."""
    changelog = str(tmp_path / "changelog")
    read_changelog(spark, changelog).createOrReplaceTempView(view)
    for table in tables:
        current = {json.dumps(json.loads(r["row"]), sort_keys=True)
                   for r in spark.sql(current_state_sql(view, "shop", table)).collect()}
        assert current == _source(own, "shop", table), table
    return changelog


def test_a_key_change_reads_the_table_again(spark, own, postgres, redis_server, tmp_path,
                                            monkeypatch):
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    monkeypatch.setenv("REKEY_REDIS_PASSWORD", redis_server.password)
    own.sql("CREATE TABLE shop.nokey (a INT, b INT)",
            "INSERT INTO shop.nokey SELECT seq, seq FROM shop.seq_1_to_120",
            "CREATE TABLE shop.keyed (id INT PRIMARY KEY, v INT NOT NULL)",
            "INSERT INTO shop.keyed SELECT seq, seq FROM shop.seq_1_to_120",
            "CREATE TABLE shop.plain (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.plain SELECT seq, seq FROM shop.seq_1_to_10")
    config = _config(tmp_path, own, postgres, redis_server)
    _in_process(spark, config)
    own.sql("ALTER TABLE shop.nokey ADD COLUMN c INT",         # every column is the key
            "DELETE FROM shop.nokey WHERE a <= 10", "UPDATE shop.nokey SET b = -b WHERE a > 100",
            "ALTER TABLE shop.keyed DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)",
            "DELETE FROM shop.keyed WHERE id <= 10", "UPDATE shop.keyed SET v = -v WHERE id > 100",
            "ALTER TABLE shop.plain ADD COLUMN w INT",          # the key stays: no re-read
            "UPDATE shop.plain SET w = 1 WHERE id = 1")
    _in_process(spark, config)
    changelog = _current_equals_source(spark, own, tmp_path, "rekey", ("nokey", "keyed"))
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
    # Redis names each row's hash by its key: every one of the table's names changed
    names = {k.decode() for k in redis_server.client().scan_iter("shop:keyed:*")}
    assert names == {f"shop:keyed:{i}:{v}" for i, v in own.sql("SELECT id, v FROM shop.keyed")}


def test_renamed_dropped_and_created_again_tables_have_their_rows_once(
        spark, own, postgres, tmp_path, monkeypatch):
    """An online schema change whose helper tables are captured too (``shop.*``: the
    ghost table's copied rows are changes of ``_a_gho``), a table dropped and created
    again, one created again by CREATE OR REPLACE: the changelog's current state of every
    name equals the server's table, and a table renamed away or dropped has none."""
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.a (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.a SELECT seq, seq FROM shop.seq_1_to_100",
            "CREATE TABLE shop.g (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.g SELECT seq, seq FROM shop.seq_1_to_20",
            "CREATE TABLE shop.r (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.r SELECT seq, seq FROM shop.seq_1_to_20")
    config = _config(tmp_path, own, postgres)
    _in_process(spark, config)
    own.sql("CREATE TABLE shop._a_gho LIKE shop.a",
            "ALTER TABLE shop._a_gho ADD COLUMN w INT NOT NULL DEFAULT 7",
            "INSERT INTO shop._a_gho (id, v) SELECT id, v FROM shop.a",
            "UPDATE shop.a SET v = -v WHERE id <= 5", "UPDATE shop._a_gho SET v = -v WHERE id <= 5",
            "DELETE FROM shop.a WHERE id = 50", "DELETE FROM shop._a_gho WHERE id = 50",
            "RENAME TABLE shop.a TO shop._a_del, shop._a_gho TO shop.a",
            "DROP TABLE shop._a_del",
            "INSERT INTO shop.a VALUES (1000, 1, 8)",
            "DROP TABLE shop.g", "CREATE TABLE shop.g (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.g VALUES (1000, 1)",
            "CREATE OR REPLACE TABLE shop.r (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.r VALUES (2000, 2)")
    _in_process(spark, config)
    _current_equals_source(spark, own, tmp_path, "renames", ("a", "g", "r"))
    for gone in ("_a_gho", "_a_del"):
        assert not spark.sql(current_state_sql("renames", "shop", gone)).collect(), gone
    assert_target_equals_source(own, postgres, "postgresql", "shop", ["a", "g", "r"])


def test_a_column_added_with_a_default_reads_the_table_again(spark, own, postgres, redis_server,
                                                              tmp_path, monkeypatch):
    """ADD COLUMN ... DEFAULT gives every existing row a value, and MODIFY ... NOT NULL
    turns NULLs into zeros, without a row event: the binlog carries neither. Mirrors
    used to keep NULL in those rows for ever (and the changelog's current state images
    without the column); the table is read again after such a DDL."""
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    monkeypatch.setenv("REKEY_REDIS_PASSWORD", redis_server.password)
    own.sql("CREATE TABLE shop.filled (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.filled SELECT seq, IF(seq % 3 = 0, NULL, seq) FROM shop.seq_1_to_60")
    config = _config(tmp_path, own, postgres, redis_server)
    _in_process(spark, config)
    own.sql("SET SESSION sql_mode = ''",
            "ALTER TABLE shop.filled ADD COLUMN w INT NOT NULL DEFAULT 7, "
            "ADD COLUMN z VARCHAR(3) DEFAULT 'z', ADD COLUMN n INT",
            "UPDATE shop.filled SET w = 8 WHERE id = 1",
            "ALTER TABLE shop.filled MODIFY v INT NOT NULL",
            "DELETE FROM shop.filled WHERE id = 2")
    _in_process(spark, config)
    _current_equals_source(spark, own, tmp_path, "filled", ("filled",))
    # the two DDLs queued a read each; the second came before the first had begun, so
    # one read of the table served both
    reads = spark.sql("SELECT count(*) AS n FROM filled WHERE `table` = 'filled' AND op = 'r' "
                      "AND query LIKE 'backfill%'").collect()[0]["n"]
    assert reads == 59
    assert_target_equals_source(own, postgres, "postgresql", "shop", ["filled"])
    assert_target_equals_source(own, redis_server, "redis", "shop", ["filled"])


def test_names_swapped_by_one_rename_are_applied_in_its_order(spark, own, postgres, tmp_path,
                                                              monkeypatch):
    """``RENAME TABLE s TO s_old, s_new TO s`` with both names captured: the history
    listed a position's changes by table, not in the statement's order, and they shared
    one seq, so a mirror renamed ``s_new`` onto ``s`` first (dropping the old ``s``) and
    then the new ``s`` to ``s_old``, which the next statement dropped: ``s`` was gone
    from the target."""
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.s (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.s SELECT seq, seq FROM shop.seq_1_to_30")
    config = _config(tmp_path, own, postgres)
    _in_process(spark, config)
    own.sql("CREATE TABLE shop.s_new LIKE shop.s",
            "INSERT INTO shop.s_new SELECT id, -v FROM shop.s WHERE id <= 20",
            "RENAME TABLE shop.s TO shop.s_old, shop.s_new TO shop.s",
            "DROP TABLE shop.s_old",
            "INSERT INTO shop.s VALUES (99, 99)")
    _in_process(spark, config)
    assert_target_equals_source(own, postgres, "postgresql", "shop", ["s"])
    assert not postgres.sql("SELECT 1 FROM information_schema.tables WHERE table_schema = 'shop' "
                            "AND table_name IN ('s_old', 's_new')")
    _current_equals_source(spark, own, tmp_path, "swap", ("s",))
    rows = [r.asDict() for r in read_changelog(spark, str(tmp_path / "changelog")).collect()
            if r["op"] == "s" and r["query"] and r["query"].startswith("RENAME")]
    assert [(r["table"], r["row"]) for r in sorted(rows, key=lambda r: r["seq"])] == [
        ("s", 0), ("s_old", 1), ("s_new", 2), ("s", 3)]


def test_a_backfill_waits_for_a_ddl_the_server_ran_ahead_of_the_stream(
        spark, own, postgres, mariadb_target, tmp_path, monkeypatch):
    """The backfill an ADD COLUMN ... DEFAULT queues reads the table as the server has it
    now, which may be after a later ALTER the stream has not reached: its rows carried
    that ALTER's column in a batch before the ALTER's ``s``, and the MariaDB mirror
    stopped the table ("Unknown column"). The backfill now waits for the stream."""
    monkeypatch.setenv("REKEY_PG_PASSWORD", postgres.password)
    own.sql("CREATE TABLE shop.w (id INT PRIMARY KEY, v INT)",
            "INSERT INTO shop.w SELECT seq, seq FROM shop.seq_1_to_40")
    config = _config(tmp_path, own, postgres, batch=20)
    config.write_text(config.read_text() + f"""  - mirror: {{target: mysql, host: {mariadb_target.host},
              port: {mariadb_target.port}, user: {mariadb_target.user}, database: ahead}}
""")
    _in_process(spark, config)
    own.sql("ALTER TABLE shop.w ADD COLUMN a INT NOT NULL DEFAULT 1",
            *[f"UPDATE shop.w SET v = v + 1 WHERE id = {i}" for i in range(1, 40)],
            "ALTER TABLE shop.w ADD COLUMN b VARCHAR(5) DEFAULT 'x'",
            "UPDATE shop.w SET b = 'y' WHERE id = 2")
    _in_process(spark, config)
    for kind, server in (("postgresql", postgres), ("mysql", mariadb_target)):
        assert_target_equals_source(own, server, kind, "shop", ["w"])
    assert not mariadb_target.sql("SELECT 1 FROM ahead.mysqlcdc_mirror_stopped WHERE tbl = 'w'")
    _current_equals_source(spark, own, tmp_path, "ahead", ("w",))
