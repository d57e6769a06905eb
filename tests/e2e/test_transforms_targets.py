"""Transforms before the mirrors and Kafka's Debezium format: one `mysqlcdc run` pipeline
whose transforms mask a column and filter rows out, with a PostgreSQL mirror, a Delta
mirror and a Kafka sink in the debezium format; each target holds the transformed rows,
never the source's."""

from __future__ import annotations

import json

import pytest

from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.pipeline.runner import run_pipeline

from tests.support.kafka import read_topic
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e


def _config(mariadb, postgres, kafka, db: str, tmp_path, start) -> object:
    return load_pipeline_from_dict({
        "name": db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": 3900 + int(db.rsplit("_", 1)[-1]), "start": str(start),
                   "tables": {"include": [f"{db}.*"]}, "max_events_per_batch": 50},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"},
        "transforms": [
            {"mask": {"columns": [f"{db}.member.email"], "keep_last": 4}},
            {"filter": {"drop": "after.status == 'hidden'", "ops": ["c", "u"]}},
        ],
        "sinks": [
            {"mirror": {"target": "postgresql", "host": postgres.host, "port": postgres.port,
                        "user": postgres.user, "password_env": "I15_PG_PASSWORD"}},
            {"mirror": {"target": "delta", "path": str(tmp_path / "delta"),
                        # this sink only: the status column is masked too
                        "transforms": [{"mask": {"columns": [f"{db}.member.status"]}}]}},
            {"kafka": {"bootstrap_servers": kafka.bootstrap, "format": "debezium",
                       "schemas": False, "topic_prefix": db, "partitions": 1,
                       "delivery_timeout_s": 10}},
        ],
    }, env={"I15_PG_PASSWORD": postgres.password})


def test_transforms_run_before_mirrors_and_the_debezium_format(
        spark, mariadb, postgres, kafka, fresh_db, tmp_path):
    from deltalake import DeltaTable

    db = fresh_db
    start = binlog_position(mariadb)
    mariadb.sql(
        f"CREATE TABLE `{db}`.member (id INT PRIMARY KEY, email VARCHAR(40), "
        "status VARCHAR(10))",
        f"INSERT INTO `{db}`.member VALUES (1, 'ada@example.com', 'active'), "
        "(2, 'bob@example.com', 'hidden'), (3, 'cy@example.org', 'active')",
        f"UPDATE `{db}`.member SET email = 'ada@example.net' WHERE id = 1",
        f"DELETE FROM `{db}`.member WHERE id = 3",
    )
    run_pipeline(_config(mariadb, postgres, kafka, db, tmp_path, start), until_idle=True,
                 spark=spark)

    want = [(1, "*" * 11 + ".net", "active")]          # 2 filtered out, 3 deleted
    assert sorted(postgres.sql(f'SELECT id, email, status FROM "{db}"."member"')) == want

    delta = DeltaTable(str(tmp_path / "delta" / db / "member")).to_pyarrow_table()
    assert [(r["id"], r["email"], r["status"]) for r in delta.to_pylist()] == \
        [(1, "*" * 11 + ".net", "*" * 8)]

    msgs = [json.loads(m.value()) for p in read_topic(kafka.bootstrap, f"{db}.{db}.member").values()
            for m in p if m.value() is not None]
    # Kafka keeps each key's order; across keys the envelope's seq gives the binlog's
    msgs.sort(key=lambda v: int(v["source"]["seq"]))
    assert [(v["op"], (v["after"] or v["before"])["id"]) for v in msgs] == \
        [("c", 1), ("c", 3), ("u", 1), ("d", 3)]
    assert [v["after"]["email"] for v in msgs if v["after"]] == \
        ["*" * 11 + ".com", "*" * 10 + ".org", "*" * 11 + ".net"]
    assert msgs[2]["before"]["email"] == "*" * 11 + ".com"
