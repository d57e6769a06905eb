"""XA transactions against a real server (capture.xa, DESIGN.md decision 32): a prepared
transaction's rows are output at its XA COMMIT, as the commit's changes, and never when
it rolls back; wherever its prepare lies (the same batch, an earlier one, an earlier
slice, a planner that restarted, before the pipeline began reading)."""

from __future__ import annotations

import pytest

from mysqlcdc.capture import batchend
from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.spark.options import SourceOptions
from mysqlcdc.types import BinlogPosition

from tests.integration.test_batch_ends import _drive
from tests.support.mariadb import binlog_position, xa_finish

pytestmark = pytest.mark.integration


def _planner(source_options, tmp_path, name: str, start, db: str, **extra) -> RangePlanner:
    return RangePlanner(SourceOptions.parse(source_options(
        startingPosition=str(start), include=f"{db}.*", schemaHistory=str(tmp_path / name),
        **extra)))


def _read_all(source_options, tmp_path, start, db: str) -> tuple[list, list[dict]]:
    """Every batch from ``start`` to the server's position now, read by a new planner:
    their ends and rows."""
    planner = _planner(source_options, tmp_path, "p", start, db)
    try:
        ends, rows, _ = _drive(planner, start, None)
    finally:
        planner.close()
    return ends, rows


def _final(rows: list[dict]) -> dict[str, str]:
    """The table as a sink that applies the changes in order by key has it."""
    state: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: r["seq"]):
        if r["op"] in ("c", "u", "r"):
            state[r["key"]] = r["after"]
        elif r["op"] == "d":
            state.pop(r["key"], None)
    return state


def _server(mariadb, db: str) -> dict[str, str]:
    return {f'{{"id":{i}}}': f'{{"id":{i},"v":{v}}}'
            for i, v in mariadb.sql(f"SELECT id, v FROM `{db}`.t ORDER BY id")}


def _commit_position(mariadb, xid: str, since) -> tuple[str, int]:
    """(file, pos) of the XA COMMIT of ``xid`` (quoted, as ``xa`` makes it) after ``since``."""
    said = f"XA COMMIT X'{xid.strip(chr(39)).encode().hex()}'".upper()
    for name, _ in mariadb.sql("SHOW BINARY LOGS"):
        if BinlogPosition.of(name, 4).file_number < since.file_number:
            continue
        for row in mariadb.sql(f"SHOW BINLOG EVENTS IN '{name}'"):
            if str(row[5]).upper().startswith(said):
                return row[0], int(row[1])
    raise AssertionError(f"no {said} in the binlog")


@pytest.fixture
def xa(mariadb, fresh_db):
    """``xa(tag)`` -> the xid of this test's transaction ``tag``; every one still prepared
    when the test ends is rolled back (it would hold its locks past the test)."""
    made: list[str] = []

    def xid(tag: str) -> str:
        made.append(f"{fresh_db}-{tag}")
        return f"'{made[-1]}'"
    yield xid
    pending = {r[3].decode() if isinstance(r[3], bytes) else str(r[3])
               for r in mariadb.sql("XA RECOVER")}
    for x in made:
        if x in pending:
            xa_finish(mariadb, f"XA ROLLBACK '{x}'")


def _prepare(mariadb, xid: str, *statements: str) -> None:
    mariadb.sql(f"XA START {xid}", *statements, f"XA END {xid}", f"XA PREPARE {xid}")


@pytest.mark.parametrize("max_events,parallelism", [(None, 1), (4, 1), (None, 3)])
def test_rolled_back_changes_never_appear_and_committed_ones_appear_at_their_commit(
        mariadb, fresh_db, source_options, tmp_path, xa, max_events, parallelism):
    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    start = binlog_position(mariadb)
    mariadb.sql(f"INSERT INTO `{db}`.t VALUES (1, 1), (2, 2)")
    a, b, c, d = xa("a"), xa("b"), xa("c"), xa("d")
    _prepare(mariadb, a, f"INSERT INTO `{db}`.t VALUES (3, 3)", f"UPDATE `{db}`.t SET v = 10 WHERE id = 1")
    mariadb.sql(*[f"INSERT INTO `{db}`.t VALUES ({i}, {i})" for i in range(100, 110)])
    _prepare(mariadb, b, f"INSERT INTO `{db}`.t VALUES (4, 4)",
             f"UPDATE `{db}`.t SET id = 20 WHERE id = 2")        # a key change
    xa_finish(mariadb, f"XA ROLLBACK {a}")
    mariadb.sql(*[f"INSERT INTO `{db}`.t VALUES ({i}, {i})" for i in range(110, 120)])
    xa_finish(mariadb, f"XA COMMIT {b}")
    mariadb.sql(f"UPDATE `{db}`.t SET v = 40 WHERE id = 4")     # after the commit: last
    mariadb.sql(f"XA START {c}", f"INSERT INTO `{db}`.t VALUES (5, 5)", f"XA END {c}",
                f"XA COMMIT {c} ONE PHASE")
    _prepare(mariadb, d, f"DELETE FROM `{db}`.t WHERE id = 1")   # still open at the end
    planner = _planner(source_options, tmp_path, "p", start, db, parallelism=parallelism,
                       minSliceBytes=300)
    try:
        ends, rows, _ = _drive(planner, start, max_events)
    finally:
        planner.close()
    records = [batchend.read_found(p) for p in (tmp_path / "p" / batchend.RECORDS).glob("*.json")]
    hex_of = lambda x: f"X'{x.strip(chr(39)).encode().hex().upper()}',X'',1"  # noqa: E731
    if max_events:
        assert len(ends) > 2
    if parallelism > 1:                      # b was prepared in one slice, committed in another
        assert "slice" in [f.reason for f in records]
        assert any(hex_of(b) in f.xa for f in records if f.reason == "slice")
    if max_events or parallelism > 1:        # some read began with b open, and committed it
        assert any(hex_of(b) in f.xa_done and f.start > BinlogPosition.parse(f.xa_done[hex_of(b)])
                   for f in records)
    assert _final(rows) == _server(mariadb, db)                  # d is not committed
    assert not any(r["after"] == '{"id":3,"v":3}' or r["after"] == '{"id":1,"v":10}'
                   for r in rows)                                 # a rolled back
    commit_file, commit_pos = _commit_position(mariadb, b, start)
    ours = [r for r in rows if r["key"] in ('{"id":4}', '{"id":2}', '{"id":20}')][1:]
    assert [(r["op"], r["key"]) for r in ours] == [
        ("c", '{"id":4}'), ("d", '{"id":2}'), ("c", '{"id":20}'), ("u", '{"id":4}')]
    for r in ours[:3]:                      # the commit's position, GTID and seq order
        assert (r["file"], r["pos"]) == (commit_file, commit_pos)
    assert ours[0]["gtid"] == ours[2]["gtid"] != ours[3]["gtid"]
    assert [int(r["seq"]) - int(ours[0]["seq"]) for r in ours[:3]] == [0, 2, 3]
    # the batch records name d as open where the reading ended
    assert hex_of(d) in [x for f in records for x in f.xa]


