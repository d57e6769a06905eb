"""The mirror sink end to end: MariaDB -> Spark -> PostgreSQL equals SELECT * of the source."""

from __future__ import annotations

import random
import threading
import time

import pytest

from mysqlcdc.sinks.mirror import MirrorSettings, read_consistent, read_position, start_mirror

from tests.support.mariadb import binlog_position
from tests.support.mirror import assert_target_equals_source

pytestmark = pytest.mark.e2e


def _types_workload(mariadb, db: str) -> None:
    mariadb.sql(
        f"CREATE TABLE `{db}`.v (id INT PRIMARY KEY, u BIGINT UNSIGNED, ti TINYINT UNSIGNED,"
        " d DECIMAL(20,6), f DOUBLE, t TIME(6), dt DATETIME(3), da DATE, ts TIMESTAMP(3) NULL,"
        " s SET('x','y'), e ENUM('a','b'), b BIT(10), vb VARBINARY(8), txt TEXT, j JSON, yr YEAR)",
        f"INSERT INTO `{db}`.v VALUES (1, 18446744073709551615, 255, -1.5, 2.25,"
        " '-838:59:59.000000', '2024-02-29 13:45:07.123', '2024-02-29',"
        " '2024-02-29 13:45:07.123', 'x,y', 'b', b'1000000001', X'00FF', 'ü€', '{\"a\": [1]}', 2024)",
        f"INSERT INTO `{db}`.v (id) VALUES (2), (3)",
        f"UPDATE `{db}`.v SET txt = 'changed', d = 99999999999999.999999 WHERE id = 2",
        f"DELETE FROM `{db}`.v WHERE id = 3",
        "SET SESSION sql_mode = ''",
    )
    conn = mariadb.connect(database=db, autocommit=True)
    with conn.cursor() as cur:   # zero dates need a lax sql_mode in the same session
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("INSERT INTO v (id, da, dt) VALUES (4, '0000-00-00', '0000-00-00 00:00:00')")
    conn.close()


def _ddl_workload(mariadb, db: str, seed: int) -> None:
    rnd = random.Random(seed)
    mariadb.sql(f"CREATE TABLE `{db}`.hot (k INT PRIMARY KEY, n INT, note VARCHAR(20))",
                f"CREATE TABLE `{db}`.gone (id INT PRIMARY KEY)",
                f"INSERT INTO `{db}`.gone VALUES (1), (2)")
    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        for i in range(200):
            k = rnd.randint(1, 8)
            op = rnd.random()
            if op < 0.6:
                cur.execute("INSERT INTO hot (k, n) VALUES (%s, 1) ON DUPLICATE KEY UPDATE n = n + 1",
                            (k,))
            else:
                cur.execute("DELETE FROM hot WHERE k = %s", (k,))
            if i == 80:
                conn.commit()
                cur.execute("ALTER TABLE hot ADD COLUMN extra DECIMAL(8,2), "
                            "RENAME COLUMN note TO label, MODIFY n BIGINT")
            if i == 120:
                conn.commit()
                cur.execute("TRUNCATE TABLE gone")
                cur.execute("INSERT INTO gone VALUES (7)")
            if i == 150:
                conn.commit()
                cur.execute("RENAME TABLE gone TO kept")
                cur.execute("INSERT INTO kept VALUES (8)")
            if i > 80 and rnd.random() < 0.3:
                cur.execute("UPDATE hot SET extra = %s, label = %s WHERE k = %s",
                            (f"{rnd.randint(0, 9999)}.25", f"l{i}", k))
            if rnd.random() < 0.5:
                conn.commit()
        conn.commit()
    conn.close()


FIXTURES = {"postgresql": ("postgres", "postgres"), "mysql": ("mariadb_target", "mysqlcdc"),
            "redis": ("redis_server", "0")}


def target_settings(kind: str, request, **extra) -> tuple[MirrorSettings, object]:
    """Settings for a mirror into ``kind``, and its server (for delta: the root folder)."""
    if kind == "delta":
        root = request.getfixturevalue("tmp_path") / "delta-mirror"
        return MirrorSettings(target="delta", path=str(root), **extra), root
    fixture, database = FIXTURES[kind]
    server = request.getfixturevalue(fixture)
    return MirrorSettings(target=kind, host=server.host, port=server.port,
                          user=getattr(server, "user", None), password=server.password,
                          database=database, **extra), server


@pytest.mark.parametrize("kind,mode", [("postgresql", "current"), ("mysql", "current"),
                                       ("redis", "current"), ("delta", "current"),
                                       ("delta", "history"), ("postgresql", "history")])
