"""Batches whose end the read task finds (capture.batchend) against a real server: the
same batches, rows and schema history as the driver's own walk, without the walk."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from mysqlcdc.capture import batchend
from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.capture.task import read_range
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.spark.options import SourceOptions

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration


def _planner(source_options, tmp_path, name: str, start, db: str, **extra) -> RangePlanner:
    folder = tmp_path / name
    return RangePlanner(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{db}.*", schemaHistory=str(folder), **extra)))


def _drive(planner: RangePlanner, start, max_events, *, forget_records: bool = False,
           found: list | None = None, offset: dict | None = None):
    """Plan and read batches as the stream reader does until nothing is new; returns
    the end of each batch, the rows of all, and the scans the driver made. ``found``
    gets each pending batch's recorded GTID set and last commit time. ``offset``: go on
    from that end offset (a restarted query's) instead of ``start``."""
    scans = []
    original = planner.scan

    def counted(a, b, n, observe=None):
        scans.append((a, b, n))
        return original(a, b, n, observe)
    planner.scan = counted
    offset = offset or {"file": start.file, "pos": start.pos}
    ends, tables = [], []
    target = planner.current()
    while True:
        end = planner.plan_end(offset, max_events, target)
        if end == offset:
            break
        for task in planner.plan_tasks(offset, end):
            tables.append(pa.Table.from_batches(list(read_range(task)),
                                                schema=pa.schema(task_schema())))
        if forget_records and batchend.pending(end):
            batchend.record_path(planner.options.schema_history, end).unlink()
        ends.append(planner.position_of(end))
        if found is not None and batchend.pending(end):
            f = planner.found_of(end)
            found.append((f.gtids, f.last_ts))
        offset = end
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return ends, rows, scans


def task_schema():
    from mysqlcdc.envelope.model import ARROW_SCHEMA
    return ARROW_SCHEMA


def _tables(mariadb, db: str):
    """Two tables; returns the position after them (a range without DDL starts there)."""
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20))",
                f"CREATE TABLE `{db}`.b (id BIGINT PRIMARY KEY, d DECIMAL(8,2))")
    return binlog_position(mariadb)


def _workload(mariadb, db: str) -> None:
    for i in range(30):
        mariadb.sql(f"INSERT INTO `{db}`.a VALUES ({i}, 'v{i}')")
    mariadb.sql("BEGIN", *[f"INSERT INTO `{db}`.b VALUES ({i}, {i}.5)" for i in range(40)],
                "COMMIT")
    mariadb.sql(f"UPDATE `{db}`.a SET v = CONCAT(v, '!') WHERE id < 10")


def _changes(rows: list[dict]) -> list[tuple]:
    return [(r["op"], r["table"], r["before"], r["after"], r["seq"]) for r in rows]


@pytest.mark.parametrize("max_events", [None, 7, 60])
def test_same_batches_and_rows_as_the_driver_walk(mariadb, fresh_db, source_options, tmp_path,
                                                 max_events):
    start = _tables(mariadb, fresh_db)
    _workload(mariadb, fresh_db)
    legacy = _planner(source_options, tmp_path, "driver", start, fresh_db, planning="driver")
    tasks = _planner(source_options, tmp_path, "tasks", start, fresh_db)
    found: list = []
    try:
        old_ends, old_rows, _ = _drive(legacy, start, max_events)
        new_ends, new_rows, scans = _drive(tasks, start, max_events, found=found)
    finally:
        legacy.close()
        tasks.close()
    assert new_ends == old_ends
    assert len(new_ends) > (1 if max_events else 0)
    assert _changes(new_rows) == _changes(old_rows) and len(new_rows) == 30 + 40 + 10
    assert scans == []                           # the driver walked no batch
    # the records carry the offsets' GTID set (the transactions read) and commit time
    gtids = list(dict.fromkeys(r["gtid"] for r in new_rows))
    assert len(found) == len(new_ends) and len(gtids) == 32
    joined = GtidSet()
    for text, _ in found:
        joined = joined.union(GtidSet.parse(text))
    assert str(joined) == str(GtidSet().add_all(gtids))
    assert found[-1][1] == new_rows[-1]["ts_ms"]


