"""A new pipeline starts from the rows the tables hold: snapshot + stream equal the source,
while a writer changes the very keys being read, and after a SIGKILL mid-snapshot."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql
import pytest

from mysqlcdc.sinks.changelog import read_changelog

pytestmark = pytest.mark.e2e

TABLES = {
    "ints": "CREATE TABLE ints (id INT PRIMARY KEY, v INT)",
    "pairs": "CREATE TABLE pairs (a INT, b VARCHAR(8), v INT, PRIMARY KEY (a, b))",
    "names": "CREATE TABLE names (name VARCHAR(20) PRIMARY KEY, v INT)",
    "nokey": "CREATE TABLE nokey (v INT, w INT)",
}
ROWS = 6000


def _fill(server, db: str) -> None:
    server.sql(*TABLES.values(),
               f"INSERT INTO ints SELECT seq, seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO pairs SELECT seq DIV 3, CONCAT('b', seq MOD 3), seq FROM seq_3_to_{ROWS + 2}",
               f"INSERT INTO names SELECT CONCAT('n', LPAD(seq, 6, '0')), seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO nokey SELECT seq, seq FROM seq_1_to_{ROWS}", db=db)


def _config(tmp_path: Path, server, db: str, server_id: int) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: snapshot-test
source:
  host: {server.host}
  port: {server.port}
  user: {server.user}
  server_id: {server_id}
  tables: {{include: ["{db}.*"]}}
  parallelism: 2
  snapshot: {{chunk_rows: 700}}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "100 milliseconds"
  conf: {{spark.sql.shuffle.partitions: "2"}}
sinks:
  - changelog: {{path: ./changelog}}
""")
    return path