def test_a_commit_batches_later_is_found_after_a_restart_and_without_records(
        mariadb, fresh_db, source_options, tmp_path, xa):
    """The prepare in one batch, the commit in a later one read by a new planner (a
    restarted pipeline: the open transactions come from the batch records), then a
    batch whose record is missing (the driver reads it again, the open ones it knows)."""
    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    start = binlog_position(mariadb)
    e = xa("e")
    _prepare(mariadb, e, f"INSERT INTO `{db}`.t VALUES (1, 1)", f"INSERT INTO `{db}`.t VALUES (2, 2)")
    mariadb.sql(f"INSERT INTO `{db}`.t VALUES (3, 3)")
    ends, rows = _read_all(source_options, tmp_path, start, db)
    assert [r["key"] for r in rows] == ['{"id":3}']
    last_end = ends[-1]
    mariadb.sql(f"INSERT INTO `{db}`.t VALUES (4, 4)")
    xa_finish(mariadb, f"XA COMMIT {e}")
    again = _planner(source_options, tmp_path, "p", start, db)
    try:
        offset = _last_offset(again, start, last_end)
        _, rows2, _ = _drive(again, start, None, forget_records=True, offset=offset)
    finally:
        again.close()
    assert [(r["op"], r["key"]) for r in rows2] == [
        ("c", '{"id":4}'), ("c", '{"id":1}'), ("c", '{"id":2}')]
    assert _final(rows + rows2) == _server(mariadb, db)


def _last_offset(planner: RangePlanner, start, end):
    """The pending end offset a restarted query gets back from its checkpoint: the one
    whose record ends at ``end``."""
    for path in (planner.options.schema_history and
                 (__import__("pathlib").Path(planner.options.schema_history) / batchend.RECORDS)
                 ).glob("*.json"):
        f = batchend.read_found(path)
        if f.end == end:
            return _offset_for(planner, start, f)
    raise AssertionError("no record ends there")


def _offset_for(planner, start, found):
    """Re-plan from ``start`` to the batch whose record is ``found`` (the offsets are
    deterministic: the same rule from the same start)."""
    offset = {"file": start.file, "pos": start.pos}
    while True:
        end = planner.plan_end(offset, None, found.end)
        if planner.position_of(end) == found.end:
            return end
        offset = end


def test_a_transaction_prepared_before_the_pipeline_began_is_found_in_the_binlog(
        mariadb, fresh_db, source_options, tmp_path, xa):
    """Prepared before the position the pipeline starts from (no record names it): its
    commit looks it up in the server's listing of its binlog and reads it there."""
    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    f = xa("f")
    _prepare(mariadb, f, f"INSERT INTO `{db}`.t VALUES (7, 7)")
    start = binlog_position(mariadb)
    mariadb.sql(f"INSERT INTO `{db}`.t VALUES (8, 8)")
    xa_finish(mariadb, f"XA COMMIT {f}")
    _, rows = _read_all(source_options, tmp_path, start, db)
    assert [(r["op"], r["key"]) for r in rows] == [("c", '{"id":8}'), ("c", '{"id":7}')]


def test_a_commit_whose_prepare_no_binlog_holds_is_a_named_error(
        mariadb, fresh_db, source_options, tmp_path, xa):
    """A commit whose prepare is in no binlog (here prepared by a session that logged
    nothing, ``sql_log_bin = 0``; or a purged file) stops the read with
    XA_PREPARE_NOT_FOUND rather than pass its changes over."""
    from mysqlcdc.capture.task import read_range
    from mysqlcdc.errors import XaPrepareNotFoundError

    db = fresh_db
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    g = xa("g")
    start = binlog_position(mariadb)
    mariadb.sql("SET SESSION sql_log_bin = 0", f"XA START {g}",
                f"INSERT INTO `{db}`.t VALUES (9, 9)", f"XA END {g}", f"XA PREPARE {g}")
    xa_finish(mariadb, f"XA COMMIT {g}")
    planner = _planner(source_options, tmp_path, "p", start, db)
    try:
        offset = {"file": start.file, "pos": start.pos}
        end = planner.plan_end(offset, None, planner.current())
        [task] = planner.plan_tasks(offset, end)
        with pytest.raises(XaPrepareNotFoundError) as info:
            list(read_range(task))
    finally:
        planner.close()
    assert info.value.code == "XA_PREPARE_NOT_FOUND" and start.file in str(info.value)
