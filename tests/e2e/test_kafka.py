"""The Kafka sink against a real Kafka-protocol broker and a real MariaDB, through Spark."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from mysqlcdc.sinks.kafka import KafkaSettings, read_last_commit, start_kafka
from mysqlcdc.types import BinlogPosition, make_seq
from tests.support.kafka import read_topic

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e



def _settings(kafka, prefix: str, **extra) -> KafkaSettings:
    options = {"pipeline": prefix, "delivery_timeout_s": 20, **extra}
    return KafkaSettings(producer={"bootstrap.servers": kafka.bootstrap}, prefix=prefix, **options)


def _run(spark, source_options, tmp_path, settings, *, write_tasks=3, in_tasks=False,
         **source) -> None:
    """``in_tasks``: the read tasks publish (what `mysqlcdc run` does), else write tasks."""
    df = _changes_df(spark, source_options(**source), settings, in_tasks)
    query = start_kafka(df, settings, checkpoint=str(tmp_path / "ck"),
                        trigger_interval="200 milliseconds", write_tasks=write_tasks,
                        written=in_tasks)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def _changes_df(spark, options: dict, settings: KafkaSettings, in_tasks: bool):
    """The source's stream; ``in_tasks``: with the sink's task writer (its read tasks publish)."""
    if in_tasks:
        from mysqlcdc.sinks.kafka import task_writer
        from mysqlcdc.spark.taskwrite import writer_option

        options = {**options, **writer_option(task_writer(settings))}
    return spark.readStream.format("mysqlcdc").options(**options).load()


def _messages(kafka, topic: str) -> dict[int, list]:
    return read_topic(kafka.bootstrap, topic)


def _updates_workload(mariadb, db: str, keys: int, txns: int) -> dict[int, list[int]]:
    """Inserts ``keys`` rows, then random updates of v in transactions of 1..40 rows.
    Returns the sequence of v values each key took, in commit order."""
    rnd = random.Random(5)
    mariadb.sql(f"CREATE TABLE `{db}`.k (id INT PRIMARY KEY, v INT)")
    history: dict[int, list[int]] = {i: [0] for i in range(keys)}
    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO k VALUES (%s, 0)", [(i,) for i in range(keys)])
        conn.commit()
        for n in range(1, txns + 1):
            for key in rnd.sample(range(keys), rnd.choice([1, 5, 40])):
                cur.execute("UPDATE k SET v = %s WHERE id = %s", (n, key))
                history[key].append(n)
            conn.commit()
    conn.close()
    return history


# the stream writer (a chain with an ordered stage keeps it): 3 write tasks after a
# shuffle by key, batches planned by the driver's walk; then the read tasks publishing
# (what `mysqlcdc run` does): slices of a few kB, two per batch, share keys (their
# messages go through 3 write tasks), or one task per batch publishes alone
@pytest.mark.parametrize("write_tasks,planning,in_tasks,parallelism", [
    (3, {"planning": "driver"}, False, 2),
    (3, {"minSliceBytes": 2000}, True, 2), (3, {}, True, 1)])
def test_per_key_order_over_many_keys_and_partitions(spark, mariadb, kafka, fresh_db,
                                                     source_options, tmp_path, write_tasks,
                                                     planning, in_tasks, parallelism):
    start = binlog_position(mariadb)
    history = _updates_workload(mariadb, fresh_db, keys=300, txns=150)
    end = binlog_position(mariadb)
    settings = _settings(kafka, fresh_db, partitions=5, transaction_topic="{prefix}.txns")
    _run(spark, source_options, tmp_path, settings, startingPosition=str(start),
         include=f"{fresh_db}.k", parallelism=parallelism, maxEventsPerBatch=400,
         write_tasks=write_tasks, schemaHistory=str(tmp_path / "ck" / "mysqlcdc-schema"),
         in_tasks=in_tasks,
         **planning)     # where `mysqlcdc run` keeps it: the commit log finds the batch ends

    parts = _messages(kafka, f"{fresh_db}.{fresh_db}.k")
    assert len(parts) == 5 and sum(1 for p in parts.values() if p) == 5
    seen: dict[int, list[int]] = defaultdict(list)
    partition_of: dict[int, set[int]] = defaultdict(set)
    for partition, msgs in parts.items():
        for m in msgs:
            key = json.loads(m.key())["id"]
            seen[key].append(json.loads(m.value())["after"]["v"])
            partition_of[key].add(partition)
    assert dict(seen) == history                       # every change, per key in commit order
    assert all(len(p) == 1 for p in partition_of.values())

    # Transaction boundaries: one BEGIN/END per transaction, END counts sum to every row.
    boundaries = [json.loads(m.value()) for m in _messages(kafka, f"{fresh_db}.txns")[0]]
    ends = [b for b in boundaries if b["status"] == "END"]
    assert len(ends) == 151 and sum(b["event_count"] for b in ends) == sum(map(len, history.values()))
    assert {c["data_collection"] for b in ends for c in b["data_collections"]} == {f"{fresh_db}.k"}

    last = read_last_commit(settings)
    assert last is not None and last.position == end and last.pipeline == fresh_db


def _pipeline(mariadb, kafka, db: str, tmp_path, start: BinlogPosition, *, more_sinks=(),
              include=None, **sink):
    from mysqlcdc.config import load_pipeline_from_dict

    return load_pipeline_from_dict({
        "name": db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": 3100 + int(db.rsplit("_", 1)[-1]), "start": str(start),
                   "tables": {"include": include or [f"{db}.*"]}, "max_events_per_batch": 200},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"},
        "sinks": [{"kafka": {"bootstrap_servers": kafka.bootstrap, "delivery_timeout_s": 10,
                             "topic_prefix": db, "partitions": 3, **sink}}, *more_sinks],
    })


def test_a_changelog_sink_after_a_kafka_sink_writes_its_own_files(
        spark, mariadb, kafka, fresh_db, tmp_path):
    """Each sink's read tasks get that sink's task writer, whatever the sinks' order."""
    import pyarrow.parquet as pq

    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO `{fresh_db}`.t VALUES (1, 10), (2, 20)",
                f"UPDATE `{fresh_db}`.t SET v = 21 WHERE id = 2")
    out = tmp_path / "changelog"
    cfg = _pipeline(mariadb, kafka, fresh_db, tmp_path, start,
                    more_sinks=[{"changelog": {"path": str(out)}}])
    run_pipeline(cfg, until_idle=True, spark=spark)
    msgs = [json.loads(m.value()) for p in _messages(kafka, f"{fresh_db}.{fresh_db}.t").values()
            for m in p]
    assert sorted((m["op"], m["key"]["id"]) for m in msgs) == [
        ("c", 1), ("c", 2), ("u", 2)]
    rows = pq.read_table(sorted(str(f) for f in out.rglob("*.parquet"))).to_pylist()
    assert sorted((r["op"], json.loads(r["key"])["id"]) for r in rows if r["op"] != "s") == [
        ("c", 1), ("c", 2), ("u", 2)]