def test_a_ddl_ends_the_batch_before_it_and_the_history_applies_it(
        mariadb, fresh_db, source_options, tmp_path):
    start = binlog_position(mariadb)
    legacy = _planner(source_options, tmp_path, "driver", start, fresh_db, planning="driver")
    tasks = _planner(source_options, tmp_path, "tasks", start, fresh_db)
    legacy._ensure_history(start)            # the histories begin before the DDL
    tasks._ensure_history(start)
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, v INT)")
    mariadb.sql(*[f"INSERT INTO `{fresh_db}`.t VALUES ({i}, {i})" for i in range(5)])
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.t ADD COLUMN w VARCHAR(5) FIRST",
                f"ALTER TABLE `{fresh_db}`.t ADD COLUMN x INT")
    mariadb.sql(*[f"INSERT INTO `{fresh_db}`.t VALUES ('w{i}', {i}, {i}, {i})"
                  for i in range(5, 8)])
    mariadb.sql(f"RENAME TABLE `{fresh_db}`.t TO `{fresh_db}`.t2")
    mariadb.sql(f"INSERT INTO `{fresh_db}`.t2 VALUES ('z', 9, 9, 9)")
    try:
        _, old_rows, _ = _drive(legacy, start, None)
        ends, rows, scans = _drive(tasks, start, None)
        reasons = [batchend.read_found(p).reason for p in
                   sorted((tmp_path / "tasks" / batchend.RECORDS).glob("*.json"),
                          key=lambda p: p.stat().st_mtime)]
    finally:
        legacy.close()
        tasks.close()
    assert _changes(rows) == _changes(old_rows)
    after = [json.loads(r["after"]) for r in rows if r["op"] == "c"]
    assert after[-4:] == [{"w": "w5", "id": 5, "v": 5, "x": 5}, {"w": "w6", "id": 6, "v": 6, "x": 6},
                          {"w": "w7", "id": 7, "v": 7, "x": 7}, {"w": "z", "id": 9, "v": 9, "x": 9}]
    schema_changes = [(r["op"], r["table"]) for r in rows if r["op"] == "s"]
    # CREATE, two ALTERs and the RENAME (under its old name, then its new), once each
    assert schema_changes == [("s", "t")] * 4 + [("s", "t2")]
    # the first batch stopped before the CREATE (a DDL the history had not seen), the
    # driver walked a short stretch from there to apply it and what follows it
    assert reasons[0] == "ddl" and ends[0] < ends[-1]
    assert all(n == batchend_lookahead() for _, _, n in scans) and scans


def batchend_lookahead() -> int:
    from mysqlcdc.capture import planner
    return planner._LOOKAHEAD_EVENTS


def test_a_missing_record_is_found_by_reading_on_the_driver(mariadb, fresh_db, source_options,
                                                            tmp_path, caplog):
    start = _tables(mariadb, fresh_db)
    _workload(mariadb, fresh_db)
    first = _planner(source_options, tmp_path, "first", start, fresh_db)
    second = _planner(source_options, tmp_path, "second", start, fresh_db)
    try:
        ends, rows, _ = _drive(first, start, 25)
        with caplog.at_level("WARNING", logger="mysqlcdc.capture.planner"):
            again, rows_again, _ = _drive(second, start, 25, forget_records=True)
    finally:
        first.close()
        second.close()
    assert again == ends and _changes(rows_again) == _changes(rows)
    assert any("no record of where the batch" in r.message for r in caplog.records)


def test_a_replayed_batch_reads_the_same_rows(mariadb, fresh_db, source_options, tmp_path):
    start = _tables(mariadb, fresh_db)
    _workload(mariadb, fresh_db)
    planner = _planner(source_options, tmp_path, "p", start, fresh_db)
    try:
        offset = {"file": start.file, "pos": start.pos}
        end = planner.plan_end(offset, 33, None)
        reads = []
        for _ in range(2):
            [task] = planner.plan_tasks(offset, end)
            reads.append(pa.Table.from_batches(list(read_range(task)), schema=task_schema()))
        assert reads[0].num_rows > 0 and reads[0].equals(reads[1])
    finally:
        planner.close()


def test_a_table_map_the_history_cannot_decode_holds_its_table(mariadb, fresh_db,
                                                               source_options, tmp_path):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.q (id INT PRIMARY KEY)",
                f"CREATE TABLE `{fresh_db}`.ok (id INT PRIMARY KEY)")
    start = binlog_position(mariadb)
    planner = _planner(source_options, tmp_path, "p", start, fresh_db)
    try:
        planner.plan_end({"file": start.file, "pos": start.pos}, None, None)  # bootstraps
        mariadb.sql("SET sql_log_bin = 0", f"ALTER TABLE `{fresh_db}`.q ADD COLUMN x INT",
                    "SET sql_log_bin = 1",
                    f"INSERT INTO `{fresh_db}`.ok VALUES (1)",
                    f"INSERT INTO `{fresh_db}`.q VALUES (1, 1)",
                    f"INSERT INTO `{fresh_db}`.ok VALUES (2)")
        ends, rows, _ = _drive(planner, start, None)
        assert [(r["table"], r["after"]) for r in rows] == [("ok", '{"id":1}'), ("ok", '{"id":2}')]
        q = planner.history.open_quarantine(fresh_db, "q")
        assert q is not None and q.since == start and "disagrees" in q.reason
    finally:
        planner.close()


