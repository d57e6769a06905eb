"""Failover: a pipeline with GTIDs follows its source to another server of the same
replication topology (primary -> replica with log_slave_updates) and loses nothing,
repeats nothing; an unrelated server stays SOURCE_CHANGED."""

from __future__ import annotations

import json

import pytest

import yaml

from mysqlcdc.api import PipelineService
from mysqlcdc.config.loader import load_pipeline, load_pipeline_from_dict
from mysqlcdc.errors import SourceChangedError
from mysqlcdc.pipeline.runner import run_pipeline
from mysqlcdc.types import SEQ_EPOCH

from tests.support.mariadb import MariaDB, binlog_position, start_replica, wait_replicated

pytestmark = pytest.mark.e2e


@pytest.fixture
def topology():
    primary = MariaDB(options={"server-id": "11"}).start()
    replica = None
    try:
        replica = start_replica(primary, 12)
        yield primary, replica
    finally:
        for server in (replica, primary):
            if server is not None:
                server.stop()


def _cfg(server, folder, start: str):
    return load_pipeline_from_dict(_data(server, folder, start))


def _data(server, folder, start: str) -> dict:
    return {
        "name": "failover",
        "source": {"host": server.host, "port": server.port, "user": server.user,
                   "server_id": 8100, "start": start, "tables": {"include": ["shop.*"]}},
        "spark": {"checkpoint": str(folder / "ck"), "trigger_interval": "200 milliseconds"},
        "sinks": [{"changelog": {"path": str(folder / "changelog")}}],
    }


def _write(server, first: int, last: int, update: list[int] = ()) -> None:
    server.sql(*[f"INSERT INTO shop.item VALUES ({i}, 'v{i}')" for i in range(first, last + 1)],
               *[f"UPDATE shop.item SET v = 'u{i}-{server.port}' WHERE id = {i}" for i in update])


def test_follow_a_failover_by_gtid(spark, topology, mariadb, tmp_path):
    primary, replica = topology
    primary.sql("CREATE DATABASE shop", "CREATE TABLE shop.item (id INT PRIMARY KEY, v TEXT)")
    cfg = _cfg(primary, tmp_path, str(binlog_position(primary)))
    _write(primary, 1, 20, update=[3, 4])
    run_pipeline(cfg, until_idle=True, spark=spark)             # captured from the primary
    _write(primary, 21, 30, update=[5])                          # after the stop: replicated
    wait_replicated(primary, replica)
    primary.stop()                                               # the primary is lost
    replica.sql("STOP SLAVE", "RESET SLAVE ALL")                 # the replica is promoted
    _write(replica, 31, 40, update=[1, 21, 31])

    # Switched through the service (POST /pipelines/NAME/source): an unrelated server (the
    # session's) has none of the pipeline's transactions and is refused, file unchanged;
    # the replica is accepted and the file rewritten.
    folder = tmp_path / "pipelines"
    folder.mkdir()
    path = folder / "failover.yaml"
    path.write_text(yaml.safe_dump(_data(primary, tmp_path, str(cfg.source.start))))
    service = PipelineService(folder, lambda: spark)
    assert service.load_folder() == ["failover"]
    with pytest.raises(SourceChangedError, match="has not logged transaction"):
        service.set_source("failover", mariadb.host, mariadb.port)
    assert f"port: {primary.port}" in path.read_text()
    service.set_source("failover", replica.host, replica.port)
    moved = load_pipeline(path)                                  # the config now names it
    assert moved.source.port == replica.port
    run_pipeline(moved, until_idle=True, spark=spark)
    state = tmp_path / "ck" / "0-changelog" / "mysqlcdc-schema"
    (done,) = (state / "seek-done").glob("*.json")
    request = json.loads(done.read_text())
    assert request["reason"] == "failover" and request["epoch"] == 1
    assert list(state.glob("schema-history.jsonl.failover-*"))   # the old server's history

    rows = spark.read.parquet(str(tmp_path / "changelog")).orderBy("seq").collect()
    changes = [(r["op"], json.loads(r["key"])["id"], r["server_id"], int(r["seq"])) for r in rows]
    expected_ops = ([("c", i) for i in range(1, 21)] + [("u", 3), ("u", 4)]
                    + [("c", i) for i in range(21, 31)] + [("u", 5)]
                    + [("c", i) for i in range(31, 41)] + [("u", 1), ("u", 21), ("u", 31)])
    assert [(op, key) for op, key, _, _ in changes] == expected_ops   # nothing lost or repeated
    seqs = [seq for *_, seq in changes]
    assert seqs == sorted(set(seqs))                               # unique, in order
    assert all(seq < SEQ_EPOCH for *_, seq in changes[:22])        # read from the primary
    assert all(seq > SEQ_EPOCH for *_, seq in changes[22:])        # from the replica: epoch 1
    # the state the changelog rebuilds is the replica's table
    state = {}
    for r in rows:
        state[json.loads(r["key"])["id"]] = json.loads(r["after"])["v"]
    table = dict(replica.sql("SELECT id, v FROM shop.item"))
    assert state == table
    # the pipeline now knows the replica as its source: a restart reads on from it
    _write(replica, 41, 41)
    run_pipeline(moved, until_idle=True, spark=spark)
    assert spark.read.parquet(str(tmp_path / "changelog")).count() == len(rows) + 1


