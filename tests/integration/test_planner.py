"""The driver's planner against a real server: how often it walks a range."""

from __future__ import annotations

import pytest

from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.spark.options import SourceOptions

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration


def _rows(mariadb, db: str, txns: int = 20) -> None:
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    for i in range(txns):
        mariadb.sql(f"INSERT INTO `{db}`.t VALUES ({i}, 'v{i}')")


def _counting(planner: RangePlanner) -> list[tuple]:
    calls: list[tuple] = []
    scan = planner.scan

    def counted(start, stop, max_events, observe=None):
        calls.append((start, stop, max_events, observe is None))
        return scan(start, stop, max_events, observe)
    planner.scan = counted
    return calls


@pytest.mark.parametrize("max_events", [None, 7])
def test_a_batch_is_scanned_once(mariadb, fresh_db, source_options, max_events):
    start = binlog_position(mariadb)
    _rows(mariadb, fresh_db)
    planner = RangePlanner(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{fresh_db}.*")))
    try:
        calls = _counting(planner)
        planner.keeper.ensure(start, binlog_position(mariadb),
                              lambda a, b, observe: planner.scan(a, b, None, observe))
        calls.clear()
        end = planner.next_end(start, max_events)
        assert end > start
        tasks = planner.tasks(start, end)
        assert [(t.start, t.end) for t in tasks] == [(start, end)]
        assert len(calls) == 1, calls          # next_end's scan serves tasks too
        # a range next_end did not plan is still walked (once) for the history
        later = planner.next_end(end, None)
        calls.clear()
        planner._processed = None
        planner.tasks(end, later)
        assert len(calls) == (1 if later > end else 0)
    finally:
        planner.close()


def test_ddl_scan_shows_every_statement_and_nothing_else(mariadb, fresh_db, source_options,
                                                          monkeypatch, caplog):
    from mysqlcdc.binlog.events import QueryEvent
    from mysqlcdc.capture import planner as planner_module

    start = binlog_position(mariadb)
    _rows(mariadb, fresh_db, txns=1000)   # many events: progress is reported
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.t ADD COLUMN w INT",
                f"CREATE TABLE `{fresh_db}`.u (id INT PRIMARY KEY)")
    _rows_u = [f"INSERT INTO `{fresh_db}`.u VALUES ({i})" for i in range(10)]
    mariadb.sql(*_rows_u)
    stop = binlog_position(mariadb)
    planner = RangePlanner(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{fresh_db}.*")))
    try:
        full, fast = [], []

        def record(into):
            def observe(file, pos, events):
                into.extend((file, pos, ev.query) for ev in events if isinstance(ev, QueryEvent))
                assert all(isinstance(ev, QueryEvent) for ev in events) or into is full
            return observe
        planner.scan(start, stop, None, record(full))        # the batch skim, for reference
        monkeypatch.setattr(planner_module, "_PROGRESS_AFTER_S", 0.0)
        with caplog.at_level("WARNING", logger="mysqlcdc.capture.planner"):
            planner.ddl_scan(start, stop, record(fast))
    finally:
        planner.close()
    assert fast == full
    ddl = [q for _, _, q in fast if "TABLE" in q]
    assert len(ddl) == 3 and "ADD COLUMN w" in ddl[1]
    progress = [r.getMessage() for r in caplog.records if "for DDL (at" in r.getMessage()]
    assert progress and all(" of " in m and "MB/s" in m for m in progress)
    assert any("schema history bootstrap: read" in r.message for r in caplog.records)


def test_the_planners_statements_have_a_limit(mariadb, fresh_db, source_options):
    """The planner's connection waits at most STATEMENT_LIMIT_S for a statement (a source
    that hangs after the ping would hold the driver in silence); its login took
    connect_timeout."""
    from mysqlcdc.capture.planner import STATEMENT_LIMIT_S

    planner = RangePlanner(SourceOptions.parse(source_options(include=f"{fresh_db}.*")))
    try:
        assert planner.current() > planner.resolve("earliest")
        assert planner._conn._read_timeout == STATEMENT_LIMIT_S
    finally:
        planner.close()
