"""SIGKILL the running pipeline several times mid-stream: every change lands exactly once."""

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

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from mysqlcdc.sinks.changelog import read_changelog

from tests.support.mariadb import binlog_position
from tests.support.processes import descendants

pytestmark = pytest.mark.e2e

TOTAL_TXNS = 900


def _write_config(tmp_path: Path, mariadb, db: str, start: str,
                  formats: tuple[str, ...] = ("parquet",)) -> Path:
    sinks = "\n".join(f"  - changelog:\n      path: ./changelog-{fmt}\n      format: {fmt}"
                      for fmt in formats)
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: crash-test
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 4242
  start: "{start}"
  tables:
    include: ["{db}.*"]
  max_events_per_batch: 300
spark:
  master: "local[2]"
  checkpoint: ./checkpoint
  trigger_interval: "200 milliseconds"
  conf:
    spark.sql.shuffle.partitions: "2"
sinks:
{sinks}
""")
    return path


def _start(config: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(config.parent / "pipeline.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config),
                             "--verbose", *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _committed_batches(checkpoint: Path, index: int = 0) -> int:
    commits = checkpoint / f"{index}-changelog" / "commits"
    return len(list(commits.glob("[0-9]*"))) if commits.is_dir() else 0


def _writer(mariadb, db: str, done: threading.Event) -> None:
    conn = mariadb.connect(database=db, autocommit=False)
    rnd = random.Random(3)
    with conn.cursor() as cur:
        for i in range(1, TOTAL_TXNS + 1):
            cur.execute("INSERT INTO item VALUES (%s, %s)", (i, "x" * rnd.randint(1, 200)))
            if i % 3 == 0:
                cur.execute("UPDATE item SET body = 'updated' WHERE id = %s", (i - 1,))
            conn.commit()
            time.sleep(0.02)
    conn.close()
    done.set()


# Both changelog formats in one pipeline: each sink is its own query (DESIGN decision 17),
# so a kill lands somewhere else in each one's batch, and the test pays for one set of starts.
def test_sigkill_restart_exactly_once(spark, mariadb, fresh_db, tmp_path):
    formats = ("parquet", "delta")
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.item (id INT PRIMARY KEY, body VARCHAR(255))")
    start = str(binlog_position(mariadb))
    config = _write_config(tmp_path, mariadb, fresh_db, start, formats)
    done = threading.Event()
    writer = threading.Thread(target=_writer, args=(mariadb, fresh_db, done), daemon=True)
    writer.start()
    rnd = random.Random(11)
    kills = 0
    for kill in range(3):
        proc = _start(config)
        watched = kill % len(formats)
        seen = _committed_batches(tmp_path / "checkpoint", watched)
        deadline = time.monotonic() + 120
        while (_committed_batches(tmp_path / "checkpoint", watched) <= seen
               and time.monotonic() < deadline):
            assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(rnd.uniform(0.0, 1.5))        # somewhere inside a later batch
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    writer.join(timeout=300)
    assert done.is_set()
    final = _start(config, "--until-idle")
    assert final.wait(timeout=300) == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    assert kills == 3
    for fmt in formats:
        _assert_exactly_once(spark, str(tmp_path / f"changelog-{fmt}"), fmt)


def _assert_exactly_once(spark, path: str, fmt: str) -> None:
    rows = read_changelog(spark, path, fmt).collect()
    changes = sorted((json.loads(r["key"])["id"], r["op"], r["seq"]) for r in rows)
    # Every other reader sees exactly what Spark sees: the Delta readers always, a plain
    # Parquet reader of the folder once the restarted sink removed the killed batches' files.
    plain = {"pyarrow.dataset": _keys(ds.dataset(path, format="parquet", partitioning="hive")
                                      .to_table(columns=["key", "op", "seq"]).to_pylist())}
    if fmt == "delta":
        plain = {"deltalake": _keys(DeltaTable(path).to_pyarrow_table().to_pylist()),
                 "polars": _keys(pl.read_delta(path).to_dicts())}
        dataset = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 - read by DuckDB by name
        plain["duckdb"] = sorted((json.loads(k)["id"], o, int(s)) for k, o, s in
                                 duckdb.sql("SELECT key, op, seq FROM dataset").fetchall())
    for reader, seen in plain.items():
        assert seen == sorted((c[0], c[1], int(c[2])) for c in changes), (fmt, reader)
    inserts = [c for c in changes if c[1] == "c"]
    updates = [c for c in changes if c[1] == "u"]
    assert [c[0] for c in inserts] == list(range(1, TOTAL_TXNS + 1)), fmt
    assert len(updates) == TOTAL_TXNS // 3, fmt
    assert len({c[2] for c in changes}) == len(changes), f"{fmt}: a change appears twice"


def _keys(rows: list[dict]) -> list[tuple]:
    return sorted((json.loads(r["key"])["id"], r["op"], int(r["seq"])) for r in rows)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _two_rows_and_a_run(mariadb, db: str, tmp_path: Path) -> tuple[Path, subprocess.Popen]:
    """A table with two rows written after the pipeline's start position, and a run of
    the pipeline started (without --until-idle)."""
    start = str(binlog_position(mariadb))
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)", db=db)
    config = _write_config(tmp_path, mariadb, db, start)
    return config, _start(config)


def test_sigterm_stops_the_pipeline_and_every_process_it_started(mariadb, fresh_db, tmp_path):
    """What a service manager sends: the CLI stops its queries as for Ctrl-C, and the JVM
    and every Python runner under it end too (none is left behind, reparented)."""
    config, proc = _two_rows_and_a_run(mariadb, fresh_db, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while _committed_batches(tmp_path / "checkpoint") == 0:
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "pipeline.log").read_text()[-3000:]
            time.sleep(0.5)
        family = descendants(proc.pid)
        assert family, "the CLI started no JVM"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, (tmp_path / "pipeline.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while (alive := {p for p in family if _running(p)}) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive, {p: Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in alive}
    log = (tmp_path / "pipeline.log").read_text()
    assert "stopped" in log and "Traceback" not in log and "Error" not in log, log[-3000:]


def _java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_sigterm_to_every_process_while_spark_starts_is_a_stop(mariadb, fresh_db, tmp_path):
    """What a service manager sends to a whole control group (or a container's stop): the
    same SIGTERM to the CLI and the JVM it is starting. The run says it stopped (it died
    of the signal, silently, when the handler came only after Spark's start), and the
    next run captures every change."""
    config, proc = _two_rows_and_a_run(mariadb, fresh_db, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not any(_java(p) for p in descendants(proc.pid)):   # Spark is starting
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "pipeline.log").read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, (tmp_path / "pipeline.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "pipeline.log").read_text()
    assert "stopped" in log and "Traceback" not in log and "Error" not in log, log[-3000:]
    again = _start(config, "--until-idle")
    assert again.wait(timeout=300) == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    rows = ds.dataset(str(tmp_path / "changelog-parquet"), format="parquet",
                      partitioning="hive").to_table().to_pylist()
    assert sorted(json.loads(r["key"])["id"] for r in rows if r["op"] == "c") == [1, 2]


def test_a_run_that_died_writing_its_offset_log_starts_again(spark, mariadb, fresh_db, tmp_path):
    """A full disk (or a kill) between Spark's write of an offset file and its rename
    leaves ``.0.<uuid>.tmp`` in the offset log, and Spark then refuses the checkpoint for
    good (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). The next run clears what the dead
    write left and captures every change."""
    db = fresh_db
    start = str(binlog_position(mariadb))
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2), (3)",
                db=db)
    config = _write_config(tmp_path, mariadb, db, start)
    offsets = tmp_path / "checkpoint" / "0-changelog" / "offsets"
    offsets.mkdir(parents=True)
    left = "0.6b0c4a1e-5d0e-4f3c-9a56-2f1f4c7e8d90.tmp"
    (offsets / f".{left}").write_bytes(b"")            # what the died write left, byte for byte
    (offsets / f"..{left}.crc").write_bytes(b"")
    proc = _start(config, "--until-idle")
    assert proc.wait(timeout=300) == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    rows = read_changelog(spark, str(tmp_path / "changelog-parquet")).collect()
    assert sorted(json.loads(r["key"])["id"] for r in rows if r["op"] == "c") == [1, 2, 3]
    assert not [p.name for p in offsets.iterdir() if p.name.endswith(".tmp")]
