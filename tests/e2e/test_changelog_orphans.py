"""A Parquet changelog stays exact for plain readers: a killed batch's leftover files
(torn or 0 bytes) are reported by `mysqlcdc changelog check` and removed when the sink
starts, never a committed file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from mysqlcdc.sinks.changelog import ChangelogSettings, start_changelog
from mysqlcdc.sinks.changelog.files import UNFINISHED_SUFFIX, owner_tag
from mysqlcdc.sinks.changelog.maintenance import check_parquet, committed_files, orphan_files

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _run_once(spark, source_options, db, start, path, checkpoint):
    df = spark.readStream.format("mysqlcdc").options(
        **source_options(startingPosition=start, include=f"{db}.*")).load()
    query = start_changelog(df, ChangelogSettings(path=path), checkpoint=checkpoint,
                            trigger_interval="200 milliseconds")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def _plain(path: str) -> list[tuple]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["seq"])
    return sorted(int(s) for s in table.column("seq").to_pylist())


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_orphans_reported_then_removed_on_start(spark, mariadb, fresh_db, source_options,
                                                tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)",
                *[f"INSERT INTO `{fresh_db}`.t VALUES ({i})" for i in range(1, 21)])
    path, checkpoint = str(tmp_path / "changelog"), str(tmp_path / "ck")
    _run_once(spark, source_options, fresh_db, start, path, checkpoint)
    spark_seqs = sorted(int(r["seq"]) for r in spark.read.parquet(path).select("seq").collect())
    assert _plain(path) == spark_seqs

    # What a batch killed before its log entry leaves: a whole part file nobody listed
    # and a 0-byte one.
    committed = sorted(committed_files(Path(path)))
    partition = committed[0].parent
    shutil.copy(committed[0], partition / "part-00000-killed-batch.c000.snappy.parquet")
    (partition / "part-00001-killed-batch.c000.snappy.parquet").write_bytes(b"")
    # and what tasks killed while writing leave: hidden, this sink's and another writer's
    unfinished = ".part-00002-0000000009-abc-0000.c000.snappy.parquet.{}" + UNFINISHED_SUFFIX
    mine = partition / unfinished.format(owner_tag("mysqlcdc", 0))
    theirs = partition / unfinished.format(owner_tag("other-pipeline", 0))
    mine.write_bytes(b"PAR1")
    theirs.write_bytes(b"PAR1")
    report = check_parquet(path)
    assert (report.orphan_files, report.empty_orphans) == (2, 1)
    assert report.committed_rows == len(spark_seqs) and report.plain_reader_rows is None
    with pytest.raises(Exception, match="0 bytes|size is 0"):
        _plain(path)

    config = tmp_path / "pipeline.yaml"
    config.write_text(f"""
name: orphans
source: {{host: {mariadb.host}, port: {mariadb.port}, user: {mariadb.user}, server_id: 4343}}
spark: {{checkpoint: ./ck}}
sinks:
  - changelog: {{path: ./changelog}}
