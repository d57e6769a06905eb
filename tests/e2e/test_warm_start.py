"""Whole `mysqlcdc run` processes and the start-up cache: the first run has its JVM write a
class-data archive, the next runs start from it, a damaged one is never handed to a JVM,
and the Python workers import the installed pyspark rather than its zip."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.support.mariadb import binlog_position
from tests.support.processes import descendants

pytestmark = pytest.mark.e2e


def _config(tmp_path: Path, mariadb, db: str, start: str, run: int) -> Path:
    path = tmp_path / f"run{run}.yaml"
    path.write_text(f"""
name: warm-{run}
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: {4300 + run}
  start: "{start}"
  snapshot: {{mode: never}}
  tables:
    include: ["{db}.*"]
spark:
  master: "local[2]"
  checkpoint: ./checkpoint{run}
  trigger_interval: "0 seconds"
  conf:
    spark.sql.shuffle.partitions: "2"
sinks:
  - changelog:
      path: ./changelog{run}
""")
    return path


def _run(config: Path, cache: Path) -> dict:
    """Run to idle; what the JVM's command line and the Python workers' path held."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "MYSQLCDC_CACHE_DIR": str(cache)}
    env.pop("SPARK_HOME", None)
    log = open(config.parent / f"{config.stem}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config),
                             "--until-idle"], cwd=config.parent, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    seen = {"java": [], "worker_paths": []}
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the run did not end"
        for pid in descendants(proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv]
            if words and words[0].endswith("java") and words not in seen["java"]:
                seen["java"].append(words)
            if any(w.startswith("pyspark.") for w in words):      # python -m pyspark.daemon ...
                path = [e.decode()[len("PYTHONPATH="):] for e in environ
                        if e.startswith(b"PYTHONPATH=")]
                seen["worker_paths"].extend(path)
        time.sleep(0.1)
    assert proc.returncode == 0, (config.parent / f"{config.stem}.log").read_text()[-3000:]
    return seen


def _rows(folder: Path) -> int:
    """Row changes (not the table's DDL) in the changelog."""
    table = ds.dataset(str(folder), format="parquet", partitioning="hive").to_table()
    return sum(op in ("c", "u", "d") for op in table.column("op").to_pylist())


def _flag(seen: dict, prefix: str) -> list[str]:
    return [w for argv in seen["java"] for w in argv if w.startswith(prefix)]


def test_runs_start_from_a_checked_class_archive_and_workers_skip_the_zip(mariadb, fresh_db,
                                                                          tmp_path):
    db, cache = fresh_db, tmp_path / "cache"
    start = str(binlog_position(mariadb))
    mariadb.sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", "UPDATE t SET v = 'z'",
                db=db)

    first = _run(_config(tmp_path, mariadb, db, start, 1), cache)
    assert _rows(tmp_path / "changelog1") == 6
    # Spark's notes of every start (its logging profile, the shell's level, Hadoop's
    # native library) stay off the console: the driver logs as spark/log4j2.properties says
    said = (tmp_path / "run1.log").read_text()
    for note in ("log4j profile", "Setting default log level", "NativeCodeLoader"):
        assert note not in said, said[-3000:]
    assert _flag(first, "-Dlog4j2.configurationFile=file:")
    # and it ends saying where it caught up with the server: the server's position now
    assert f"caught up with the server at {binlog_position(mariadb)}" in said, said[-3000:]
    writes = _flag(first, "-XX:ArchiveClassesAtExit=")
    assert writes and writes[0].startswith(f"-XX:ArchiveClassesAtExit={cache}/jvm-")
    assert not _flag(first, "-XX:SharedArchiveFile=")
    # no pyspark zip on the workers' path: they import the installed package
    entries = [e for p in first["worker_paths"] for e in p.split(":")]
    assert any(e.endswith("pyspark.zip") for e in entries)      # named by Spark, but...
    assert not any(e.endswith("pyspark.zip") and Path(e).exists() for e in entries)

    deadline = time.monotonic() + 180            # the JVM ends, then a checker vouches for it
    while not list(cache.glob("jvm-*.size")):
        assert time.monotonic() < deadline, sorted(p.name for p in cache.iterdir())
        time.sleep(0.5)
    archive = next(cache.glob("jvm-*.jsa"))

    second = _run(_config(tmp_path, mariadb, db, start, 2), cache)
    assert _rows(tmp_path / "changelog2") == 6
    assert _flag(second, "-XX:SharedArchiveFile=") == [f"-XX:SharedArchiveFile={archive}"]
    assert not _flag(second, "-XX:ArchiveClassesAtExit=")

    # cut short after it was checked (a copy put in its place: a JVM that still maps the
    # old one keeps it): never mapped, since a JVM would crash on it; written anew
    damaged = archive.with_name("damaged")
    damaged.write_bytes(archive.read_bytes()[: archive.stat().st_size // 3])
    os.replace(damaged, archive)
    third = _run(_config(tmp_path, mariadb, db, start, 3), cache)
    assert _rows(tmp_path / "changelog3") == 6
    assert not _flag(third, "-XX:SharedArchiveFile=")
    assert _flag(third, "-XX:ArchiveClassesAtExit=")
    assert not list(tmp_path.glob("**/hs_err*"))
