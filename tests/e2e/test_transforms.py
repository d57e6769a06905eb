"""Transforms in `mysqlcdc run` pipelines against the real MariaDB, Spark and the Kafka broker:
built-ins and a user's python function with helpers (code shipped from a folder no
executor has on its path), both on_error modes (the pipeline stops naming the event and
the traceback; dead letters park it and go on, losing nothing)."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pyarrow.dataset as ds
import pytest

from mysqlcdc.config import load_pipeline_from_dict
from mysqlcdc.errors import TransformError
from mysqlcdc.pipeline.runner import run_pipeline
from mysqlcdc.sinks.dead_letter import read_dead_letters

from tests.support.kafka import read_topic
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e

USER_CODE = textwrap.dedent('''
    from decimal import Decimal

    import pyarrow.compute as pc

    def accounts_only(batch):
        """The batch form: one Arrow kernel for the whole batch."""
        return batch.filter(pc.equal(batch.column("table"), "account"))

    def shout_name(event, helpers):
        """Touch one field; typed values in, typed values out."""
        after = event["after"]
        if after is not None:
            if after["name"] == "explode":
                raise RuntimeError("cannot shout " + after["name"])
            after["name"] = helpers.loud(after["name"])
            assert isinstance(after["balance"], Decimal), type(after["balance"])
            after["balance"] = after["balance"] + 1
        return event
''')
HELPERS = "def loud(text):\n    return text.upper() + '!'\n"


def _user_code(folder, name: str) -> None:
    """A package only the pipeline's transforms_path knows about (workers must get it)."""
    pkg = folder / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cdc.py").write_text(USER_CODE)
    (pkg / "helpers.py").write_text(HELPERS)


def _config(mariadb, kafka, db, tmp_path, start, server_id, pkg, *, on_error="fail"):
    return load_pipeline_from_dict({
        "name": db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": server_id, "start": str(start), "parallelism": 2,
                   "max_events_per_batch": 40, "tables": {"include": [f"{db}.*"]}},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"},
        "transforms_path": [str(tmp_path / "code")],
        "helpers": [f"{pkg}.helpers"],
        "dead_letter": {"path": str(tmp_path / "dead")},
        "transforms": [
            {"python": {"batch_function": f"{pkg}.cdc:accounts_only"}},
            {"filter": {"drop": "after.status == 'deleted'", "ops": ["c", "u"]}},
            {"mask": {"columns": [f"{db}.account.email"], "keep_last": 4}},
            {"hash": {"columns": [f"{db}.account.card"], "salt_env": "I15_SALT"}},
            {"python": {"function": f"{pkg}.cdc:shout_name", "on_error": on_error}},
            {"route": {"template": "{db}.routed.{table}"}},
        ],
        "sinks": [
            {"changelog": {"path": str(tmp_path / "changelog"),
                           "transforms": [{"add_field": {"name": "region", "value": "eu"}}]}},
            {"kafka": {"bootstrap_servers": kafka.bootstrap, "topic_column": "topic",
                       "delivery_timeout_s": 10, "partitions": 1, "write_tasks": 1}},
        ],
    }, env={"I15_SALT": "pepper"})


def _workload(mariadb, db: str, names: list[str]) -> None:
    mariadb.sql(f"CREATE TABLE `{db}`.account (id INT PRIMARY KEY, name VARCHAR(20), "
                "email VARCHAR(64), card VARCHAR(20), balance DECIMAL(10,2), status VARCHAR(10))",
                f"CREATE TABLE `{db}`.noise (id INT PRIMARY KEY)",
                f"INSERT INTO `{db}`.noise VALUES (1), (2)")
    conn = mariadb.connect(database=db, autocommit=False)
    with conn.cursor() as cur:
        for i, name in enumerate(names, 1):
            cur.execute("INSERT INTO account VALUES (%s,%s,%s,%s,%s,%s)",
                        (i, name, f"{name}@example.com", f"41111111111{i:05d}", "10.50", "new"))
            conn.commit()
        cur.execute("UPDATE account SET status = 'deleted' WHERE id = 1")
        cur.execute("UPDATE account SET balance = 20 WHERE id = 2")
        conn.commit()
    conn.close()