def test_debezium_format_and_resume_from_sink_after_losing_the_checkpoint(
        spark, mariadb, kafka, fresh_db, tmp_path):
    import shutil

    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    mariadb.sql(
        f"CREATE TABLE `{fresh_db}`.acct (id BIGINT UNSIGNED PRIMARY KEY, bal DECIMAL(10,2), "
        "name VARCHAR(20))",
        f"INSERT INTO `{fresh_db}`.acct VALUES (18446744073709551615, -12.50, 'ü')",
        f"UPDATE `{fresh_db}`.acct SET bal = 3 WHERE id = 18446744073709551615",
        f"DELETE FROM `{fresh_db}`.acct WHERE id = 18446744073709551615",
    )
    cfg = _pipeline(mariadb, kafka, fresh_db, tmp_path, start, format="debezium",
                    schemas=False, decimal_handling_mode="string",
                    bigint_unsigned_handling_mode="precise", position_headers=True)
    run_pipeline(cfg, until_idle=True, spark=spark)
    topic = f"{fresh_db}.{fresh_db}.acct"
    msgs = [m for p in _messages(kafka, topic).values() for m in p]
    assert len(msgs) == 4 and {m.partition() for m in msgs} == {msgs[0].partition()}
    c, u, d, tomb = msgs                                # tombstones: Debezium's default
    assert json.loads(c.key()) == {"id": "AP//////////"} and tomb.key() == d.key()
    assert tomb.value() is None
    cv, uv, dv = (json.loads(m.value()) for m in (c, u, d))
    assert [v["op"] for v in (cv, uv, dv)] == ["c", "u", "d"]
    assert cv["before"] is None and dv["after"] is None
    assert cv["after"] == {"id": "AP//////////", "bal": "-12.50", "name": "ü"}
    assert uv["before"]["bal"] == "-12.50" and uv["after"]["bal"] == "3.00"
    # the CREATE TABLE went to the schema-change topic, named after the prefix
    [ddl] = [json.loads(m.value()) for m in _messages(kafka, fresh_db)[0]]
    assert ddl["tableChanges"][0]["type"] == "CREATE" and ddl["databaseName"] == fresh_db
    src = cv["source"]
    assert (src["connector"], src["name"], src["db"], src["table"]) == (
        "mysql", fresh_db, fresh_db, "acct")
    assert src["snapshot"] == "false" and src["server_id"] == 1 and src["row"] == 0
    assert src["file"].startswith("mariadb-bin.") and src["pos"] > 4
    assert src["gtid"].count("-") == 2 and src["ts_ms"] > 1_600_000_000_000
    assert cv["ts_ms"] >= src["ts_ms"] and "version" in src
    hdr = dict(c.headers())
    assert hdr["seq"].decode() == src["seq"] and hdr["file"].decode() == src["file"]
    assert hdr["pos"].decode() == str(src["pos"]) and hdr["gtid"].decode() == src["gtid"]
    assert int(src["seq"]) < int(uv["source"]["seq"]) < int(dv["source"]["seq"])

    # The checkpoint is lost; more changes arrive; the commit log says where to go on.
    shutil.rmtree(tmp_path / "ck")
    mariadb.sql(f"INSERT INTO `{fresh_db}`.acct VALUES (7, 1, 'new')")
    run_pipeline(cfg, until_idle=True, spark=spark, resume_from_sink=True)
    msgs = [m for p in _messages(kafka, topic).values() for m in p]
    ops = [json.loads(m.value())["op"] for m in msgs if m.value() is not None]
    assert sorted(ops) == ["c", "c", "d", "u"], "nothing twice, nothing missing"


