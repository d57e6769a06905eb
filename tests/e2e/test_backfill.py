"""On-demand snapshots of a running pipeline: ``mysqlcdc snapshot`` and a row in the
signal table ask it to read a table (a filtered set) while the stream goes on and a
writer changes that table; a table added to ``include`` is snapshotted after a restart.
And ``snapshot.mode: when_needed``: a checkpoint whose position was purged snapshots
the tables again on the same checkpoint, and the changelog's current state is exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import pytest

from mysqlcdc.sinks.changelog import current_state_sql, read_changelog

from tests.support.mariadb import MariaDB

pytestmark = pytest.mark.e2e

ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _config(tmp_path: Path, server, include: list[str], server_id: int, mode: str = "never",
            name: str = "backfill-test", chunk_rows: int = 300) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: {name}
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: {server_id}
  tables: {{include: {json.dumps(include)}}}
  parallelism: 2
  snapshot: {{mode: {mode}, chunk_rows: {chunk_rows}, chunks_per_batch: 2,
              signal_table: {include[0].split('.')[0]}.mysqlcdc_signal}}
  reconnect: {{max_wait_s: 120, initial_delay_s: 0.2, max_delay_s: 2}}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "200 milliseconds"
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog: {{path: ./changelog}}
""")
    return path


def _run(config: Path, *args: str) -> subprocess.Popen:
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), "-v",
                             *args], stdout=log, stderr=subprocess.STDOUT, env=ENV,
                            start_new_session=True, cwd=config.parent)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", *args], env=ENV,
                          capture_output=True, text=True, timeout=120)


def _log(config: Path) -> str:
    return (config.parent / "pipeline.log").read_text(errors="replace")[-6000:]


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=90)


def _changes(spark, tmp_path: Path, table: str) -> list[dict]:
    try:
        df = read_changelog(spark, str(tmp_path / "changelog"))
    except Exception:                           # noqa: BLE001 - nothing committed yet
        return []
    return [r.asDict() for r in df.where(f"`table` = '{table}'")
            .select("op", "key", "after", "seq", "query").collect()]


def _wait(predicate, proc, config: Path, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(config)
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"{what} never happened\n{_log(config)}")


def _state(rows: list[dict]) -> set:
    last: dict = {}
    for r in sorted(rows, key=lambda r: int(r["seq"])):
        if r["op"] in ("c", "u", "d", "r"):
            last[r["key"]] = None if r["op"] == "d" else r["after"]
    return {json.dumps(json.loads(a), sort_keys=True) for a in last.values() if a is not None}


def _source(server, db: str, table: str, where: str = "1") -> set:
    conn = server.connect(database=db, cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table} WHERE {where}")
            return {json.dumps(r, sort_keys=True) for r in cur.fetchall()}
    finally:
        conn.close()


class Writer(threading.Thread):
    def __init__(self, server, db: str) -> None:
        super().__init__(daemon=True)
        self.server, self.db, self.stop_now, self.done = server, db, threading.Event(), 0

    def run(self) -> None:
        import random

        rnd = random.Random(3)
        conn = self.server.connect(database=self.db)
        fresh = 100000
        with conn.cursor() as cur:
            while not self.stop_now.is_set():
                fresh += 1
                k = rnd.randint(1, 2000)
                sql, args = rnd.choice([
                    ("UPDATE a SET v = v + 1 WHERE id = %s", (k,)),
                    ("DELETE FROM a WHERE id = %s", (k,)),
                    ("INSERT INTO a VALUES (%s, 0)", (fresh,)),
                    ("UPDATE a SET id = %s WHERE id = %s", (fresh + 10 ** 6, k)),
                ])
                try:
                    cur.execute(sql, args)
                    self.done += 1
                except pymysql.err.IntegrityError:
                    pass
                time.sleep(0.003)
        conn.close()