def _changelog(tmp_path) -> list[dict]:
    rows = ds.dataset(str(tmp_path / "changelog"), format="parquet",
                      partitioning="hive").to_table().to_pylist()
    assert {r["table"] for r in rows} == {"account"}     # the batch function's doing
    return sorted((r for r in rows if r["op"] != "s"), key=lambda r: r["seq"])


def test_builtins_and_python_transform_through_two_sinks(spark, mariadb, kafka, fresh_db,
                                                         tmp_path):
    _user_code(tmp_path / "code", "i15ship_a")
    start = binlog_position(mariadb)
    _workload(mariadb, fresh_db, ["ada", "bob", "cy"])
    cfg = _config(mariadb, kafka, fresh_db, tmp_path, start, 4600, "i15ship_a")
    run_pipeline(cfg, until_idle=True, spark=spark)

    rows = _changelog(tmp_path)
    assert [(r["op"], json.loads(r["key"])["id"]) for r in rows] == \
        [("c", 1), ("c", 2), ("c", 3), ("u", 2)]   # no noise rows, no 'deleted' update
    first = json.loads(rows[0]["after"])
    assert first == {"id": 1, "name": "ADA!", "email": "***********.com",
                     "card": hashlib.sha256(b"pepper4111111111100001").hexdigest(),
                     "balance": "11.50", "status": "new", "region": "eu"}
    update = rows[3]
    assert json.loads(update["after"])["balance"] == "21.00"
    assert json.loads(update["before"])["name"] == "bob"     # python touched only `after`
    assert {r["topic"] for r in rows} == {f"{fresh_db}.routed.account"}

    topic = f"{fresh_db}.routed.account"
    messages = [json.loads(m.value()) for m in read_topic(kafka.bootstrap, topic)[0]]
    assert [m["after"]["name"] for m in messages] == ["ADA!", "BOB!", "CY!", "BOB!"]
    assert all("region" not in m["after"] for m in messages)   # that one is changelog-only


def test_on_error_fail_then_dead_letter(spark, mariadb, kafka, fresh_db, tmp_path):
    _user_code(tmp_path / "code", "i15ship_b")
    start = binlog_position(mariadb)
    _workload(mariadb, fresh_db, ["ada", "explode", "cy"])

    cfg = _config(mariadb, kafka, fresh_db, tmp_path, start, 4610, "i15ship_b")
    with pytest.raises(TransformError) as err:
        run_pipeline(cfg, until_idle=True, spark=spark)
    message = err.value.message
    assert "i15ship_b.cdc:shout_name" in message and f"{fresh_db}.account" in message
    assert 'key {"id":2}' in message and "mariadb-bin." in message
    assert "RuntimeError: cannot shout explode" in message
    assert 'raise RuntimeError("cannot shout " + after["name"])' in err.value.detail
    assert ".zip/i15ship_b/cdc.py" in err.value.detail      # executors run the shipped copy
    assert not (tmp_path / "dead").exists()

    # The same checkpoint, now parking what fails: the failed batch is replayed, every
    # other event arrives, the bad one is in the dead-letter folder with its error.
    cfg = _config(mariadb, kafka, fresh_db, tmp_path, start, 4610, "i15ship_b",
                  on_error="dead_letter")
    run_pipeline(cfg, until_idle=True, spark=spark)
    rows = _changelog(tmp_path)
    assert [(r["op"], json.loads(r["key"])["id"]) for r in rows] == [("c", 1), ("c", 3)]
    letters = read_dead_letters(str(tmp_path / "dead")).to_pylist()
    # each sink's query runs the transforms on its own stream: one letter per query
    assert sorted((x["op"], json.loads(x["key"])["id"], x["sink"]) for x in letters) == [
        ("c", 2, "0-changelog"), ("c", 2, "1-kafka"), ("u", 2, "0-changelog"), ("u", 2, "1-kafka")]
    for letter in letters:
        assert letter["error_type"] == "RuntimeError" and "explode" in letter["error_message"]
        assert json.loads(letter["after"])["email"].endswith(".com")    # masked before it
        assert letter["batch_id"] >= 0 and "cannot shout" in letter["error_traceback"]
        assert len(letter["query_id"]) == 36          # the query's id, kept by its checkpoint