@pytest.mark.parametrize("parallelism,max_events", [(2, None), (3, 45), (4, 20)])
def test_slices_read_what_one_task_reads(mariadb, fresh_db, source_options, tmp_path,
                                         parallelism, max_events):
    start = binlog_position(mariadb)
    one = _planner(source_options, tmp_path, "one", start, fresh_db)
    many = _planner(source_options, tmp_path, "many", start, fresh_db,
                    parallelism=parallelism, minSliceBytes=300)
    one._ensure_history(start)
    many._ensure_history(start)
    _tables(mariadb, fresh_db)                  # a DDL inside the range: batches stop there
    _workload(mariadb, fresh_db)
    mariadb.sql(f"ALTER TABLE `{fresh_db}`.a ADD COLUMN z INT")
    _workload_more = [f"INSERT INTO `{fresh_db}`.a VALUES ({i}, 'x', {i})" for i in range(100, 130)]
    mariadb.sql(*_workload_more)
    one_found: list = []
    many_found: list = []
    try:
        ends, rows, _ = _drive(one, start, max_events, found=one_found)
        sliced, sliced_rows, scans = _drive(many, start, max_events, found=many_found)
        records = list((tmp_path / "many" / batchend.RECORDS).glob("*-*.json"))
    finally:
        one.close()
        many.close()
    assert sliced == ends
    assert many_found == one_found and one_found[-1][0]   # slices' GTID sets joined
    assert _changes(sliced_rows) == _changes(rows) and len(rows) == 30 + 40 + 10 + 30 + 3
    reasons = [batchend.read_found(p).reason for p in records]
    assert "slice" in reasons                    # the batches were cut into slices
    assert all(n == batchend_lookahead() for _, _, n in scans)


def test_exact_cuts_start_slices_where_the_server_counts(mariadb, fresh_db, source_options,
                                                        tmp_path):
    """The decode-ahead's exact cuts (``RangePlanner.exact_cuts``): each a transaction's
    first event, with the batch's events before it counted by the server, never past a
    DDL the bootstrap's walk saw. Slices that start their streams there, passing over
    nothing, read what one task reads, end where it ends and make its record; a cut that
    is not a transaction's first event is named."""
    from dataclasses import replace

    from mysqlcdc.capture.planner import WALKED
    from mysqlcdc.errors import SourceChangedError

    start = _workload_across_a_create(mariadb, fresh_db, 50)
    planner = _planner(source_options, tmp_path, "exact", start, fresh_db)
    try:
        planner.bootstrap_history(str(start))     # the walk a new pipeline runs ahead
        walked = json.loads((tmp_path / "exact" / WALKED).read_text())
        [ddl] = [type(start).parse(d) for d in walked["ddl"]]
        offset, reasons, cut_batches, n_rows = {"file": start.file, "pos": start.pos}, [], 0, 0
        while True:
            end = planner.plan_end(offset, 900, planner.current())
            if end == offset:
                break
            [task] = planner.plan_tasks(offset, end)
            whole: list = []
            rows = [r for b in read_range(task, whole) for r in b.to_pylist()]
            a = planner.position_of(offset)
            cuts = planner.exact_cuts(end, 3)
            free = ddl if a <= ddl else type(start).parse(walked["end"])   # no DDL before
            if end["upto"].get("known"):        # a DDL the planner applied ends no batch
                free = max(free, type(start).parse(end["upto"]["known"]))
            assert all(a < c < whole[0].end and c <= free and 0 < n < 900
                       for c, n in cuts), (a, cuts, ddl, end)
            for c, n in cuts:                       # the server counted as the stream does
                assert _events_between(planner, a, c) == n
            if cuts:
                cut_batches += 1
                edges = [(None, None), *cuts, (None, None)]
                found: list = []
                sliced = []
                for i in range(len(edges) - 1):
                    rule = replace(task.rule, cut_from=edges[i][0], cut_events=edges[i][1],
                                   cut_to=edges[i + 1][0], record=str(tmp_path / f"s{i}.json"))
                    sliced += [r for b in read_range(replace(task, rule=rule), found)
                               for r in b.to_pylist()]
                assert [f.start for f in found[1:]] == [c for c, _ in cuts]
                assert _changes(sliced) == _changes(rows)
                assert batchend.combine(task.start, found) == whole[0]
            reasons.append(whole[0].reason)
            n_rows += len(rows)
            offset = end
        assert n_rows == 30 + 40 + 10 + 200 + 1 + 50   # and the CREATE's schema change
        assert "ddl" in reasons and cut_batches >= 2, reasons

        cuts = planner.exact_cuts(planner.plan_end({"file": start.file, "pos": start.pos},
                                                   900, planner.current()), 2)
        [task] = planner.plan_tasks({"file": start.file, "pos": start.pos},
                                    planner.plan_end({"file": start.file, "pos": start.pos},
                                                     900, planner.current()))
        listing = planner._sql().cursor()             # the TABLE_MAP after the cut
        listing.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {cuts[0][0].pos} LIMIT 6")
        inside = next(int(r[1]) for r in listing.fetchall() if r[2] == "Table_map")
        wrong = replace(task.rule, cut_from=type(start).of(start.file, inside),
                        cut_events=cuts[0][1] + 2, cut_to=None, record=None)
        with pytest.raises(SourceChangedError, match="not a transaction's first event"):
            list(read_range(replace(task, rule=wrong)))
    finally:
        planner.close()