def test_a_failover_behind_a_ddl_carries_the_schema_history_over(spark, topology, tmp_path):
    """The pipeline stopped before an ALTER that both servers have run: the new server's
    definitions of today do not describe the rows before it, so the history is carried
    over from the old server's at the committed GTID set, not bootstrapped again."""
    primary, replica = topology
    primary.sql("CREATE DATABASE shop", "CREATE TABLE shop.item (id INT PRIMARY KEY, v TEXT)")
    cfg = _cfg(primary, tmp_path, str(binlog_position(primary)))
    _write(primary, 1, 5)
    run_pipeline(cfg, until_idle=True, spark=spark)
    _write(primary, 6, 8, update=[1])                            # behind the pipeline: read
    primary.sql("ALTER TABLE shop.item ADD COLUMN w INT DEFAULT 7",   # from the replica
                "INSERT INTO shop.item VALUES (9, 'v9', 9)")
    wait_replicated(primary, replica)
    primary.stop()
    replica.sql("STOP SLAVE", "RESET SLAVE ALL",
                "ALTER TABLE shop.item DROP COLUMN v",           # after the failover
                "INSERT INTO shop.item VALUES (10, 10)")

    run_pipeline(_cfg(replica, tmp_path, str(cfg.source.start)), until_idle=True, spark=spark)

    rows = spark.read.parquet(str(tmp_path / "changelog")).orderBy("seq").collect()
    after = [(r["op"], json.loads(r["after"])) for r in rows if r["op"] in "cu"]
    assert after[5:] == [("c", {"id": 6, "v": "v6"}), ("c", {"id": 7, "v": "v7"}),
                         ("c", {"id": 8, "v": "v8"}), ("u", {"id": 1, "v": "u1-%d" % primary.port}),
                         ("c", {"id": 9, "v": "v9", "w": 9}), ("c", {"id": 10, "w": 10})]
    folder = tmp_path / "ck" / "0-changelog" / "mysqlcdc-schema"
    assert list(folder.glob("schema-history.jsonl.failover-*"))  # the old server's history


