"""A pipeline started from a GTID set or a timestamp reads exactly the transactions after
it, and its checkpoint carries the GTID set with every position."""

from __future__ import annotations

import json
import time

import pytest

from mysqlcdc.config.loader import load_pipeline_from_dict
from mysqlcdc.gtidset import GtidSet
from mysqlcdc.pipeline.runner import run_pipeline, sink_checkpoint
from mysqlcdc.spark.checkpoint import offset_data, planned_batches

pytestmark = pytest.mark.e2e


def _cfg(mariadb, db: str, start, folder, server_id: int):
    return load_pipeline_from_dict({
        "name": f"gtid-{server_id}",
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": server_id, "start": start,
                   "tables": {"include": [f"{db}.*"]}},
        "spark": {"checkpoint": str(folder / "ck"), "trigger_interval": "200 milliseconds"},
        "sinks": [{"changelog": {"path": str(folder / "changelog")}}],
    })


def _ids(spark, folder) -> list[int]:
    rows = spark.read.parquet(str(folder / "changelog")).orderBy("seq").collect()
    return [json.loads(r["after"])["id"] for r in rows]


def test_start_from_a_gtid_set_and_from_a_timestamp(spark, mariadb, fresh_db, tmp_path):
    mariadb.sql(f"CREATE TABLE `{fresh_db}`.t (id INT PRIMARY KEY)")
    for i in range(1, 4):
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES ({i})")
    after_three = mariadb.sql("SELECT @@gtid_binlog_pos")[0][0]
    for i in range(4, 6):
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES ({i})")
    time.sleep(1.1)                       # the next transactions commit in a later second
    boundary_s = int(mariadb.sql("SELECT UNIX_TIMESTAMP()")[0][0])
    for i in range(6, 9):
        mariadb.sql(f"INSERT INTO `{fresh_db}`.t VALUES ({i})")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(boundary_s))

    by_gtid = tmp_path / "by-gtid"
    cfg = _cfg(mariadb, fresh_db, {"gtid": after_three}, by_gtid, 7401)
    assert str(cfg.source.start) == after_three
    run_pipeline(cfg, until_idle=True, spark=spark)
    assert _ids(spark, by_gtid) == [4, 5, 6, 7, 8]

    by_time = tmp_path / "by-time"
    run_pipeline(_cfg(mariadb, fresh_db, stamp, by_time, 7411), until_idle=True, spark=spark)
    assert _ids(spark, by_time) == [6, 7, 8]

    # every planned offset carries the GTID set before its position
    ck = sink_checkpoint(cfg, 0)
    from pathlib import Path
    last = offset_data(Path(ck), planned_batches(Path(ck))[0])
    assert GtidSet.parse(last["gtid"]) == GtidSet.parse(mariadb.sql("SELECT @@gtid_binlog_pos")[0][0])
    assert last["ts"] // 1000 >= boundary_s