""")
    checked = _cli("changelog", "check", str(config))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "2 orphan file(s)" in checked.stdout and "fails (a 0-byte file)" in checked.stdout
    assert "2 hidden unfinished file(s)" in checked.stdout, checked.stdout

    # The restarted sink removes exactly the two leftovers; committed files stay.
    mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES (21)")
    _run_once(spark, source_options, fresh_db, start, path, checkpoint)
    assert set(committed) <= committed_files(Path(path))
    assert all(f.is_file() for f in committed)
    assert not mine.exists() and theirs.exists()       # its own leftovers only
    spark_seqs = sorted(int(r["seq"]) for r in spark.read.parquet(path).select("seq").collect())
    assert _plain(path) == spark_seqs and len(spark_seqs) == len(set(spark_seqs))
    checked = _cli("changelog", "check", str(config))
    assert checked.returncode == 0 and "no orphans" in checked.stdout, checked.stdout
    assert "1 hidden unfinished file(s)" in checked.stdout, checked.stdout   # the other's


def test_vacuum_while_running_spares_files_newer_than_the_log(spark, mariadb, fresh_db,
                                                              source_options, tmp_path):
    start = str(binlog_position(mariadb))
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)",
                f"INSERT INTO `{fresh_db}`.t VALUES (1)")
    path, checkpoint = str(tmp_path / "changelog"), str(tmp_path / "ck")
    _run_once(spark, source_options, fresh_db, start, path, checkpoint)
    committed = sorted(committed_files(Path(path)))
    old = committed[0].parent / "part-00000-old-orphan.c000.snappy.parquet"
    shutil.copy(committed[0], old)
    os.utime(old, (1_000_000_000, 1_000_000_000))          # older than every log entry
    fresh = committed[0].parent / "part-00000-in-flight.c000.snappy.parquet"
    shutil.copy(committed[0], fresh)                         # as a batch being written now
    unfinished = ".part-00001-0000000007-abc-0000.c000.snappy.parquet.{}" + UNFINISHED_SUFFIX
    old_unfinished = committed[0].parent / unfinished.format("killed")
    old_unfinished.write_bytes(b"PAR1")
    os.utime(old_unfinished, (1_000_000_000, 1_000_000_000))
    writing = committed[0].parent / unfinished.format("writing")
    writing.write_bytes(b"PAR1")                             # a task writing right now
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"""
name: vacuum
source: {{host: {mariadb.host}, port: {mariadb.port}, user: {mariadb.user}, server_id: 4344}}
spark: {{checkpoint: ./ck}}
sinks:
  - changelog: {{path: ./changelog}}
""")
    done = _cli("changelog", "vacuum", str(config))
    assert done.returncode == 0 and "removed 1 file(s)" in done.stdout, done.stdout + done.stderr
    assert "and 1 unfinished file(s) of killed tasks" in " ".join(done.stdout.split())
    assert not old.exists() and fresh.exists() and all(f.is_file() for f in committed)
    assert not old_unfinished.exists() and writing.exists()


def test_parquet_retention_drops_old_files_for_spark_and_plain_readers(spark, mariadb, fresh_db,
                                                                       source_options, tmp_path):
    """`retention` on a Parquet changelog: Spark's log compactions leave out files older
    than the window and the running sink deletes them, so a plain reader and Spark agree;
    what stays is always the newest changes (never a newer one dropped before an older)."""
    start = str(binlog_position(mariadb))
    table = f"`{fresh_db}`.t"
    mariadb.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY)",
                *[f"INSERT INTO {table} VALUES ({i})" for i in range(1, 11)])
    path, checkpoint = str(tmp_path / "changelog"), str(tmp_path / "ck")
    conf = "spark.sql.streaming.fileSink.log.compactInterval"
    before = spark.conf.get(conf, None)
    spark.conf.set(conf, "3")                 # compactions at batches 2, 5, 8 (default 10)
    try:
        df = spark.readStream.format("mysqlcdc").options(
            **source_options(startingPosition=start, include=f"{fresh_db}.*")).load()
        query = start_changelog(df, ChangelogSettings(path=path, retention_s=4.0),
                                checkpoint=checkpoint, trigger_interval="100 milliseconds")
    finally:
        spark.conf.unset(conf) if before is None else spark.conf.set(conf, before)
    try:
        query.processAllAvailable()                         # batch 0: the CREATE and ids 1-10
        old_files = sorted(committed_files(Path(path)))
        time.sleep(5)                                       # now older than the window
        for i in range(101, 109):                           # batches 1-8, one row each
            mariadb.sql(f"INSERT INTO {table} VALUES ({i})")
            query.processAllAvailable()
        # The listener runs on its own bus: wait until it has deleted what the compactions
        # expired, batch 0's files and, on a slow machine, the next batches' too
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (any(f.exists() for f in old_files)
                                               or orphan_files(Path(path))):
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert old_files and not any(f.exists() for f in old_files), "expired files not deleted"
    ids = sorted(json.loads(r["key"])["id"] for r in spark.read.parquet(path)
                 .where("op = 'c'").select("key").collect())
    assert ids and not set(ids) & set(range(1, 11)), ids
    assert ids == list(range(ids[0], 109)), f"a newer change went before an older one: {ids}"
    spark_seqs = sorted(int(r["seq"]) for r in spark.read.parquet(path).select("seq").collect())
    assert _plain(path) == spark_seqs
