"""A new pipeline starts from the rows the tables hold: snapshot + stream equal the source,
value for value, for every kind of key (integer, composite, string, a unique key standing
in for a missing primary key, a user-named chunk key with NULLs, no key at all), while a
writer changes the very keys being read; and after SIGKILLs at random points."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pymysql
import pytest

from mysqlcdc.sinks.changelog import read_changelog

pytestmark = pytest.mark.e2e

TABLES = {
    "ints": "CREATE TABLE ints (id INT PRIMARY KEY, v INT)",
    "pairs": "CREATE TABLE pairs (a INT, b VARCHAR(8), v INT, PRIMARY KEY (a, b))",
    "names": "CREATE TABLE names (name VARCHAR(20) PRIMARY KEY, v INT)",
    "uniq": "CREATE TABLE uniq (u INT NOT NULL, v INT, UNIQUE KEY (u))",
    "grouped": "CREATE TABLE grouped (grp INT NULL, v INT, KEY (grp))",
    "nokey": "CREATE TABLE nokey (v INT, w INT)",
}
ROWS = 3000


def _fill(server, db: str) -> None:
    server.sql(*TABLES.values(),
               f"INSERT INTO ints SELECT seq, seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO pairs SELECT seq DIV 3, CONCAT('b', seq MOD 3), seq FROM seq_3_to_{ROWS + 2}",
               f"INSERT INTO names SELECT CONCAT('n', LPAD(seq, 6, '0')), seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO uniq SELECT seq, seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO grouped SELECT IF(seq % 7 = 0, NULL, seq % 50), seq FROM seq_1_to_{ROWS}",
               f"INSERT INTO nokey SELECT seq, seq FROM seq_1_to_{ROWS}", db=db)


def _config(tmp_path: Path, server, db: str, server_id: int, extra_sinks: str = "") -> Path:
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
  snapshot:
    chunk_rows: 400
    chunks_per_batch: 4
    chunk_keys: {{"{db}.grouped": [grp]}}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "100 milliseconds"
  conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}
sinks:
  - changelog: {{path: ./changelog}}{extra_sinks}
""")
    return path


def _start(config: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), "-v",
                             *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, cwd=config.parent)


def _log(config: Path) -> str:
    return (config.parent / "pipeline.log").read_text(errors="replace")[-6000:]


class Writer(threading.Thread):
    """Inserts, updates (also key changes) and deletes in every table, all over the key
    range, so it keeps hitting the chunks being read."""

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
                    ("UPDATE uniq SET v = v + 1 WHERE u = %s", (k,)),
                    ("UPDATE uniq SET u = %s WHERE u = %s", (fresh, rnd.randint(1, ROWS))),
                    ("DELETE FROM uniq WHERE u = %s", (rnd.randint(1, ROWS),)),
                    ("UPDATE grouped SET grp = IF(grp IS NULL, 3, NULL) WHERE v = %s", (k,)),
                    ("INSERT INTO grouped (grp, v) VALUES (NULL, %s)", (fresh,)),
                    ("DELETE FROM grouped WHERE v = %s", (rnd.randint(1, ROWS),)),
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


def _state(rows: list[dict]) -> dict:
    """The tables rebuilt from change records: the last change per key by seq."""
    last: dict = {}
    for r in sorted(rows, key=lambda r: int(r["seq"])):
        if r["op"] in ("s", "t"):
            continue
        key, after = r["key"], r["after"]            # text (changelog) or JSON (Kafka)
        key = key if isinstance(key, str) else json.dumps(key, sort_keys=True)
        after = after if not isinstance(after, str) else json.loads(after)
        last[(r["table"], key)] = None if r["op"] == "d" else dict(after)
    state: dict = {t: set() for t in TABLES}
    for (table, _key), image in last.items():
        if image is not None:
            image.pop("note", None)          # added mid-snapshot (see the writer test)
            state[table].add(json.dumps(image, sort_keys=True))
    return state


def _changes(spark, path: Path) -> list[dict]:
    cols = ("table", "op", "key", "after", "seq", "txn_id", "query")
    return [r.asDict() for r in read_changelog(spark, str(path)).select(*cols).collect()]


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


def _count(rows: list[dict]) -> dict:
    out: dict = defaultdict(int)
    for r in rows:
        out[r["op"]] += 1
    return out


