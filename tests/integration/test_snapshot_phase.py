"""The snapshot phase's planning against a real server, without Spark: what the offsets
carry (initial chunks, backfill requests from signals, a new snapshot after a purge),
what a refused request does, and the checks that stop a snapshot before it starts."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pytest

from mysqlcdc.capture.backfill import ResetTask, SnapshotPhase, read_reset
from mysqlcdc.capture.planner import RangePlanner
from mysqlcdc.capture.snapshot import ChunkTask, read_chunk
from mysqlcdc.errors import BinlogPurgedError, MissingPrivilegeError
from mysqlcdc.spark.options import SourceOptions

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.integration


def _phase(source_options, tmp_path, db: str, **extra):
    options = SourceOptions.parse(source_options(
        include=f"{db}.*", schemaHistory=str(tmp_path / "history"), snapshotChunkRows=100,
        snapshotChunksPerBatch=3, signalTable=f"{db}.signal", pipelineName="p1",
        **extra))
    planner = RangePlanner(options)
    return SnapshotPhase(options, lambda: planner), planner


def _signal(tmp_path, key: tuple, data: dict, type_: str = "execute-snapshot") -> None:
    folder = tmp_path / "history" / "signals"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{key[0]:08d}.{key[1]:012d}.{key[2]:06d}.json"
    (folder / name).write_text(json.dumps({"row_image": {"id": f"s{key[1]}", "type": type_,
                                                         "data": json.dumps(data)}}))


def _rows(batches) -> list[dict]:
    return [r for b in batches for r in b.to_pylist()]


def test_initial_chunks_hold_the_binlog_then_it_streams(mariadb, fresh_db, source_options,
                                                        tmp_path):
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY)", "INSERT INTO a SELECT seq FROM seq_1_to_250",
                "CREATE TABLE b (v INT)", "INSERT INTO b VALUES (1), (2)", db=fresh_db)
    phase, planner = _phase(source_options, tmp_path, fresh_db, snapshotMode="initial")
    try:
        start = binlog_position(mariadb)
        first = phase.initial(start)
        assert first["snapshot"]["tables"] == [f"{fresh_db}.a", f"{fresh_db}.b"]
        one = phase.held(first)
        assert (one["file"], one["pos"]) == (start.file, start.pos)      # the binlog waits
        assert [e[3] for e in one["snapshot"]["plan"]] == [0, 1, 2]       # a: 3 chunks of ~100
        assert one["snapshot"]["plan"][-1][4] == {"last": "table"}
        two = phase.held(one)
        assert two["snapshot"]["tables"] == [] and two["snapshot"]["plan"][0][0] == f"{fresh_db}.b"
        assert two["snapshot"]["plan"][0][4] == {"last": "snapshot"}      # keyless: one read
        assert phase.held(two) is None                                     # now it streams
        end = {"file": start.file, "pos": start.pos}
        after = phase.after_stream(two, end)
        assert after["snapshot"]["plan"] == [] and after["snapshot"]["chunk"] == 1003
        assert phase.after_stream(after, end) == after                     # nothing new: same
        tasks = phase.tasks(one)
        assert [t.chunk for t in tasks] == [0, 1, 2] and all(isinstance(t, ChunkTask) for t in tasks)
        rows = _rows(r for t in tasks for r in read_chunk(t))
        assert len(rows) == 250 and rows[-1]["query"] == "snapshot:last_in_table"
        status = json.loads((tmp_path / "history" / "snapshot-status.json").read_text())
        assert status["tables_done"] == 2
    finally:
        planner.close()


def test_the_tables_a_flatten_references_are_read_first(mariadb, fresh_db, source_options,
                                                       tmp_path):
    """snapshotFirst (the runner sets it for a sink whose flatten references tables): those
    tables first, in its order, then the others by name."""
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE thing (id INT PRIMARY KEY)",
                "CREATE TABLE user (id INT PRIMARY KEY)", db=fresh_db)
    phase, planner = _phase(source_options, tmp_path, fresh_db, snapshotMode="initial",
                            snapshotFirst=f"{fresh_db}.user, {fresh_db}.thing,other.gone")
    try:
        first = phase.initial(binlog_position(mariadb))
        assert first["snapshot"]["tables"] == [f"{fresh_db}.{t}" for t in ("user", "thing", "a")]
    finally:
        planner.close()


def test_signals_queue_backfills_beside_the_stream(mariadb, fresh_db, source_options, tmp_path,
                                                   caplog):
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT)",
                "INSERT INTO a SELECT seq, seq % 3 FROM seq_1_to_400", db=fresh_db)
    phase, planner = _phase(source_options, tmp_path, fresh_db, snapshotMode="never")
    try:
        here = binlog_position(mariadb)
        start = phase.initial(here)
        assert "snapshot" not in start
        end = {"file": here.file, "pos": here.pos + 1000}
        assert phase.after_stream(start, end) == end                      # no signal: plain
        n = here.file_number
        _signal(tmp_path, (n, here.pos - 10, 0), {"data-collections": [f"{fresh_db}.a"],
                "additional-conditions": [{"data-collection": f"{fresh_db}.a",
                                           "filter": "v = 1"}]})
        _signal(tmp_path, (n, here.pos - 10, 1), {"data-collections": [f"{fresh_db}.nope"]})
        _signal(tmp_path, (n, here.pos - 10, 2), {"data-collections": [f"{fresh_db}.a"],
                                                  "pipeline": "another"})
        _signal(tmp_path, (n, here.pos - 9, 0), {"data-collections": [f"{fresh_db}.a"],
                "additional-condition": "no such column > 1"})
        _signal(tmp_path, (n, here.pos + 5, 0), {"data-collections": [f"{fresh_db}.a"]})
        with caplog.at_level(logging.ERROR):
            one = phase.after_stream(start, end)
        snap = one["snapshot"]
        # the first and the fourth signal count; the one past `start` waits for its batch
        assert snap["signals"] == [n, here.pos - 9, 0]
        assert [e[4] for e in snap["plan"]] == [{"where": "v = 1", "kind": "backfill"},
                                                {"where": "v = 1", "kind": "backfill",
                                                 "last": "table"}]
        # refused with a named error each, the stream goes on: a table not captured, a
        # filter the server refuses
        assert "SNAPSHOT_REQUEST_INVALID" in caplog.text and f"{fresh_db}.nope" in caplog.text
        assert "no such column" in caplog.text and snap["tables"] == []
        rows = _rows(r for t in phase.tasks(one) for r in read_chunk(t))
        assert sorted(json.loads(r["key"])["id"] for r in rows) == list(range(1, 401, 3))
        assert {r["query"] for r in rows} == {"backfill", "backfill:last_in_table"}
        # batch `one` has run: the signal inside its range is taken by the next
        two = phase.after_stream(one, {**end, "pos": end["pos"] + 10})
        assert two["snapshot"]["signals"] == [n, here.pos + 5, 0]
        assert len(two["snapshot"]["plan"]) == 3 and two["snapshot"]["tables"]   # 400 rows
        _signal(tmp_path, (n, here.pos + 50, 0), {}, type_="stop-snapshot")
        three = phase.after_stream(two, {**end, "pos": end["pos"] + 20})
        assert three["snapshot"]["tables"] == [] and three["snapshot"]["plan"] == []
        assert phase.after_stream(three, three) == three                  # settled
    finally:
        planner.close()


def test_a_purged_start_opens_a_new_snapshot(mariadb, fresh_db, source_options, tmp_path):
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY)", "INSERT INTO a VALUES (1), (2)",
                "CREATE TABLE gone (id INT PRIMARY KEY)", db=fresh_db)
    phase, planner = _phase(source_options, tmp_path, fresh_db, snapshotMode="when_needed")
    try:
        old = binlog_position(mariadb)
        start = phase.initial(old)
        planner._ensure_history(old)
        mariadb.sql("ALTER TABLE a ADD COLUMN extra INT DEFAULT 5", "DROP TABLE gone",
                    "CREATE TABLE fresh (id INT PRIMARY KEY)", db=fresh_db)
        held = {k: v for k, v in start.items() if k != "snapshot"}
        reset = phase.purged(held, BinlogPurgedError("gone"))
        assert not phase.streams(reset)
        snap = reset["snapshot"]
        assert snap["reset"]["from"] == str(old) and snap["tables"] == []
        assert {e[0] for e in snap["plan"]} == {f"{fresh_db}.a", f"{fresh_db}.fresh"}
        tasks = phase.tasks(reset)
        assert isinstance(tasks[0], ResetTask)
        records = _rows(read_reset(tasks[0]))
        kinds = {(r["op"], r["table"]) for r in records}
        assert {("s", "a"), ("s", "gone"), ("s", "fresh"), ("t", "a"), ("t", "gone"),
                ("t", "fresh")} <= kinds
        schema = next(r for r in records if r["op"] == "s" and r["table"] == "a")
        assert "extra" in schema["after"] and "extra" not in schema["before"]
        chunk_rows = _rows(r for t in tasks[1:] for r in read_chunk(t))
        assert max(int(r["seq"]) for r in records) < min(int(r["seq"]) for r in chunk_rows)
        # the history follows the server from the new position on
        at = planner.history.definition(fresh_db, "a", binlog_position(mariadb))
        assert "extra" in at.column_names
        with pytest.raises(BinlogPurgedError):
            _phase(source_options, tmp_path / "x", fresh_db, snapshotMode="initial")[0].purged(
                held, BinlogPurgedError("gone"))
    finally:
        planner.close()


def test_a_table_the_user_may_not_read_stops_the_snapshot_before_it_starts(
        mariadb, fresh_db, source_options, tmp_path):
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY)",
                "CREATE USER IF NOT EXISTS 'half'@'%' IDENTIFIED BY 'pw'",
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'half'@'%'",
                f"GRANT SELECT ON `{fresh_db}`.a TO 'half'@'%'", db=fresh_db)
    options = SourceOptions.parse({**source_options(snapshotMode="initial"), "user": "half",
                                   "password": "pw", "include": f"{fresh_db}.a,{fresh_db}.b"})
    planner = RangePlanner(options)
    try:
        with pytest.raises(MissingPrivilegeError, match=f"{fresh_db}.b"):
            SnapshotPhase(options, lambda: planner).initial(binlog_position(mariadb))
    finally:
        planner.close()
