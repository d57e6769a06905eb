"""A DDL the history cannot apply holds back one table; the others keep flowing; the
documented command releases it and nothing is lost. And the history refuses to start
from today's definitions at an older position unless asked to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mysqlcdc.cli.main import app
from mysqlcdc.config.loader import load_pipeline
from mysqlcdc.pipeline.runner import run_pipeline

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e



def _config(tmp_path: Path, mariadb, db: str, start: str, server_id: int, **source) -> Path:
    extra = "".join(f"  {k}: {v}\n" for k, v in source.items())
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: quarantine-test
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["{db}.*"]
  max_events_per_batch: 5
{extra}spark:
  checkpoint: {tmp_path / "checkpoint"}
  trigger_interval: "200 milliseconds"
sinks:
  - changelog:
      path: {tmp_path / "changelog"}
""")
    return path


def _rows(spark, tmp_path: Path) -> list:
    return spark.read.parquet(str(tmp_path / "changelog")).collect()


def _inserted(rows) -> list[tuple[str, dict]]:
    return sorted(((r["table"], json.loads(r["after"])) for r in rows if r["op"] == "c"),
                  key=lambda x: (x[0], x[1]["id"]))


def test_unparseable_ddl_quarantines_one_table_until_resolved(spark, mariadb, fresh_db, tmp_path):
    mariadb.sql("CREATE TABLE q (id INT PRIMARY KEY, s VARCHAR(10))",
                "CREATE TABLE ok (id INT PRIMARY KEY, v INT)", db=fresh_db)
    config = _config(tmp_path, mariadb, fresh_db, str(binlog_position(mariadb)), 4600)
    cfg = load_pipeline(config)
    mariadb.sql("INSERT INTO q VALUES (1, 'a')", "INSERT INTO ok VALUES (1, 1)", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)

    # a DDL the history refuses to guess at (CONVERT TO the binary charset)
    mariadb.sql("ALTER TABLE q CONVERT TO CHARACTER SET binary",
                "INSERT INTO q VALUES (2, 'b')", "INSERT INTO ok VALUES (2, 2)", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)
    assert _inserted(_rows(spark, tmp_path)) == [
        ("ok", {"id": 1, "v": 1}), ("ok", {"id": 2, "v": 2}), ("q", {"id": 1, "s": "a"})]

    runner = CliRunner()
    shown = runner.invoke(app, ["schema", "history", str(config), f"{fresh_db}.q"])
    assert shown.exit_code == 0, shown.output
    assert "quarantine" in shown.output and "OPEN" in shown.output
    listed = [json.loads(line) for line in runner.invoke(
        app, ["schema", "history", str(config), f"{fresh_db}.q", "--json"]).output.splitlines()]
    assert [r["what"] for r in listed] == ["bootstrap", "quarantine"]
    assert listed[1]["ddl"] == "ALTER TABLE q CONVERT TO CHARACTER SET binary"
    assert listed[1]["resolved"] is None and "cannot be applied" in listed[1]["reason"]

    wrong = runner.invoke(app, ["schema", "resolve", str(config), f"{fresh_db}.ok", "--reload"])
    assert wrong.exit_code == 2 and "not quarantined" in wrong.output

    fixed = runner.invoke(app, ["schema", "resolve", str(config), f"{fresh_db}.q", "--reload"])
    assert fixed.exit_code == 0, fixed.output
    mariadb.sql("INSERT INTO q VALUES (3, 'c')", "INSERT INTO ok VALUES (3, 3)", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)

    rows = _rows(spark, tmp_path)
    assert _inserted(rows) == [
        ("ok", {"id": 1, "v": 1}), ("ok", {"id": 2, "v": 2}), ("ok", {"id": 3, "v": 3}),
        ("q", {"id": 1, "s": "a"}),
        ("q", {"id": 2, "s": "Yg=="}),     # held back, then re-read: now binary, so base64
        ("q", {"id": 3, "s": "Yw=="}),
    ]
    listed = [json.loads(line) for line in runner.invoke(
        app, ["schema", "history", str(config), f"{fresh_db}.q", "--json"]).output.splitlines()]
    assert listed[-1]["resolved"] == "reload"
    # the DDL's schema record, kept back by the quarantine, comes with the re-read rows
    (schema,) = [r for r in rows if r["op"] == "s" and r["table"] == "q"]
    assert schema["query"] == "ALTER TABLE q CONVERT TO CHARACTER SET binary"
    types = [(c["name"], c["type"]) for c in json.loads(schema["after"])["columns"]]
    assert types[1][1] != [(c["name"], c["type"]) for c in
                           json.loads(schema["before"])["columns"]][1][1], types
    held = [r for r in rows if r["table"] == "q" and r["op"] == "c" and
            json.loads(r["after"])["id"] == 2]
    assert schema["seq"] < held[0]["seq"]


