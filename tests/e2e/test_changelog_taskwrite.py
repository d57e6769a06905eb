"""The changelog written by the source's own read tasks (DESIGN.md decision 20).

Against a real MariaDB and Spark: the read tasks write the part files, the sink's query
writes Spark's ``_spark_metadata`` log entries itself (compactions included), and Spark's
reader, a plain Parquet reader and the workload agree change for change; a micro-batch's
progress counts the changes written; a batch replayed after its commit is skipped; an
ordered transform (flatten) before the sink still writes through Spark's file sink; a
Delta changelog commits the files the tasks wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e

TASK_FILE = re.compile(r"part-\d{5}-\d{10}-[0-9a-f]{32}-\d{4}\.c000\.snappy\.parquet")


def _workload(mariadb, db: str, transactions: int = 40) -> int:
    mariadb.sql(f"CREATE TABLE `{db}`.a (id INT PRIMARY KEY, v VARCHAR(20))",
                f"CREATE TABLE `{db}`.b (id INT PRIMARY KEY, n BIGINT)")
    statements = []
    for i in range(1, transactions + 1):
        statements += [f"INSERT INTO `{db}`.a VALUES ({i}, 'v{i}')",
                       f"INSERT INTO `{db}`.b VALUES ({i}, {i * 7})"]
        if i % 3 == 0:
            statements.append(f"UPDATE `{db}`.a SET v = 'u{i}' WHERE id = {i - 1}")
        if i % 5 == 0:
            statements.append(f"DELETE FROM `{db}`.b WHERE id = {i - 2}")
    mariadb.sql(*statements)
    return len(statements) + 2           # and a schema change record (op s) per CREATE


def _config(mariadb, db: str, tmp_path: Path, start, server_id: int, **sink):
    from mysqlcdc.config import load_pipeline_from_dict

    return load_pipeline_from_dict({
        "name": db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": server_id, "start": str(start),
                   "max_events_per_batch": 8, "tables": {"include": [f"{db}.*"]}},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "0 seconds"},
        "sinks": [{"changelog": {"path": str(tmp_path / "changelog"), **sink}}],
    })


def _seqs_plain(path: Path) -> list[int]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["seq"])
    return sorted(int(s) for s in table.column("seq").to_pylist())


def test_read_tasks_write_the_files_and_the_log_commits_them(spark, mariadb, fresh_db,
                                                              tmp_path):
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db)
    cfg = _config(mariadb, fresh_db, tmp_path, start, 4810)
    counted: dict[int, int] = {}
    run_pipeline(cfg, until_idle=True, spark=spark,
                 on_progress=lambda p: counted.__setitem__(p.get("batchId"),
                                                           p.get("numInputRows")))
    path = tmp_path / "changelog"
    files = [p for p in path.rglob("*.parquet")]
    assert files and all(TASK_FILE.fullmatch(p.name) for p in files), files[:3]
    meta = sorted(p.name for p in (path / "_spark_metadata").iterdir())
    assert any(n.endswith(".compact") for n in meta), meta       # more than 10 batches
    rows = spark.read.parquet(str(path))
    assert rows.count() == changes
    spark_seqs = sorted(int(r["seq"]) for r in rows.select("seq").collect())
    assert spark_seqs == _seqs_plain(path) and len(set(spark_seqs)) == changes
    by_op = {(r["table"], r["op"]): r["n"] for r in
             rows.groupBy("table", "op").count().withColumnRenamed("count", "n").collect()}
    assert by_op[("a", "c")] == by_op[("b", "c")] == 40
    assert by_op[("a", "u")] == 13 and by_op[("b", "d")] == 8
    assert by_op[("a", "s")] == by_op[("b", "s")] == 1
    after = json.loads(rows.where("`table` = 'b' AND op = 'c'").orderBy("seq")
                       .first()["after"])
    assert after == {"id": 1, "n": 7}
    # progress counts changes, not the rows naming files: the last batch's report
    last = max(b for b in counted if b is not None)
    assert 0 < counted[last] <= changes

    # the same pipeline again, nothing new: no batch is written twice
    before = sorted(str(p) for p in path.rglob("*.parquet"))
    mariadb.sql(f"INSERT INTO `{fresh_db}`.a VALUES (1000, 'late')")
    run_pipeline(cfg, until_idle=True, spark=spark)
    assert spark.read.parquet(str(path)).count() == changes + 1
    assert set(before) <= {str(p) for p in path.rglob("*.parquet")}


def test_a_committed_batch_replayed_is_skipped(spark, mariadb, fresh_db, tmp_path):
    """Spark runs a batch again when the process died after the sink committed it and
    before the checkpoint said so: the log has the batch, so nothing is added twice."""
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db, transactions=10)
    cfg = _config(mariadb, fresh_db, tmp_path, start, 4820)
    run_pipeline(cfg, until_idle=True, spark=spark)
    commits = [p for p in (tmp_path / "ck" / "0-changelog" / "commits").iterdir()
               if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()                                   # the checkpoint forgets the last batch
    crc = last.parent / f".{last.name}.crc"
    if crc.exists():
        crc.unlink()
    run_pipeline(cfg, until_idle=True, spark=spark)
    seqs = _seqs_plain(tmp_path / "changelog")
    assert len(seqs) == changes == len(set(seqs))
    assert spark.read.parquet(str(tmp_path / "changelog")).count() == changes


def test_an_ordered_transform_writes_through_sparks_file_sink(spark, mariadb, fresh_db,
                                                              tmp_path):
    from mysqlcdc.config import load_pipeline_from_dict
    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db, transactions=6)
    raw = _config(mariadb, fresh_db, tmp_path, start, 4830).model_dump(mode="json",
                                                                        exclude_none=True)
    raw["transforms"] = [{"flatten": {"table": f"{fresh_db}.a", "joins": [
        {"column": "id", "table": f"{fresh_db}.b", "key": "id"}]}}]
    cfg = load_pipeline_from_dict(raw)
    run_pipeline(cfg, until_idle=True, spark=spark)
    path = tmp_path / "changelog"
    files = list(path.rglob("*.parquet"))
    assert files and not any(TASK_FILE.fullmatch(p.name) for p in files)
    rows = spark.read.parquet(str(path)).where("op IN ('c', 'u', 'd')")
    assert rows.count() == changes - 2
    first = json.loads(rows.where("`table` = 'a' AND op = 'c'").orderBy("seq").first()["after"])
    assert set(first) > {"id", "v"}                 # b's row embedded: flattened


def test_delta_changelog_commits_what_the_read_tasks_wrote(spark, mariadb, fresh_db, tmp_path):
    from deltalake import DeltaTable

    from mysqlcdc.pipeline.runner import run_pipeline

    start = binlog_position(mariadb)
    changes = _workload(mariadb, fresh_db, transactions=12)
    cfg = _config(mariadb, fresh_db, tmp_path, start, 4840, format="delta")
    run_pipeline(cfg, until_idle=True, spark=spark)
    table = DeltaTable(str(tmp_path / "changelog"))
    assert all(TASK_FILE.fullmatch(Path(u).name) for u in table.file_uris())
    data = table.to_pyarrow_table()
    assert data.num_rows == changes
    assert len(set(data.column("seq").to_pylist())) == changes
    assert set(data.column("table").to_pylist()) == {"a", "b"}