def _inserts_and_updates(mariadb, db: str, ids: range, pause_s: float = 0.0) -> None:
    """One transaction per id: insert it, and every third id update the previous one."""
    import time

    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO item VALUES (%s, 'x')", (i,))
            if i % 3 == 0:
                cur.execute("UPDATE item SET body = 'updated' WHERE id = %s", (i - 1,))
            conn.commit()
            time.sleep(pause_s)
    conn.close()


def _changes(kafka, topic: str) -> list[tuple[int, str, int]]:
    """(id, op, seq) of every message, duplicates included."""
    out = []
    for msgs in _messages(kafka, topic).values():
        for m in msgs:
            v = json.loads(m.value())
            out.append((json.loads(m.key())["id"], v["op"], int(v["seq"])))
    return out


def _start_cli(config, *args: str):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _batch_end(kafka, settings: KafkaSettings, batch_id: int) -> int:
    """The lowest seq after batch ``batch_id`` by the commit log (0 before the first)."""
    records = [json.loads(m.value())
               for m in _messages(kafka, settings.resolve(settings.commit_topic))[0]]
    ends = [r["end"] for r in records if r["pipeline"] == settings.pipeline
            and r["batch_id"] == batch_id]
    if not ends:
        return 0
    end = BinlogPosition.of(ends[0]["file"], ends[0]["pos"])
    return make_seq(end.file_number, end.pos, 0)


