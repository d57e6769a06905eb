"""Every sink gets the snapshot: a PostgreSQL mirror equals the source after it, Kafka's
Debezium format marks the rows ``snapshot: true`` with ``last_in_data_collection`` and
``last`` on each table's and the whole snapshot's last row, the console prints them. One
pipeline, three sinks, run in this process's Spark session until the snapshot is done."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mysqlcdc.config.loader import load_pipeline
from mysqlcdc.pipeline.runner import run_pipeline

from tests.support.kafka import read_topic
from tests.support.mirror import assert_postgres_equals_source

pytestmark = pytest.mark.e2e


def test_every_sink_gets_the_snapshot(spark, mariadb, kafka, postgres, fresh_db, tmp_path,
                                      monkeypatch):
    db = fresh_db
    mariadb.sql("CREATE TABLE a (id INT PRIMARY KEY, amount DECIMAL(10,2), at DATETIME(3), "
                "flag BIT(1), name VARCHAR(20))",
                "INSERT INTO a SELECT seq, seq / 7, '2024-02-29 13:45:07.123' + INTERVAL seq "
                "SECOND, seq % 2, CONCAT('ä-', seq) FROM seq_1_to_700",
                "CREATE TABLE b (code VARCHAR(10) PRIMARY KEY, n BIGINT UNSIGNED)",
                "INSERT INTO b SELECT CONCAT('c', seq), 18446744073709551615 - seq "
                "FROM seq_1_to_300", db=db)
    monkeypatch.setenv("PG_PASSWORD", postgres.password)
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
name: sinks-{db}
source:
  host: {mariadb.host}
  port: {mariadb.port}
  user: {mariadb.user}
  server_id: 7971
  tables: {{include: ["{db}.*"]}}
  snapshot: {{mode: initial_only, chunk_rows: 250, chunks_per_batch: 2}}
spark:
  checkpoint: {tmp_path}/checkpoint
  trigger_interval: "200 milliseconds"
sinks:
  - mirror: {{target: postgresql, host: {postgres.host}, port: {postgres.port},
              user: {postgres.user}, password_env: PG_PASSWORD, database: postgres}}
  - kafka: {{bootstrap_servers: "{kafka.bootstrap}", format: debezium, partitions: 3}}
  - console: {{max_rows: 3}}
""")
    run_pipeline(load_pipeline(path), until_idle=True, spark=spark)
    assert_postgres_equals_source(mariadb, postgres, db, ["a", "b"])
    marks: dict = {}
    for table, rows in (("a", 700), ("b", 300)):
        values = [json.loads(m.value())["payload"] for msgs in   # schemas on: the default
                  read_topic(kafka.bootstrap, f"sinks-{db}.{db}.{table}").values() for m in msgs]
        assert len(values) == rows and {v["op"] for v in values} == {"r"}
        assert all(v["before"] is None and v["source"]["query"] is None for v in values)
        marks[table] = Counter(v["source"]["snapshot"] for v in values)
    assert marks["a"] == {"true": 699, "last_in_data_collection": 1}
    assert marks["b"] == {"true": 299, "last": 1}
    # each sink's query read every chunk: the same plans in each committed offset log
    plans = {sink: _chunks(tmp_path / "checkpoint" / sink)
             for sink in ("0-mirror", "1-kafka", "2-console")}
    assert plans["0-mirror"] == plans["1-kafka"] == plans["2-console"]
    assert {c[0] for c in plans["2-console"]} == {f"{db}.a", f"{db}.b"}


def _chunks(checkpoint) -> set:
    """The chunks the committed batches of a query's checkpoint read."""
    done = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    out = set()
    for batch in done:
        offset = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])
        for name, lo, hi, chunk, *_ in (offset.get("snapshot") or {}).get("plan", []):
            out.add((name, json.dumps(lo), json.dumps(hi)))
    return out