def test_a_failover_during_the_initial_snapshot_reads_the_rest_from_the_new_server(
        spark, topology, tmp_path):
    """The pipeline is killed while its initial snapshot is under way, its primary lost,
    and it is started on the promoted replica: the seek there ends the snapshot phase, so
    the tables it had not read yet are read from the new server, as backfills."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from mysqlcdc.spark.checkpoint import committed_batches, offset_data

    primary, replica = topology
    primary.sql("CREATE DATABASE shop",
                *[f"CREATE TABLE shop.t{i} (id INT PRIMARY KEY, v INT)" for i in range(3)],
                *[f"INSERT INTO shop.t{i} SELECT seq, seq * {i + 1} FROM shop.seq_1_to_600"
                  for i in range(3)])
    data = _data(primary, tmp_path, "latest")
    data["source"]["snapshot"] = {"mode": "initial", "chunk_rows": 20, "chunks_per_batch": 1}
    config = tmp_path / "first.yaml"
    config.write_text(yaml.safe_dump(data))
    run = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config)],
                           env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    checkpoint = tmp_path / "ck" / "0-changelog"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:              # a few chunks in: kill it
            done = committed_batches(checkpoint) if (checkpoint / "commits").is_dir() else []
            if len(done) >= 4:
                break
            time.sleep(0.2)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    committed = offset_data(checkpoint, committed_batches(checkpoint)[0])
    assert committed["snapshot"]["tables"]               # the snapshot was not finished
    assert "identity" in json.loads((checkpoint / "mysqlcdc-schema" / "source.json").read_text())
    primary.sql("INSERT INTO shop.t0 VALUES (1000, 1)", "UPDATE shop.t2 SET v = 0 WHERE id = 5")
    wait_replicated(primary, replica)
    primary.stop()
    replica.sql("STOP SLAVE", "RESET SLAVE ALL", "DELETE FROM shop.t1 WHERE id <= 10")

    data = _data(replica, tmp_path, "latest")
    data["source"]["snapshot"] = {"mode": "initial", "chunk_rows": 200}
    run_pipeline(load_pipeline_from_dict(data), until_idle=True, spark=spark)

    rows = spark.read.parquet(str(tmp_path / "changelog")).orderBy("seq").collect()
    for i in range(3):
        state: dict = {}
        for r in rows:
            if r["table"] == f"t{i}" and r["op"] in "cur":
                state[json.loads(r["key"])["id"]] = json.loads(r["after"])["v"]
            elif r["table"] == f"t{i}" and r["op"] == "d":
                state.pop(json.loads(r["key"])["id"], None)
        assert state == dict(replica.sql(f"SELECT id, v FROM shop.t{i}")), f"t{i}"
    assert any(int(r["seq"]) > SEQ_EPOCH and r["op"] == "r" for r in rows)   # from the replica


def test_a_failover_keeps_a_quarantined_table_held(spark, topology, tmp_path):
    """A table the old server's history quarantined stays quarantined after the failover
    (its rows wait for `mysqlcdc schema resolve`), and the other tables' definitions are
    carried over as ever: a DDL since the last commit stops nothing."""
    from mysqlcdc.schema.history import Quarantine, SchemaHistory
    from mysqlcdc.spark.checkpoint import committed_batches, offset_data

    primary, replica = topology
    primary.sql("CREATE DATABASE shop", "CREATE TABLE shop.item (id INT PRIMARY KEY, v TEXT)",
                "CREATE TABLE shop.other (id INT PRIMARY KEY)")
    cfg = _cfg(primary, tmp_path, str(binlog_position(primary)))
    _write(primary, 1, 3)
    run_pipeline(cfg, until_idle=True, spark=spark)
    folder = tmp_path / "ck" / "0-changelog" / "mysqlcdc-schema"
    checkpoint = tmp_path / "ck" / "0-changelog"
    last = offset_data(checkpoint, committed_batches(checkpoint)[0])
    at = binlog_position(primary)
    assert (last["file"], int(last["pos"])) == (at.file, at.pos)
    SchemaHistory(folder).quarantine(Quarantine(      # as the stream does for a DDL it
        "shop", "other", at, at, "the DDL cannot be parsed", "ALTER TABLE shop.other ..."))
    primary.sql("ALTER TABLE shop.item ADD COLUMN w INT DEFAULT 7",   # not read yet
                "INSERT INTO shop.item VALUES (4, 'v4', 4)", "INSERT INTO shop.other VALUES (1)")
    wait_replicated(primary, replica)
    primary.stop()
    replica.sql("STOP SLAVE", "RESET SLAVE ALL")

    run_pipeline(_cfg(replica, tmp_path, str(cfg.source.start)), until_idle=True, spark=spark)

    rows = spark.read.parquet(str(tmp_path / "changelog")).orderBy("seq").collect()
    assert [json.loads(r["after"]) for r in rows if r["op"] == "c" and r["table"] == "item"][-1] \
        == {"id": 4, "v": "v4", "w": 4}
    assert not [r for r in rows if r["table"] == "other" and r["op"] == "c"]   # held
    held = SchemaHistory(folder).open_quarantine("shop", "other")
    assert held is not None and "before the failover" in held.reason