def test_mirror_equals_source(spark, mariadb, fresh_db, source_options, tmp_path, request, kind,
                              mode):
    start = str(binlog_position(mariadb))
    history = str(tmp_path / "history")
    settings, server = target_settings(kind, request, pipeline=f"e2e-{fresh_db}",
                                       history_dir=history, mode=mode)
    df = spark.readStream.format("mysqlcdc").options(**source_options(
        startingPosition=start, include=f"{fresh_db}.*", schemaHistory=history,
        maxEventsPerBatch=150)).load()
    query = start_mirror(df, settings, checkpoint=str(tmp_path / "ck"),
                         trigger_interval="200 milliseconds")
    try:
        query.processAllAvailable()      # the history starts before the DDL below
        _types_workload(mariadb, fresh_db)
        _ddl_workload(mariadb, fresh_db, seed=5)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert_target_equals_source(mariadb, server, kind, fresh_db,
                                ["hot", "kept"] if kind == "redis" else ["v", "hot", "kept"],
                                history=mode == "history")
    if kind == "delta":
        assert not (server / fresh_db / "gone").exists()
        position = read_position(settings)
        assert position["batch_id"] >= 2 and position["stopped"] == []
        cut = read_consistent(server)
        assert set(cut.tables) == {f"{fresh_db}.{t}" for t in ("v", "hot", "kept")}
        assert str(cut.position) == position["position"]
        return
    if kind == "redis":
        assert not list(server.client().scan_iter(f"{fresh_db}:gone:*"))
        (key,) = server.client().keys(f"mysqlcdc:offsets:{settings.pipeline}@*")
        assert int(server.client().hget(key, "batch_id")) >= 2
        return
    assert not server.sql(f"SELECT 1 FROM information_schema.tables WHERE table_schema = "
                          f"'{fresh_db}' AND table_name = 'gone'")
    ledger = "public" if kind == "postgresql" else settings.database
    batches, = server.sql(f"SELECT batch_id FROM {ledger}.mysqlcdc_offsets "
                          f"WHERE pipeline LIKE '{settings.pipeline}@%'")
    assert batches[0] >= 2, "the work should span several batches"


def _steady_writer(mariadb, db: str, n: int, done, half=None) -> None:
    conn = mariadb.connect(database=db, autocommit=True)
    rnd = random.Random(9)
    with conn.cursor() as cur:
        for i in range(1, n + 1):
            cur.execute("INSERT INTO item VALUES (%s, %s)", (i, f"v{i}"))
            if i % 4 == 0:
                cur.execute("UPDATE item SET body = %s WHERE id = %s", (f"u{i}", rnd.randint(1, i)))
            if i % 7 == 0:
                cur.execute("DELETE FROM item WHERE id = %s", (rnd.randint(1, i),))
            if half is not None and i == n // 2:
                half.set()
            time.sleep(0.02)
    conn.close()
    done.set()


@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_target_down_mid_stream(spark, mariadb, fresh_db, source_options, tmp_path, request, kind,
                                caplog):
    """Stop the target server while batches flow, start it again: nothing lost or doubled."""
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.item (id INT PRIMARY KEY, body VARCHAR(20))")
    start = str(binlog_position(mariadb))
    history = str(tmp_path / "history")
    settings, server = target_settings(kind, request, pipeline=f"down-{fresh_db}",
                                       history_dir=history, attempts=60, initial_delay_s=0.2,
                                       max_delay_s=1.0, connect_timeout_s=2)
    df = spark.readStream.format("mysqlcdc").options(**source_options(
        startingPosition=start, include=f"{fresh_db}.*", schemaHistory=history,
        maxEventsPerBatch=60)).load()
    query = start_mirror(df, settings, checkpoint=str(tmp_path / "ck"),
                         trigger_interval="100 milliseconds")
    caplog.set_level("WARNING", logger="mysqlcdc.sinks.mirror.writer")
    done, half = threading.Event(), threading.Event()
    writer = threading.Thread(target=_steady_writer, args=(mariadb, fresh_db, 400, done, half),
                              daemon=True)
    try:
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)                # the query runs; now the workload
        writer.start()
        assert half.wait(120)
        server.stop()                      # mid-stream: the running batch fails and retries
        time.sleep(2.0)                    # the outage itself, not a wait for a condition
        server.restart()
        writer.join(timeout=300)
        assert done.is_set()
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert any("retrying in" in r.getMessage() for r in caplog.records), "no batch met the outage"
    assert_target_equals_source(mariadb, server, kind, fresh_db, ["item"])
