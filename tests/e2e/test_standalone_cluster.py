"""A pipeline on a real distributed Spark: a standalone master and two workers on loopback
(started from pyspark's own launcher), ``mysqlcdc run`` as its driver, the checkpoint,
schema history and changelog on a folder every process sees. Every change arrives once,
decoded with the columns it had, read by tasks of both workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from mysqlcdc.capture import batchend

from tests.support.mariadb import binlog_position
from tests.support.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.e2e

TXNS, ROWS_PER_TXN = 600, 10
ALTER_AT = TXNS * 3 // 4


@pytest.fixture(scope="module")
def cluster():
    with StandaloneCluster(workers=2, cores=1, memory="1g").start() as started:
        yield started


def _config(tmp_path: Path, mariadb, db: str, start: str, master: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: cluster-test
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 4700
  start: "{start}"
  tables:
    include: ["{db}.*"]
  parallelism: 2
  max_events_per_batch: 100000
spark:
  master: "{master}"
  checkpoint: {tmp_path / "checkpoint"}
  trigger_interval: "0 seconds"
  conf:
    spark.executor.memory: "512m"
    spark.executor.cores: "1"
    spark.cores.max: "2"
    spark.sql.shuffle.partitions: "2"
sinks:
  - changelog:
      path: {tmp_path / "changelog"}
""")
    return path


def _workload(mariadb, db: str) -> tuple[str, dict[tuple[str, int], dict]]:
    """Inserts in transactions of ten wide-ish rows (9 MB of binlog: a batch is cut into
    slices of at least 1 MiB), a CREATE TABLE three quarters in (later rows go to the new
    table, which has one more column), updates and deletes; returns the start position and
    the tables' final rows by (table, id)."""
    pad = "x" * 1500
    mariadb.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT, s VARCHAR(2000))")
    start = str(binlog_position(mariadb))
    statements, table = [], "t"
    for txn in range(TXNS):
        if txn == ALTER_AT:
            statements.append(f"CREATE TABLE `{db}`.u (id INT PRIMARY KEY, v INT, "
                              f"s VARCHAR(2000), w INT DEFAULT 7)")
            table = "u"
        values = ", ".join(f"({txn * ROWS_PER_TXN + i}, {txn}, '{pad}')"
                           for i in range(ROWS_PER_TXN))
        statements.append(f"INSERT INTO `{db}`.{table} (id, v, s) VALUES {values}")
    for table in ("t", "u"):
        statements += [f"UPDATE `{db}`.{table} SET v = v + 1000 WHERE id % 7 = 0",
                       f"DELETE FROM `{db}`.{table} WHERE id % 11 = 0"]
    mariadb.sql(*statements)
    rows = {("t", r[0]): {"id": r[0], "v": r[1]}
            for r in mariadb.sql(f"SELECT id, v FROM `{db}`.t")}
    rows.update({("u", r[0]): {"id": r[0], "v": r[1], "w": r[2]}
                 for r in mariadb.sql(f"SELECT id, v, w FROM `{db}`.u")})
    return start, rows


def test_a_pipeline_on_a_standalone_cluster_finds_every_change(cluster, mariadb, fresh_db,
                                                                tmp_path):
    start, final = _workload(mariadb, fresh_db)
    config = _config(tmp_path, mariadb, fresh_db, start, cluster.url)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run([sys.executable, "-m", "mysqlcdc.cli.main", "run", str(config),
                          "--until-idle"], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]

    rows = ds.dataset(str(tmp_path / "changelog"), format="parquet",
                      partitioning="hive").to_table().to_pylist()
    changes = sorted((r for r in rows if r["op"] in "cud"), key=lambda r: r["seq"])
    assert len({r["seq"] for r in changes}) == len(changes)           # nothing twice
    state: dict[tuple[str, int], dict] = {}
    for r in changes:
        if r["op"] == "d":
            del state[(r["table"], json.loads(r["before"])["id"])]
        else:
            after = json.loads(r["after"])
            state[(r["table"], after["id"])] = {k: after[k] for k in ("id", "v", "w")
                                                if k in after}
    assert state == final                                 # every change, once, in order
    inserted = [(r["table"], json.loads(r["after"])) for r in changes if r["op"] == "c"]
    assert len(inserted) == TXNS * ROWS_PER_TXN
    assert {t for t, _ in inserted[:ALTER_AT * ROWS_PER_TXN]} == {"t"}
    assert all(t == "u" and a["w"] == 7 for t, a in inserted[ALTER_AT * ROWS_PER_TXN:])
    assert [(r["op"], r["table"]) for r in rows if r["op"] == "s"] == [("s", "u")]

    # the batches were cut into slices, read on executors of both workers
    records = list((tmp_path / "checkpoint").glob(f"*/mysqlcdc-schema/{batchend.RECORDS}/*-1.json"))
    assert any(batchend.read_found(p).reason != "empty" for p in records)
    workers = {p.parent.parent.name for p in cluster.executor_folders()}
    assert workers == {"worker-0", "worker-1"}, cluster.executor_folders()
    assert cluster.state()["aliveworkers"] == 2