def _start(config: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _log(config: Path) -> str:
    return (config.parent / "pipeline.log").read_text(errors="replace")[-4000:]


class Writer(threading.Thread):
    """Inserts, updates (also primary-key changes) and deletes in every table, all
    over the key range, so it keeps hitting the chunks being read."""

    def __init__(self, server, db: str) -> None:
        super().__init__(daemon=True)
        self.server, self.db, self.stop_now, self.done = server, db, threading.Event(), 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._write()
        except BaseException as exc:    # noqa: BLE001 - reported by the test, never lost
            self.error = exc

    def _write(self) -> None:
        rnd = random.Random(7)
        conn = self.server.connect(database=self.db)
        fresh = 10 ** 6
        with conn.cursor() as cur:
            while not self.stop_now.is_set():
                k = rnd.randint(1, ROWS)
                fresh += 1
                statements = [
                    ("UPDATE ints SET v = v + 1000000 WHERE id = %s", (k,)),
                    ("DELETE FROM ints WHERE id = %s", (rnd.randint(1, ROWS),)),
                    ("INSERT INTO ints (id, v) VALUES (%s, 1)", (fresh,)),
                    ("UPDATE ints SET id = %s WHERE id = %s", (fresh + 10 ** 6, k)),
                    ("UPDATE pairs SET v = v + 1 WHERE a = %s", (k // 3,)),
                    ("DELETE FROM pairs WHERE a = %s AND b = 'b1'", (rnd.randint(1, ROWS // 3),)),
                    ("UPDATE names SET v = -v WHERE name = %s", (f"n{k:06d}",)),
                    ("INSERT INTO names (name, v) VALUES (%s, 7)", (f"m{fresh}",)),
                    ("UPDATE nokey SET w = w + 1 WHERE v = %s", (k,)),
                    ("DELETE FROM nokey WHERE v = %s", (rnd.randint(1, ROWS),)),
                ]
                sql, args = rnd.choice(statements)
                try:
                    cur.execute(sql, args)
                    self.done += 1
                except pymysql.err.IntegrityError:
                    pass
                time.sleep(0.002)
        conn.close()


def _state(spark, path: Path) -> dict:
    """The tables rebuilt from the changelog: the last change per key by seq."""
    rows = read_changelog(spark, str(path)).select("table", "op", "key", "after", "seq").collect()
    last: dict = {}
    for r in sorted(rows, key=lambda r: r["seq"]):
        if r["op"] in ("s", "t"):
            continue
        last[(r["table"], r["key"])] = None if r["op"] == "d" else json.loads(r["after"])
    state: dict = {t: set() for t in TABLES}
    for (table, _key), image in last.items():
        if image is not None:
            image.pop("note", None)          # added mid-snapshot (see the writer test)
            state[table].add(json.dumps(image, sort_keys=True))
    return state


def _source(server, db: str) -> dict:
    state = {}
    for table in TABLES:
        conn = server.connect(database=db, cursorclass=pymysql.cursors.DictCursor)
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            state[table] = {json.dumps({k: v for k, v in row.items() if k != "note"},
                                       sort_keys=True) for row in cur.fetchall()}
        conn.close()
    return state


def _ops(spark, path: Path) -> dict:
    rows = read_changelog(spark, str(path)).groupBy("op").count().collect()
    return {r["op"]: r["count"] for r in rows}


def test_snapshot_and_stream_equal_the_source_under_a_writer(spark, mariadb, fresh_db, tmp_path):
    _fill(mariadb, fresh_db)
    config = _config(tmp_path, mariadb, fresh_db, 7901)
    writer = Writer(mariadb, fresh_db)
    writer.start()
    proc = _start(config)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (tmp_path / "changelog" / "_spark_metadata").is_dir():
            assert proc.poll() is None, _log(config)
            time.sleep(0.2)
        time.sleep(4)                       # the snapshot runs on while the writer writes
        # A DDL while the snapshot runs: the schema history started at the snapshot's
        # start, so the stream takes it in stride (rows compared without the new column).
        mariadb.sql("ALTER TABLE names ADD COLUMN note VARCHAR(5) DEFAULT 'x'", db=fresh_db)
        time.sleep(4)
    finally:
        writer.stop_now.set()
        writer.join()
    mariadb.sql("INSERT INTO ints VALUES (-1, -1)", db=fresh_db)     # the last change
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(config)
        try:
            if '{"id":-1}' in {r["key"] for r in read_changelog(spark, str(tmp_path / "changelog"))
                               .where("`table` = 'ints' AND op = 'c'").select("key").collect()}:
                break
        except Exception:                   # noqa: BLE001 - no batch committed yet
            pass
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    assert writer.error is None, f"the writer stopped early: {writer.error!r}"
    assert writer.done > 200, "the writer hardly ran"
    ops = _ops(spark, tmp_path / "changelog")
    assert ops.get("r", 0) > 3 * ROWS and ops.get("u", 0) > 0 and ops.get("d", 0) > 0
    assert _state(spark, tmp_path / "changelog") == _source(mariadb, fresh_db)


def test_a_killed_snapshot_resumes_from_its_unfinished_chunks(spark, mariadb, fresh_db, tmp_path):
    _fill(mariadb, fresh_db)
    config = _config(tmp_path, mariadb, fresh_db, 7911)
    commits = tmp_path / "checkpoint" / "0-changelog" / "commits"
    proc = _start(config)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(list(commits.glob("[0-9]*"))) < 4:
        assert proc.poll() is None, _log(config)
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)             # somewhere inside the snapshot
    proc.wait()
    done_before = len(list(commits.glob("[0-9]*")))
    mariadb.sql("UPDATE ints SET v = -v WHERE id <= 100", db=fresh_db)
    again = _start(config, "--until-idle")
    assert again.wait(timeout=300) == 0, _log(config)
    ops = _ops(spark, tmp_path / "changelog")
    # Every row once (the committed chunks are not read again) plus the 100 updates.
    assert ops.get("r") == 4 * ROWS, ops
    assert ops.get("u") == 100
    assert done_before >= 4
    assert _state(spark, tmp_path / "changelog") == _source(mariadb, fresh_db)