def test_bootstrap_at_an_older_position_refuses_unless_asked(spark, mariadb, fresh_db, tmp_path):
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY)", db=fresh_db)
    start = str(binlog_position(mariadb))
    mariadb.sql("INSERT INTO a VALUES (1)", "ALTER TABLE a ADD COLUMN x INT",
                "INSERT INTO a VALUES (2, 20)",
                "CREATE TABLE b (id INT PRIMARY KEY, y VARCHAR(3))", "INSERT INTO b VALUES (1, 'y')",
                db=fresh_db)
    refused = tmp_path / "refused"
    refused.mkdir()
    cfg = load_pipeline(_config(refused, mariadb, fresh_db, start, 4610))
    with pytest.raises(Exception, match="SCHEMA_BOOTSTRAP_UNSAFE"):
        run_pipeline(cfg, until_idle=True, spark=spark)

    asked = tmp_path / "asked"
    asked.mkdir()
    cfg = load_pipeline(_config(asked, mariadb, fresh_db, start, 4620, schema_bootstrap="current"))
    run_pipeline(cfg, until_idle=True, spark=spark)
    # row 1 was written with one column: today's two-column definition does not fit it,
    # so the TABLE_MAP check holds `a` back instead of decoding it with wrong columns
    got = _inserted(_rows(spark, asked))
    assert ("b", {"id": 1, "y": "y"}) in got
    assert not any(t == "a" and r["id"] == 1 for t, r in got)