def test_backfills_on_demand_while_the_stream_runs(spark, mariadb, fresh_db, tmp_path):
    db = fresh_db
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT)",
                "INSERT INTO a SELECT seq, seq FROM seq_1_to_2000",
                "CREATE TABLE c (id INT PRIMARY KEY, v INT)",
                "INSERT INTO c SELECT seq, seq FROM seq_1_to_900", db=db)
    config = _config(tmp_path, mariadb, [f"{db}.a"], 7931)
    proc = _run(config)
    writer = Writer(mariadb, db)
    try:
        offsets = tmp_path / "checkpoint" / "0-changelog" / "offsets"
        _wait(lambda: offsets.is_dir() and any(offsets.glob("[0-9]*")), proc, config,
              "the stream's first batch")
        writer.start()
        time.sleep(1)
        # a table the pipeline does not capture is refused at once, with its name
        refused = _cli("snapshot", str(config), f"{db}.c")
        assert refused.returncode == 2 and "SNAPSHOT_REQUEST_INVALID" in refused.stderr \
            and f"{db}.c" in refused.stderr
        asked = _cli("snapshot", str(config), f"{db}.a")
        assert asked.returncode == 0, asked.stderr
        assert "requested" in asked.stdout
        _wait(lambda: sum(r["query"] == "backfill:last_in_table"
                          for r in _changes(spark, tmp_path, "a")) >= 1, proc, config,
              "the backfill of a")
        time.sleep(2)
    finally:
        writer.stop_now.set()
        if writer.is_alive():
            writer.join()
    mariadb.sql("INSERT INTO a VALUES (-1, -1)", db=db)
    _wait(lambda: '{"id":-1}' in {r["key"] for r in _changes(spark, tmp_path, "a")}, proc,
          config, "the last change")
    _stop(proc)
    assert writer.done > 100
    rows = _changes(spark, tmp_path, "a")
    assert sum(r["op"] == "r" for r in rows) > 1000 and any(r["op"] == "u" for r in rows)
    # rows older than the pipeline came only from the backfill: the state is exact anyway
    assert _state(rows) == _source(mariadb, db, "a")
    assert "backfill done" in _log(config)
    # the current-state SQL of the changelog honours r (and d after it)
    read_changelog(spark, str(tmp_path / "changelog")).createOrReplaceTempView("backfilled")
    current = {json.dumps(json.loads(r["row"]), sort_keys=True)
               for r in spark.sql(current_state_sql("backfilled", db, "a")).collect()}
    assert current == _source(mariadb, db, "a")

    # c is added to include: the restarted run reads it whole by itself (its rows were
    # never in the stream), and a signal row written by hand asks for its even rows
    # again (Debezium's signal format)
    config.write_text(config.read_text().replace(f'["{db}.a"]', f'["{db}.a", "{db}.c"]'))
    proc = _run(config)
    try:
        mariadb.sql("INSERT INTO mysqlcdc_signal VALUES ('by-hand-1', 'execute-snapshot', "
                    f"'{{\"data-collections\": [\"{db}.c\"], \"additional-conditions\": "
                    f"[{{\"data-collection\": \"{db}.c\", \"filter\": \"v % 2 = 0\"}}]}}')",
                    db=db)
        _wait(lambda: sum(r["query"] == "backfill:last_in_table"
                          for r in _changes(spark, tmp_path, "c")) >= 2, proc, config,
              "the two backfills of c")
    finally:
        _stop(proc)
    read = [json.dumps(json.loads(r["after"]), sort_keys=True)
            for r in _changes(spark, tmp_path, "c") if r["op"] == "r"]
    assert set(read) == _source(mariadb, db, "c")
    even = _source(mariadb, db, "c", "v % 2 = 0")
    assert sorted(read) == sorted([*_source(mariadb, db, "c"), *even])   # even rows twice
    assert "now captures" in _log(config) and f"{db}.c" in _log(config)
    # the signal table's rows are requests, not output
    assert not _changes(spark, tmp_path, "mysqlcdc_signal")


@pytest.fixture
def own(tmp_path):
    server = MariaDB(basedir=tmp_path / "server").start()
    server.keep = False
    server.sql("CREATE DATABASE shop")
    yield server
    server.stop()


def _in_process(spark, config: Path, **kw) -> None:
    """``mysqlcdc run --until-idle`` in this process's Spark session (no second JVM)."""
    from mysqlcdc.config.loader import load_pipeline
    from mysqlcdc.pipeline.runner import run_pipeline

    run_pipeline(load_pipeline(config), until_idle=True, spark=spark, **kw)


def test_when_needed_snapshots_a_purged_checkpoint_again(spark, own, tmp_path, caplog):
    own.sql("CREATE TABLE shop.item (id INT PRIMARY KEY, n INT)",
            "INSERT INTO shop.item SELECT seq, seq FROM shop.seq_1_to_1000",
            "CREATE TABLE shop.old (id INT PRIMARY KEY)", "INSERT INTO shop.old VALUES (1)")
    config = _config(tmp_path, own, ["shop.*"], 7951, mode="when_needed")
    _in_process(spark, config)
    # while it is stopped: changes, a DDL, and the binlog they are in purged
    own.sql("FLUSH BINARY LOGS", "DELETE FROM shop.item WHERE id <= 100",
            "UPDATE shop.item SET n = -n WHERE id > 900", "DROP TABLE shop.old",
            "ALTER TABLE shop.item ADD COLUMN note VARCHAR(4) DEFAULT 'x'",
            "FLUSH BINARY LOGS")
    newest = own.sql("SHOW BINARY LOGS")[-1][0]
    own.sql(f"PURGE BINARY LOGS TO '{newest}'")
    _in_process(spark, config)
    assert "snapshots its tables again" in caplog.text
    changelog = str(tmp_path / "changelog")
    rows = [r.asDict() for r in read_changelog(spark, changelog).collect()]
    item = [r for r in rows if r["table"] == "item"]
    assert sum(r["op"] == "r" for r in item) == 1000 + 900               # twice, all rows
    assert any(r["op"] == "t" and r["table"] == "old" for r in rows)
    assert any(r["op"] == "s" and r["table"] == "item" and "note" in (r["after"] or "")
               for r in rows)
    read_changelog(spark, changelog).createOrReplaceTempView("resnap")
    for table in ("item", "old"):
        current = {json.dumps(json.loads(r["row"]), sort_keys=True)
                   for r in spark.sql(current_state_sql("resnap", "shop", table)).collect()}
        expected = _source(own, "shop", table) if table == "item" else set()
        assert current == expected, table
    # the checkpoint went on: its offset log moved from the purged position to the new one
    offsets = sorted((tmp_path / "checkpoint" / "0-changelog" / "offsets").glob("[0-9]*"),
                     key=lambda p: int(p.name))
    reset = [json.loads(p.read_text().splitlines()[-1]) for p in offsets]
    assert any("reset" in (o.get("snapshot") or {}) for o in reset)