def test_sigkill_mid_stream_then_restart_loses_nothing(mariadb, kafka, fresh_db, tmp_path):
    import os
    import signal
    import threading
    import time

    import yaml

    total = 450
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.item (id INT PRIMARY KEY, body VARCHAR(20))")
    cfg = _pipeline(mariadb, kafka, fresh_db, tmp_path, binlog_position(mariadb))
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    settings = _settings(kafka, fresh_db, pipeline=cfg.name)
    writer = threading.Thread(target=_inserts_and_updates,
                              args=(mariadb, fresh_db, range(1, total + 1), 0.02))
    writer.start()
    proc = _start_cli(config)
    while read_last_commit(settings) is None:          # at least one batch fully published
        assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
        time.sleep(0.2)
    time.sleep(random.Random(1).uniform(0.2, 1.0))      # somewhere inside a later batch
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before_restart = read_last_commit(settings)
    writer.join()
    final = _start_cli(config, "--until-idle")
    assert final.wait(timeout=600) == 0, (tmp_path / "pipeline.log").read_text()[-3000:]

    changes = _changes(kafka, f"{fresh_db}.{fresh_db}.item")
    assert {i for i, op, _ in changes if op == "c"} == set(range(1, total + 1))
    assert len({s for _, op, s in changes if op == "u"}) == total // 3
    seqs = [s for _, _, s in changes]
    repeated = {s for s in seqs if seqs.count(s) > 1}
    # The kill may fall after the commit-log record of batch N and before Spark marked
    # N done: then N is replayed. So repeats start at the end of batch N-1 at the earliest.
    floor = _batch_end(kafka, settings, before_restart.batch_id - 1)
    assert all(s >= floor for s in repeated), "only a replayed batch may repeat changes"
    assert read_last_commit(settings).position == binlog_position(mariadb)


def test_broker_outage_mid_stream_loses_nothing_after_it_returns(
        spark, mariadb, fresh_db, source_options, tmp_path):
    import os

    from tests.support.kafka import Broker

    if os.environ.get("KAFKA_BOOTSTRAP"):
        pytest.skip("kills its broker: runs only on a private Tansu")
    broker = Broker().start()
    try:
        _outage(spark, mariadb, fresh_db, source_options, tmp_path, broker)
    finally:
        broker.kill()


def _outage(spark, mariadb, fresh_db, source_options, tmp_path, broker) -> None:
    """The read tasks publish (what `mysqlcdc run` does): the outage is met inside them."""
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.item (id INT PRIMARY KEY, body VARCHAR(20))")
    start = binlog_position(mariadb)
    settings = _settings(broker, fresh_db, partitions=3, delivery_timeout_s=3,
                         delivery_attempts=40)
    df = _changes_df(spark, source_options(startingPosition=str(start),
                                           include=f"{fresh_db}.item"), settings, True)
    query = start_kafka(df, settings, checkpoint=str(tmp_path / "ck"),
                        trigger_interval="200 milliseconds", write_tasks=2, written=True)
    topic = f"{fresh_db}.{fresh_db}.item"
    try:
        _inserts_and_updates(mariadb, fresh_db, range(1, 101))
        query.processAllAvailable()
        assert {i for i, op, _ in _changes(broker, topic) if op == "c"} == set(range(1, 101))
        broker.kill()                                   # everything on it is gone
        _inserts_and_updates(mariadb, fresh_db, range(101, 201), 0.02)
        broker.start()                                  # an empty broker on the same port
        _inserts_and_updates(mariadb, fresh_db, range(201, 301))
        query.processAllAvailable()
        assert query.exception() is None and query.isActive
    finally:
        query.stop()
    changes = _changes(broker, topic)
    assert {i for i, op, _ in changes if op == "c"} >= set(range(101, 301))
    assert {i for i, op, _ in changes if op == "u"} >= {i - 1 for i in range(101, 301) if i % 3 == 0}


