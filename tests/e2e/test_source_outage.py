"""The source goes away under a running pipeline: restarts, killed connections, long
outages, a reset or replaced server, a changed password. A private mariadbd of its own
(the session server must stay up for the other tests); `mysqlcdc run` as a user runs it."""

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

from mysqlcdc.sinks.changelog import read_changelog

from tests.support.mariadb import MariaDB, binlog_position

pytestmark = pytest.mark.e2e


@pytest.fixture
def own(tmp_path):
    server = MariaDB(basedir=tmp_path / "server").start()
    server.keep = False      # the datadir goes with the test
    server.sql("CREATE DATABASE shop", "CREATE TABLE shop.item (id INT PRIMARY KEY, n INT)")
    yield server
    server.stop()


def _config(tmp_path: Path, server: MariaDB, start: str, *, server_id: int,
            max_wait_s: float = 600, user: str | None = None,
            password_env: str | None = None) -> Path:
    path = tmp_path / "pipeline.yaml"
    pw = f"\n  password_env: {password_env}" if password_env else ""
    path.write_text(f"""
name: outage-test
source:
  host: {server.host}
  port: {server.port}
  user: {user or server.user}{pw}
  server_id: {server_id}
  start: "{start}"
  tables:
    include: ["shop.*"]
  max_events_per_batch: 2000
  reconnect: {{max_wait_s: {max_wait_s}, initial_delay_s: 0.2, max_delay_s: 2}}
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "200 milliseconds"
  conf:
    spark.sql.shuffle.partitions: "2"
sinks:
  - changelog:
      path: ./changelog
""")
    return path


def _start(config: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "COLUMNS": "200", **(env or {})}
    out = open(config.parent / "pipeline.out", "ab")
    err = open(config.parent / "pipeline.err", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config), *args],
                            stdout=out, stderr=err, env=env, start_new_session=True)


def _err(config: Path) -> str:
    return (config.parent / "pipeline.err").read_text(errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Writer(threading.Thread):
    """Inserts rows one transaction each, riding through the outages itself; which rows
    really exist is read back from the table at the end (a commit cut by the shutdown
    may or may not have happened)."""

    def __init__(self, server: MariaDB, first: int = 1) -> None:
        super().__init__(daemon=True)
        self.server, self.next, self.stop_now = server, first, threading.Event()

    def run(self) -> None:
        conn = None
        while not self.stop_now.is_set():
            try:
                if conn is None:
                    conn = self.server.connect(database="shop", connect_timeout=2)
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO item VALUES (%s, %s)", (self.next, self.next % 7))
                self.next += 1
            except pymysql.err.IntegrityError:
                self.next += 1            # committed before the connection dropped
            except (pymysql.err.Error, OSError):
                conn = None
                time.sleep(0.2)
            time.sleep(0.005)

    def finish(self) -> None:
        self.stop_now.set()
        self.join(timeout=30)


def _source_ids(server: MariaDB) -> list[int]:
    return [r[0] for r in server.sql("SELECT id FROM shop.item ORDER BY id")]


def _captured(spark, tmp_path: Path) -> list[int]:
    from pyspark.errors import AnalysisException

    try:
        rows = read_changelog(spark, str(tmp_path / "changelog")).where("op = 'c'").select("key")
        return sorted(json.loads(r["key"])["id"] for r in rows.collect())
    except AnalysisException:
        return []            # no batch written yet


def _wait_for(predicate, timeout: float, proc: subprocess.Popen, config: Path, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the pipeline exited while waiting for {what}:\n" + \
            _err(config)[-3000:]
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}:\n{_err(config)[-3000:]}")


def _reconnects(tmp_path: Path) -> int:
    """Outages survived, as the planner and the read tasks report them for `mysqlcdc run`."""
    from mysqlcdc.pipeline.runner import source_status

    status = source_status([tmp_path / "checkpoint" / "0-changelog" / "mysqlcdc-schema"])
    return 0 if status is None else status["reconnects"]


def _committed(tmp_path: Path) -> int:
    commits = tmp_path / "checkpoint" / "0-changelog" / "commits"
    return len(list(commits.glob("[0-9]*"))) if commits.is_dir() else 0


def test_restarts_and_a_killed_stream_never_stop_the_pipeline(spark, own, tmp_path):
    config = _config(tmp_path, own, str(binlog_position(own)), server_id=7801)
    proc = _start(config)
    writer = Writer(own)
    writer.start()
    try:
        _wait_for(lambda: _committed(tmp_path) >= 3, 120, proc, config, "the first batches")
        # A burst, so a batch is being read when the server goes: 3 s down.
        own.sql("INSERT INTO shop.item SELECT seq + 1000000, 1 FROM shop.seq_1_to_20000")
        own.restart(down_s=3)
        # The replication connection killed from the server side.
        _wait_for(lambda: _committed(tmp_path) >= 8, 120, proc, config, "batches after a restart")
        # Every connection of the pipeline (and the writer's) killed from the server side,
        # again and again for 5 s while a burst is read: the planner's SQL connection, the
        # replication streams. (A read task mid-range is hit rarely — ranges are read in a
        # fraction of a second; the stream's own test kills one mid-read.)
        own.sql("INSERT INTO shop.item SELECT seq + 3000000, 3 FROM shop.seq_1_to_50000")
        killed, until = 0, time.monotonic() + 5
        while time.monotonic() < until:
            conn = own.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT id FROM information_schema.processlist "
                                "WHERE id <> CONNECTION_ID() AND user = %s", (own.user,))
                    for (thread,) in cur.fetchall():
                        try:
                            cur.execute(f"KILL {thread}")
                            killed += 1
                        except pymysql.err.OperationalError:
                            pass          # it ended on its own meanwhile
            finally:
                conn.close()
            time.sleep(0.05)
        assert killed >= 3
        before = _committed(tmp_path)
        _wait_for(lambda: _committed(tmp_path) >= before + 3, 120, proc, config,
                  "batches after the KILLs")
        # A long outage: 60 s down, within the default ten-minute budget.
        own.sql("INSERT INTO shop.item SELECT seq + 2000000, 2 FROM shop.seq_1_to_20000")
        own.restart(down_s=60)
        time.sleep(5)
    finally:
        writer.finish()
    own.sql("INSERT INTO shop.item VALUES (9999999, 0)")        # the last change
    _wait_for(lambda: 9999999 in _captured(spark, tmp_path), 240, proc, config, "the last row")
    assert proc.poll() is None                                   # the same process, still running
    _stop(proc)
    captured, source = _captured(spark, tmp_path), _source_ids(own)
    assert len(captured) == len(set(captured)), "a change was written twice"
    assert captured == source                                    # none lost, none repeated
    err = _err(config)
    assert "unreachable since" in err and "is back after" in err
    assert "Traceback" not in err
    # what the progress line reports: at least one outage was met by a connection (on a
    # loaded machine the short restart may fall between two of the pipeline's reads)
    assert _reconnects(tmp_path) >= 1