def test_a_server_restart_mid_snapshot_loses_nothing(spark, own, tmp_path):
    own.sql("CREATE TABLE shop.big (id INT PRIMARY KEY, v VARCHAR(40))",
            "INSERT INTO shop.big SELECT seq, CONCAT('v', seq) FROM shop.seq_1_to_20000")
    config = _config(tmp_path, own, ["shop.*"], 7961, mode="initial_only", chunk_rows=500)
    failed: list = []

    def run() -> None:
        try:
            _in_process(spark, config)
        except BaseException as exc:            # noqa: BLE001 - reported below
            failed.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    offsets = tmp_path / "checkpoint" / "0-changelog" / "offsets"
    deadline = time.monotonic() + 300
    while len(list(offsets.glob("[0-9]*"))) < 3 if offsets.is_dir() else True:
        assert time.monotonic() < deadline and runner.is_alive(), failed
        time.sleep(0.2)
    at_restart = len(list(offsets.glob("[0-9]*")))
    own.restart(down_s=3)                       # chunks and planning meet the outage
    runner.join(timeout=400)
    assert not runner.is_alive() and not failed, failed
    assert at_restart < len(list(offsets.glob("[0-9]*")))     # it went on after the restart
    keys = [json.loads(r["key"])["id"] for r in _changes(spark, tmp_path, "big")
            if r["op"] == "r"]
    assert sorted(keys) == list(range(1, 20001))          # every row, once


@pytest.mark.parametrize("mode", ["initial", "never"])
def test_an_online_schema_change_cut_over_reads_the_new_table_again(spark, own, tmp_path, mode):
    """gh-ost (and pt-online-schema-change) build the new table under a name not
    captured, copy the rows into it, then RENAME it to the captured name: its rows never
    went through the stream. The rename (here of two tables at once) queues a backfill of
    them, so the changelog's current state (and any mirror) equals each table after the
    cut-over, new column included; also for a pipeline that took no initial snapshot."""
    for t in ("t", "u"):
        own.sql(f"CREATE TABLE shop.{t} (id INT PRIMARY KEY, v INT)",
                f"INSERT INTO shop.{t} SELECT seq, seq FROM shop.seq_1_to_500")
    config = _config(tmp_path, own, ["shop.t", "shop.u"], 7961, mode=mode)
    _in_process(spark, config)
    for t in ("t", "u"):
        own.sql(f"CREATE TABLE shop._{t}_gho LIKE shop.{t}",
                f"ALTER TABLE shop._{t}_gho ADD COLUMN w INT NOT NULL DEFAULT 7",
                f"INSERT INTO shop._{t}_gho (id, v) SELECT id, v FROM shop.{t}",
                # the migration's writes, applied to the ghost table as gh-ost does
                f"UPDATE shop.{t} SET v = -v WHERE id <= 10",
                f"UPDATE shop._{t}_gho SET v = -v WHERE id <= 10",
                f"DELETE FROM shop.{t} WHERE id = 20", f"DELETE FROM shop._{t}_gho WHERE id = 20")
    own.sql("RENAME TABLE shop.t TO shop._t_del, shop._t_gho TO shop.t, "
            "shop.u TO shop._u_del, shop._u_gho TO shop.u",
            "DROP TABLE shop._t_del, shop._u_del",
            "INSERT INTO shop.t VALUES (1000, 1, 8)", "UPDATE shop.t SET w = 9 WHERE id = 1")
    _in_process(spark, config)
    changelog = str(tmp_path / "changelog")
    read_changelog(spark, changelog).createOrReplaceTempView("cutover")
    rows = [r.asDict() for r in read_changelog(spark, changelog).collect()]
    assert not [r for r in rows if r["table"].startswith("_")]
    for t in ("t", "u"):
        again = {json.loads(r["key"])["id"] for r in rows
                 if r["table"] == t and r["op"] == "r" and "w" in json.loads(r["after"])}
        assert again == {json.loads(a)["id"] for a in _source(own, "shop", t)}, t
        current = {json.dumps(json.loads(r["row"]), sort_keys=True)
                   for r in spark.sql(current_state_sql("cutover", "shop", t)).collect()}
        assert current == _source(own, "shop", t), t