def test_bootstrap_at_an_older_position_is_fine_when_tables_were_only_created(
        spark, mariadb, fresh_db, tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql("CREATE TABLE c (id INT PRIMARY KEY, z DECIMAL(5,2))",
                "INSERT INTO c VALUES (1, 1.5)", "ALTER TABLE c ADD COLUMN w INT FIRST",
                "INSERT INTO c VALUES (7, 2, 2.25)", db=fresh_db)
    cfg = load_pipeline(_config(tmp_path, mariadb, fresh_db, start, 4630))
    run_pipeline(cfg, until_idle=True, spark=spark)
    assert _inserted(_rows(spark, tmp_path)) == [
        ("c", {"id": 1, "z": "1.50"}), ("c", {"w": 7, "id": 2, "z": "2.25"})]


def _two_sinks(tmp_path: Path, mariadb, db: str, start: str, sinks: int) -> Path:
    """The pipeline with its first ``sinks`` changelog sinks (each its own query and history)."""
    path = tmp_path / f"pipeline-{sinks}.yaml"
    listed = "".join(f"  - changelog:\n      path: {tmp_path / f'changelog-{i}'}\n"
                     for i in range(sinks))
    path.write_text(f"""
name: quarantine-behind
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 4610
  start: "{start}"
  tables:
    include: ["{db}.*"]
  max_events_per_batch: 5
spark:
  checkpoint: {tmp_path / "checkpoint"}
  trigger_interval: "200 milliseconds"
sinks:
{listed}""")
    return path


def test_a_resolve_reaches_a_sink_that_has_not_met_the_ddl_yet(spark, mariadb, fresh_db,
                                                               tmp_path):
    """One sink's query quarantined the table; another, behind it, had not read that far
    when the user resolved it. That one quarantined it later, with nobody to resolve it,
    and held its rows for good; now the resolution waits for it there."""
    mariadb.sql("CREATE TABLE q (id INT PRIMARY KEY, s VARCHAR(10))", db=fresh_db)
    start = str(binlog_position(mariadb))
    both = load_pipeline(_two_sinks(tmp_path, mariadb, fresh_db, start, 2))
    mariadb.sql("INSERT INTO q VALUES (1, 'a')", db=fresh_db)
    run_pipeline(both, until_idle=True, spark=spark)             # both histories exist
    mariadb.sql("ALTER TABLE q CONVERT TO CHARACTER SET binary",
                *[f"INSERT INTO q VALUES ({i}, 'b')" for i in range(2, 8)], db=fresh_db)
    first = load_pipeline(_two_sinks(tmp_path, mariadb, fresh_db, start, 1))
    run_pipeline(first, until_idle=True, spark=spark)            # only the first goes on

    config = tmp_path / "pipeline-2.yaml"
    resolved = CliRunner().invoke(app, ["schema", "resolve", str(config), f"{fresh_db}.q",
                                        "--reload"])
    assert resolved.exit_code == 0, resolved.output
    assert "not held there yet" in " ".join(resolved.output.split()), resolved.output
    mariadb.sql("INSERT INTO q VALUES (8, 'c')", db=fresh_db)
    run_pipeline(both, until_idle=True, spark=spark)

    for i in range(2):
        rows = spark.read.parquet(str(tmp_path / f"changelog-{i}")).collect()
        got = sorted(json.loads(r["after"])["id"] for r in rows if r["op"] == "c")
        assert got == list(range(1, 9)), (i, got)
    shown = CliRunner().invoke(app, ["schema", "history", str(config), f"{fresh_db}.q"])
    assert "OPEN" not in shown.output, shown.output


def test_a_mirror_retypes_the_column_of_a_reloaded_table(spark, mariadb, postgres, fresh_db,
                                                         tmp_path, monkeypatch):
    """The quarantined DDL changed a column's type: after `resolve --reload` the mirror
    changes its column too, and holds the values as the server does (the column stayed
    text, and the binary values landed in it as their bytea text: '\\x62')."""
    mariadb.sql("CREATE TABLE q (id INT PRIMARY KEY, s VARCHAR(10))", db=fresh_db)
    start = str(binlog_position(mariadb))
    monkeypatch.setenv("QUARANTINE_PG_PASSWORD", postgres.password)
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"""
name: quarantine-mirror
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 4620
  start: "{start}"
  tables:
    include: ["{fresh_db}.*"]
  max_events_per_batch: 5
spark:
  checkpoint: {tmp_path / "checkpoint"}
  trigger_interval: "200 milliseconds"
sinks:
  - mirror:
      target: postgresql
      host: {postgres.host}
      port: {postgres.port}
      user: {postgres.user}
      password_env: QUARANTINE_PG_PASSWORD
      database: {postgres.dbname}
""")
    cfg = load_pipeline(config)
    mariadb.sql("INSERT INTO q VALUES (1, 'a')", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)
    mariadb.sql("ALTER TABLE q CONVERT TO CHARACTER SET binary",
                "INSERT INTO q VALUES (2, 'b')", "UPDATE q SET s = 'c' WHERE id = 1", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)
    resolved = CliRunner().invoke(app, ["schema", "resolve", str(config), f"{fresh_db}.q",
                                        "--reload"])
    assert resolved.exit_code == 0, resolved.output
    mariadb.sql("INSERT INTO q VALUES (3, 'd')", db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)

    (kind,), = postgres.sql(f"SELECT data_type FROM information_schema.columns WHERE "
                            f"table_schema = '{fresh_db}' AND table_name = 'q' AND "
                            f"column_name = 's'")
    assert kind == "bytea"
    got = {i: bytes(v) for i, v in postgres.sql(f'SELECT id, s FROM "{fresh_db}".q')}
    assert got == {i: bytes(v) for i, v in mariadb.sql("SELECT id, s FROM q", db=fresh_db)}