def test_an_outage_longer_than_max_wait_is_one_line_and_resumes(spark, own, tmp_path):
    config = _config(tmp_path, own, str(binlog_position(own)), server_id=7811, max_wait_s=6)
    own.sql(*[f"INSERT INTO shop.item VALUES ({i}, 0)" for i in range(1, 51)])
    proc = _start(config)
    _wait_for(lambda: len(_captured(spark, tmp_path)) == 50, 120, proc, config, "50 rows")
    own.shutdown()
    try:
        assert proc.wait(timeout=120) == 2
    finally:
        own.resume()
    err = _err(config)
    assert "[SERVER_UNREACHABLE]" in err and "unreachable for" in err
    assert "the checkpoint is at " in err and "run again to resume" in err
    assert "Traceback" not in err and "SQLSTATE" not in err
    # The next run resumes exactly where the checkpoint stands, and, started while the
    # server is still down, waits for it as a running one does (its checks included).
    own.sql(*[f"INSERT INTO shop.item VALUES ({i}, 0)" for i in range(51, 81)])
    own.shutdown()
    seen = len(_err(config))
    again = _start(config, "--until-idle")
    try:
        time.sleep(3)
        assert again.poll() is None, _err(config)[seen:]
    finally:
        own.resume()
    assert again.wait(timeout=180) == 0, _err(config)[-3000:]
    assert "unreachable since" in _err(config)[seen:]
    assert _captured(spark, tmp_path) == list(range(1, 81))


def test_a_reset_or_replaced_server_is_named_not_skipped(spark, own, tmp_path):
    config = _config(tmp_path, own, str(binlog_position(own)), server_id=7821)
    own.sql(*[f"INSERT INTO shop.item VALUES ({i}, 0)" for i in range(1, 21)])
    assert _start(config, "--until-idle").wait(timeout=180) == 0, _err(config)[-3000:]
    assert _captured(spark, tmp_path) == list(range(1, 21))

    # RESET MASTER: the binlog starts again at file 1; the pipeline's position is gone.
    own.sql("RESET MASTER", "INSERT INTO shop.item VALUES (21, 0)")
    proc = _start(config, "--until-idle")
    assert proc.wait(timeout=180) == 2
    err = _err(config)
    assert "[SOURCE_CHANGED]" in err and "Traceback" not in err

    # Another datadir answering on the same port.
    own.shutdown()
    other = MariaDB(basedir=tmp_path / "other")
    other.basedir.mkdir()
    other.keep = True
    other._install(other.datadir)
    other.port = own.port
    other._spawn(60)
    try:
        other.sql("CREATE DATABASE shop", "CREATE TABLE shop.item (id INT PRIMARY KEY, n INT)",
                  *[f"INSERT INTO shop.item VALUES ({i}, 1)" for i in range(1, 400)])
        (tmp_path / "pipeline.err").write_text("")
        proc = _start(config, "--until-idle")
        assert proc.wait(timeout=180) == 2
        err = _err(config)
        assert "[SOURCE_CHANGED]" in err and "Traceback" not in err
    finally:
        other.stop()
        import shutil

        shutil.rmtree(tmp_path / "other", ignore_errors=True)
        own.resume()


def test_a_changed_password_stops_at_once_not_after_max_wait(spark, own, tmp_path):
    own.sql("CREATE USER cdc@'%' IDENTIFIED BY 'first'",
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO cdc@'%'")
    config = _config(tmp_path, own, str(binlog_position(own)), server_id=7831, user="cdc",
                     password_env="OUTAGE_TEST_PASSWORD")
    proc = _start(config, env={"OUTAGE_TEST_PASSWORD": "first"})
    own.sql(*[f"INSERT INTO shop.item VALUES ({i}, 0)" for i in range(1, 11)])
    _wait_for(lambda: len(_captured(spark, tmp_path)) == 10, 120, proc, config, "10 rows")
    own.sql("ALTER USER cdc@'%' IDENTIFIED BY 'second'")
    began = time.monotonic()
    own.restart(down_s=1)
    try:
        code = proc.wait(timeout=120)              # max_wait is 600 s: this must be terminal
    finally:
        _stop(proc)
    assert code == 2 and time.monotonic() - began < 110
    err = _err(config)
    assert "[AUTHENTICATION_FAILED]" in err and "Traceback" not in err