def _wait_files(folder: Path, count: int, proc, config: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(config)
        found = len(list(folder.glob("[0-9]*"))) if folder.is_dir() else 0
        if found >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{folder} never held {count} files\n{_log(config)}")


def _wait_for_key(spark, tmp_path: Path, proc, config: Path, key: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, _log(config)
        try:
            if key in {r["key"] for r in read_changelog(spark, str(tmp_path / "changelog"))
                       .where("`table` = 'ints' AND op = 'c'").select("key").collect()}:
                return
        except Exception:                   # noqa: BLE001 - no batch committed yet
            pass
        time.sleep(1)
    raise AssertionError(f"{key} never arrived\n{_log(config)}")


def test_snapshot_and_stream_equal_the_source_under_a_writer(spark, mariadb, fresh_db, tmp_path):
    _fill(mariadb, fresh_db)
    config = _config(tmp_path, mariadb, fresh_db, 7901)
    writer = Writer(mariadb, fresh_db)
    writer.start()
    proc = _start(config)
    offsets = tmp_path / "checkpoint" / "0-changelog" / "offsets"
    try:
        # the snapshot's start S is fixed with the first offset; the writer goes on after it
        _wait_files(offsets, 2, proc, config, 180)
        time.sleep(2)                       # the snapshot runs on while the writer writes
        # A DDL while the snapshot runs: the schema history started at the snapshot's
        # start, so the stream takes it in stride (rows compared without the new column).
        mariadb.sql("ALTER TABLE names ADD COLUMN note VARCHAR(5) DEFAULT 'x'", db=fresh_db)
        time.sleep(3)
    finally:
        writer.stop_now.set()
        writer.join()
    mariadb.sql("INSERT INTO ints VALUES (-1, -1)", db=fresh_db)     # the last change
    _wait_for_key(spark, tmp_path, proc, config, '{"id":-1}', 240)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    assert writer.error is None, f"the writer stopped early: {writer.error!r}"
    assert writer.done > 200, "the writer hardly ran"
    rows = _changes(spark, tmp_path / "changelog")
    ops = _count(rows)
    assert ops["r"] > 4 * ROWS and ops["u"] > 0 and ops["d"] > 0, ops
    assert _state(rows) == _source(mariadb, fresh_db)
    # the initial snapshot's very last row says so (Debezium's snapshot=last)
    assert sum(r["query"] == "snapshot:last" for r in rows) <= 1
    assert {r["query"] for r in rows if r["op"] == "r" and r["table"] != "names"} <= {
        "snapshot", "snapshot:last", "snapshot:last_in_table"}
    # the ADD COLUMN ... DEFAULT gave every row of names a value no row event carries:
    # that table alone is read again (DESIGN.md decision 33, amended)
    assert {r["query"] for r in rows if r["op"] == "r" and r["table"] == "names"} <= {
        "snapshot", "snapshot:last", "snapshot:last_in_table", "backfill",
        "backfill:last_in_table"}


def _kafka_changes(kafka, prefix: str, db: str) -> list[dict]:
    from tests.support.kafka import read_topic

    out = []
    for table in TABLES:
        for msgs in read_topic(kafka.bootstrap, f"{prefix}.{db}.{table}").values():
            out.extend(json.loads(m.value()) for m in msgs if m.value() is not None)
    return out


def test_killed_snapshots_resume_with_every_row(spark, mariadb, kafka, fresh_db, tmp_path):
    """SIGKILL at random points of the snapshot (twice), then run to the end. The Parquet
    changelog (exactly once per batch) holds every row once; Kafka (at least once) may hold
    a row twice only from a chunk read again after the kill, with the same ``txn_id`` (the
    chunk): a consumer that skips an ``r`` row whose (txn_id, key) it has seen is exact."""
    _fill(mariadb, fresh_db)
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    sink = (f"\n  - kafka: {{bootstrap_servers: '{kafka.bootstrap}', format: mysqlcdc, "
            f"topic_prefix: 'kr{fresh_db}', partitions: 2}}")
    config = _config(tmp_path, mariadb, fresh_db, 7911, extra_sinks=sink)
    commits = tmp_path / "checkpoint" / "0-changelog" / "commits"
    done = 0
    for _ in range(2):
        proc = _start(config)
        done = _wait_files(commits, done + rnd.randint(1, 2), proc, config, 240)
        time.sleep(rnd.uniform(0.0, 1.5))         # somewhere inside a batch, or between two
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        done = len(list(commits.glob("[0-9]*")))
    mariadb.sql("UPDATE ints SET v = -v WHERE id <= 100", db=fresh_db)
    again = _start(config, "--until-idle")
    assert again.wait(timeout=400) == 0, _log(config)
    rows = _changes(spark, tmp_path / "changelog")
    ops = _count(rows)
    source = _source(mariadb, fresh_db)
    total = sum(len(v) for v in source.values())
    assert ops["r"] == total and ops["u"] == 100, (seed, dict(ops))   # every row once
    assert _state(rows) == source, seed
    published = _kafka_changes(kafka, f"kr{fresh_db}", fresh_db)
    chunks: dict = defaultdict(set)
    for m in published:
        if m["op"] == "r":
            chunks[(m["table"], json.dumps(m["key"], sort_keys=True))].add(m["txn_id"])
    assert len(chunks) == total, seed
    assert all(len(ids) == 1 for ids in chunks.values()), seed      # duplicates: same chunk
    seen, kept = set(), []
    for m in published:
        if m["op"] == "r":
            mark = (m["txn_id"], json.dumps(m["key"], sort_keys=True))
            if mark in seen:
                continue
            seen.add(mark)
        kept.append(m)
    assert _state(kept) == source, seed
