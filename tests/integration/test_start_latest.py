"""A new pipeline that starts at ``latest`` on a server where DDL keeps running: the
schema history starts at the position the query starts from, never refused because a
DDL ran between reading that position and the definitions."""

from __future__ import annotations

import threading
import time

import pytest

from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.spark.source import MysqlcdcStreamReader

pytestmark = pytest.mark.integration


def test_a_pipeline_starting_at_latest_rides_over_ddl_made_as_it_starts(
        mariadb, fresh_db, source_options, tmp_path):
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", db=fresh_db)
    stop = threading.Event()
    made = []

    def ddl() -> None:
        conn = mariadb.connect(database=fresh_db)
        conn.autocommit(True)
        with conn.cursor() as cur:
            while not stop.is_set():
                n = len(made)
                cur.execute(f"ALTER TABLE t ADD COLUMN c{n} INT")
                cur.execute(f"INSERT INTO t (id, v) VALUES ({n}, {n})")
                made.append(n)
                time.sleep(0.05)
        conn.close()

    thread = threading.Thread(target=ddl, daemon=True)
    thread.start()
    try:
        for run in range(4):
            reader = MysqlcdcStreamReader(SourceOptions.parse(source_options(
                include=f"{fresh_db}.*", schemaHistory=str(tmp_path / f"history{run}"),
                serverId=7400 + run)))
            try:
                offset = reader.initialOffset()
                before = len(made)
                while len(made) < before + 3:     # DDL after the start, before the first batch
                    time.sleep(0.02)
                end = reader.latestOffset(offset, reader.getDefaultReadLimit())
                assert end != offset, "a batch planned over the DDL"
                tasks = reader.partitions(offset, end)
                assert tasks
            finally:
                reader.stop()
    finally:
        stop.set()
        thread.join()