def _workload_across_a_create(mariadb, db: str, rows_after: int):
    """Two tables, then from the returned start: the workload, 200 inserts, a CREATE
    TABLE (a DDL the bootstrap's walk records) and ``rows_after`` inserts into it."""
    _tables(mariadb, db)
    start = binlog_position(mariadb)
    _workload(mariadb, db)
    mariadb.sql(*[f"INSERT INTO `{db}`.a VALUES ({i}, 'w{i}')" for i in range(100, 300)])
    mariadb.sql(f"CREATE TABLE `{db}`.c (id INT PRIMARY KEY)")
    mariadb.sql(*[f"INSERT INTO `{db}`.c VALUES ({i})" for i in range(rows_after)])
    return start


def _events_between(planner: RangePlanner, a, b) -> int:
    """The events a replication stream hands out in ``[a, b)`` (artificial ones aside)."""
    from mysqlcdc.protocol.stream import ReplicationStream

    stream = ReplicationStream(planner.options.settings, server_id=planner.options.server_id + 77,
                               start=a, stop_at=b)
    try:
        return sum(1 for raw in stream if not raw.artificial and
                   (raw.file, raw.pos) < (b.file, b.pos))
    finally:
        stream.close()


@pytest.mark.parametrize("parallelism", [2, 3])
def test_parallel_read_tasks_start_at_exact_cuts(mariadb, fresh_db, source_options, tmp_path,
                                                 parallelism):
    """With ``parallelism`` above 1 and the bootstrap's walk on record, the query's own
    slices are exact cuts too: the end offsets carry the events before each cut, each
    read task streams only its slice, and the batches, rows and records are those of one
    read task, across a DDL."""
    start = _workload_across_a_create(mariadb, fresh_db, 200)
    one = _planner(source_options, tmp_path, "one", start, fresh_db)
    many = _planner(source_options, tmp_path, "many", start, fresh_db,
                    parallelism=parallelism, minSliceBytes=300)
    offsets = []
    planned = many.plan_end

    def recorded(*args, **kwargs):
        offsets.append(planned(*args, **kwargs))
        return offsets[-1]
    many.plan_end = recorded
    one_found: list = []
    many_found: list = []
    try:
        one.bootstrap_history(str(start))
        many.bootstrap_history(str(start))
        ends, rows, _ = _drive(one, start, 700, found=one_found)
        sliced, sliced_rows, _ = _drive(many, start, 700, found=many_found)
    finally:
        one.close()
        many.close()
    exact = [o for o in offsets if batchend.pending(o) and o["upto"].get("counts")]
    assert len(exact) >= 2, offsets
    assert all(len(o["upto"]["counts"]) == len(o["upto"]["cuts"]) for o in exact)
    assert sliced == ends and many_found == one_found
    assert _changes(sliced_rows) == _changes(rows) and len(rows) == 30 + 40 + 10 + 200 + 1 + 200
