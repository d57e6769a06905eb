"""The schema history of a new pipeline that starts far back is made while Spark starts
(``pipeline.runner.history_ahead``, DESIGN.md decision 23): the stream then finds it
ready and walks nothing again; a verdict on the binlog is raised as the stream would."""

from __future__ import annotations

from pathlib import Path

import pytest

from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.config import load_pipeline
from mysqlcdc.errors import SchemaBootstrapError
from mysqlcdc.pipeline.runner import history_ahead, schema_history_dir, source_options
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.spark.options import SourceOptions

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, mariadb, db: str, start: str, server_id: int):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: ahead
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: {server_id}
  start: "{start}"
  tables: {{include: ["{db}.*"]}}
spark: {{checkpoint: {tmp_path / "checkpoint"}}}
sinks:
  - changelog: {{path: {tmp_path / "changelog"}}}
  - changelog: {{path: {tmp_path / "changelog2"}}}
""")
    return load_pipeline(path)


def test_made_ahead_for_every_new_sink_and_found_ready(mariadb, fresh_db, tmp_path):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.a (id INT PRIMARY KEY)")
    start = binlog_position(mariadb)
    mariadb.sql(f"INSERT INTO `{fresh_db}`.a VALUES (1)",
                f"CREATE TABLE `{fresh_db}`.b (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO `{fresh_db}`.b VALUES (1, 2)")
    cfg = _config(tmp_path, mariadb, fresh_db, str(start), 4710)
    history_ahead(cfg)()
    for index in range(2):
        folder = schema_history_dir(cfg, index)
        history = SchemaHistory(folder)
        assert history.bootstrapped
        # a exists at the start; b is created after it, so it is absent there
        tables = history.tables_at(start)
        assert (fresh_db, "a") in tables and (fresh_db, "b") not in tables
        planner = RangePlanner(SourceOptions.parse({**source_options(cfg, index),
                                                    "schemaHistory": folder}))
        walked = []
        planner.ddl_scan = lambda *args: walked.append(args)
        try:
            planner.keeper.ensure(start, binlog_position(mariadb), planner.ddl_scan)
        finally:
            planner.close()
        assert walked == [], "the stream walked the binlog again"


def test_a_changed_table_is_refused_ahead_and_latest_walks_nothing(mariadb, fresh_db, tmp_path):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.a (id INT PRIMARY KEY)")
    start = binlog_position(mariadb)
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.a ADD COLUMN v INT")
    with pytest.raises(SchemaBootstrapError):
        history_ahead(_config(tmp_path / "old", mariadb, fresh_db, str(start), 4720))()
    latest = _config(tmp_path / "new", mariadb, fresh_db, "latest", 4730)
    history_ahead(latest)()
    assert not SchemaHistory(schema_history_dir(latest, 0)).bootstrapped   # the stream's job


def test_a_ddl_between_the_position_and_the_definitions_is_walked(mariadb, fresh_db, tmp_path):
    """The bootstrap reads the server's position, then the tables' definitions. An ALTER
    that ran between the two is in the definitions: the walk must reach it, or the
    history holds the column at the start and the stream's ALTER then quarantines the
    table (`duplicate column`), as a chaos run found at a pipeline's start."""
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.a (id INT PRIMARY KEY)")
    start = binlog_position(mariadb)
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.a ADD COLUMN v INT")   # after `start` was read
    cfg = _config(tmp_path, mariadb, fresh_db, str(start), 4740)
    folder = schema_history_dir(cfg, 0)
    planner = RangePlanner(SourceOptions.parse({**source_options(cfg, 0),
                                                "schemaHistory": folder}))
    try:
        with pytest.raises(SchemaBootstrapError):            # as the server's position then
            planner.keeper.ensure(start, start, planner._walk_ddl_recorded)
    finally:
        planner.close()
    assert not SchemaHistory(folder).bootstrapped