def test_a_broker_that_stays_down_stops_the_pipeline_with_a_named_error_and_loses_nothing(
        spark, mariadb, fresh_db, tmp_path):
    """The read tasks meet the outage; past ``delivery_attempts`` the pipeline stops with
    KAFKA_DELIVERY_FAILED and its checkpoint holds no batch, so the next run, with the
    broker back, publishes every change."""
    import os

    from mysqlcdc.errors import MysqlcdcError
    from mysqlcdc.pipeline.runner import run_pipeline
    from tests.support.kafka import Broker

    if os.environ.get("KAFKA_BOOTSTRAP"):
        pytest.skip("needs a broker it can start late: runs only on a private Tansu")
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.item (id INT PRIMARY KEY, body VARCHAR(20))")
    start = binlog_position(mariadb)
    _inserts_and_updates(mariadb, fresh_db, range(1, 31))
    broker = Broker()                                   # its port, nothing listening yet
    cfg = _pipeline(mariadb, broker, fresh_db, tmp_path, start, delivery_timeout_s=2,
                    delivery_attempts=1)
    with pytest.raises(MysqlcdcError) as failed:
        run_pipeline(cfg, until_idle=True, spark=spark)
    assert failed.value.code == "KAFKA_DELIVERY_FAILED", failed.value
    assert not list((tmp_path / "ck").rglob("commits/[0-9]*"))     # no batch counted done
    broker.start()
    try:
        run_pipeline(cfg, until_idle=True, spark=spark)
        changes = _changes(broker, f"{fresh_db}.{fresh_db}.item")
    finally:
        broker.kill()
    assert {i for i, op, _ in changes if op == "c"} == set(range(1, 31))
    assert {i for i, op, _ in changes if op == "u"} == {i - 1 for i in range(3, 31, 3)}


@pytest.mark.parametrize("fmt", ["mysqlcdc", "debezium"])
def test_a_table_renamed_in_place_of_another_leaves_none_of_its_keys_in_the_topic(
        spark, mariadb, kafka, fresh_db, tmp_path, fmt):
    """An online schema change's cut-over: the name's topic gets a ``t`` at the RENAME,
    then the new table's rows; a consumer that applies ``t`` ends with the new table."""
    from mysqlcdc.pipeline.runner import run_pipeline

    db = fresh_db
    start = binlog_position(mariadb)
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO `{db}`.t VALUES (1, 1), (2, 2), (3, 3)")
    cfg = _pipeline(mariadb, kafka, db, tmp_path, start, include=[f"{db}.t"], format=fmt,
                    schemas=False)
    run_pipeline(cfg, until_idle=True, spark=spark)
    mariadb.sql(f"CREATE TABLE `{db}`._t_gho LIKE `{db}`.t",
                f"ALTER TABLE `{db}`._t_gho ADD COLUMN w INT DEFAULT 7",
                f"INSERT INTO `{db}`._t_gho (id, v) SELECT id, v * 10 FROM `{db}`.t WHERE id < 3",
                f"RENAME TABLE `{db}`.t TO `{db}`._t_del, `{db}`._t_gho TO `{db}`.t",
                f"DROP TABLE `{db}`._t_del",
                f"INSERT INTO `{db}`.t VALUES (4, 40, 8)")
    run_pipeline(cfg, until_idle=True, spark=spark)

    events = []
    for m in (m for p in _messages(kafka, f"{db}.{db}.t").values() for m in p):
        if m.value() is None:
            continue
        v = json.loads(m.value())
        seq = v["source"]["seq"] if fmt == "debezium" else v["seq"]
        events.append((int(seq), v["op"], v["after"], m.key()))
    state = {}
    for _, op, after, key in sorted(events, key=lambda e: e[0]):
        if op == "t":
            state.clear()
        elif op == "d":
            state.pop(key, None)
        else:
            state[key] = after
    assert sorted((r["id"], r["v"], r.get("w")) for r in state.values()) == [
        (1, 10, 7), (2, 20, 7), (4, 40, 8)]
    assert [op for _, op, _, _ in sorted(events)].count("t") == 1
