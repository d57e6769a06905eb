"""Transactions of tables a pipeline does not capture, passed over by the replication
stream (``capture.changes.PassOver``), against a real server: the same batch ends,
rows, event counts, bytes and GTID sets as decoding every event, on a binlog that mixes
them with captured tables, multi-table transactions, DDL, a non-transactional table and
a transaction larger than one read from the socket."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mysqlcdc.capture import batchend
from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.capture.task import read_range
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.spark.options import SourceOptions

from tests.support.mariadb import binlog_position
from tests.support.passover import count_passes

pytestmark = pytest.mark.integration


def _workload(mariadb, db: str) -> None:
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20))",
                f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, n INT, t TEXT)",
                f"CREATE TABLE `{db}`.c (id BIGINT PRIMARY KEY, d DECIMAL(8,2))",
                f"CREATE TABLE `{db}`.m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
    for i in range(40):                                      # not captured, one by one
        mariadb.sql(f"INSERT INTO `{db}`.b VALUES ({i}, {i}, 'x{i}')")
        if i % 7 == 0:
            mariadb.sql(f"INSERT INTO `{db}`.a VALUES ({i}, 'a{i}')")
    mariadb.sql("BEGIN", f"INSERT INTO `{db}`.b VALUES (100, 1, 'both')",   # one of each
                f"INSERT INTO `{db}`.a VALUES (100, 'both')", "COMMIT")
    mariadb.sql("BEGIN", f"UPDATE `{db}`.b SET n = n + 1 WHERE id < 20",    # two not captured
                f"INSERT INTO `{db}`.c VALUES (1, 1.5)", f"DELETE FROM `{db}`.b WHERE id > 30",
                "COMMIT")
    mariadb.sql(f"ALTER TABLE `{db}`.b ADD COLUMN w INT")                  # a new TABLE_MAP
    for i in range(200, 215):
        mariadb.sql(f"INSERT INTO `{db}`.b VALUES ({i}, {i}, 'y', {i})")
    mariadb.sql(f"INSERT INTO `{db}`.m VALUES (1, 1)", f"INSERT INTO `{db}`.m VALUES (2, 2)")
    big = "'" + "z" * 4000 + "'"                              # ~1.2 MB in one transaction
    mariadb.sql("BEGIN", *[f"INSERT INTO `{db}`.b VALUES ({i}, {i}, {big}, 0)"
                           for i in range(1000, 1300)], "COMMIT")
    for i in range(300, 320):
        mariadb.sql(f"INSERT INTO `{db}`.c VALUES ({i}, {i}.25)")
        mariadb.sql(f"UPDATE `{db}`.a SET v = 'u{i}' WHERE id = 0")


def _drive(planner: RangePlanner, start, max_events):
    """Batches as the stream reader plans and reads them: their ends, rows and records."""
    offset, ends, tables, found = {"file": start.file, "pos": start.pos}, [], [], []
    target = planner.current()
    while True:
        end = planner.plan_end(offset, max_events, target)
        if end == offset:
            break
        for task in planner.plan_tasks(offset, end):
            tables.append(pa.Table.from_batches(list(read_range(task)), schema=ARROW_SCHEMA))
        ends.append(planner.position_of(end))
        if batchend.pending(end):
            f = planner.found_of(end)
            found.append((f.events, f.bytes, f.rows, f.gtids, f.last_ts, f.reason))
        offset = end
    return ends, pa.concat_tables(tables), found


@pytest.mark.parametrize("max_events", [None, 9, 50])
def test_the_same_batches_as_decoding_every_event(mariadb, fresh_db, source_options, tmp_path,
                                                  monkeypatch, max_events):
    start = binlog_position(mariadb)
    _workload(mariadb, fresh_db)
    passed = count_passes(monkeypatch)
    runs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("MYSQLCDC_PASS_OVER", mode)
        planner = RangePlanner(SourceOptions.parse(source_options(
            startingPosition=str(start), include=f"{fresh_db}.a", schemaHistory=str(tmp_path / mode))))
        try:
            runs[mode] = _drive(planner, start, max_events)
        finally:
            planner.close()
        if mode == "0":
            assert passed == []
    (ends0, rows0, found0), (ends1, rows1, found1) = runs["0"], runs["1"]
    assert ends1 == ends0 and len(ends0) > (2 if max_events else 0)
    assert rows1.equals(rows0)
    ops = rows0.column("op").to_pylist()
    assert (ops.count("c"), ops.count("u"), ops.count("s")) == (6 + 1, 20, 1)   # and a's CREATE
    assert found1 == found0
    # single-row and multi-table transactions of b and c went by without being decoded
    # (each read task decodes a table's first TABLE_MAP once before it can pass one over)
    assert passed and all(n >= 3 for n in passed)
    if max_events is None:
        assert len(passed) >= 40


def test_a_plain_range_reads_the_same_rows(mariadb, fresh_db, source_options, tmp_path,
                                           monkeypatch):
    start = binlog_position(mariadb)
    _workload(mariadb, fresh_db)
    end = binlog_position(mariadb)
    planner = RangePlanner(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{fresh_db}.a,{fresh_db}.c",
        schemaHistory=str(tmp_path / "h"))))
    try:
        planner.plan_end({"file": start.file, "pos": start.pos}, None, None)   # the history
        [task] = planner.plan_tasks({"file": start.file, "pos": start.pos},
                                    {"file": end.file, "pos": end.pos})
    finally:
        planner.close()
    from dataclasses import replace
    task = replace(task, rule=None, end=end)
    reads = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("MYSQLCDC_PASS_OVER", mode)
        reads[mode] = pa.Table.from_batches(list(read_range(task)), schema=ARROW_SCHEMA)
    assert reads["1"].equals(reads["0"])
    assert set(reads["0"].column("table").to_pylist()) == {"a", "c"}
