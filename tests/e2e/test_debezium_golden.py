"""Golden messages: a fixed table with every column type, one row inserted, its primary key
changed, and a few DDL statements, published in the debezium format under Debezium's
default modes and under the other ones. Key, value (schema and payload) and headers of
every message equal, field for field, what Debezium's MySQL connector documents for
them; the expected JSON is written by hand in data/debezium_golden.json."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.support.kafka import read_topic
from tests.support.mariadb import binlog_position

pytestmark = pytest.mark.e2e

GOLDEN = json.loads((Path(__file__).parent / "data" / "debezium_golden.json").read_text())

TABLE = """CREATE TABLE golden (
  id INT NOT NULL PRIMARY KEY, b1 BIT(1), b10 BIT(10),
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  f FLOAT, d DOUBLE, dec1 DECIMAL(10,2), dec0 DECIMAL(5,0),
  c CHAR(3), vc VARCHAR(10) NOT NULL, tx TEXT, bn BINARY(4), vb VARBINARY(8), bl BLOB,
  e ENUM('red','green'), s SET('a','b','c'), y YEAR, dt DATE, tm TIME, tm6 TIME(6),
  dtm DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6), ts TIMESTAMP(3) NULL, ts0 TIMESTAMP NULL,
  g GEOMETRY, p POINT, nul VARCHAR(5))"""

ROW = """INSERT INTO golden VALUES (1, 1, b'1000000001', -128, 255, -32768, 65535, -8388608,
  16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, 1.5, -2.25,
  -12.34, 99999, 'ab', 'héllo', 'text', 'ab', x'00ff', 'blob', 'green', 'a,c', 2024,
  '2024-02-29', '-01:02:03', '12:34:56.789012', '2018-06-20 06:37:03',
  '2024-02-29 13:45:07.123', '1969-12-31 23:59:59.999999', '2018-06-20 06:37:03.5',
  '2018-06-20 06:37:03', ST_GeomFromText('LINESTRING(0 0,1 1)', 4326), POINT(1, 2), NULL)"""


def _fill(value, prefix: str, db: str):
    """The expected JSON with {prefix} and {db} filled in."""
    return json.loads(json.dumps(value).replace("{prefix}", prefix).replace("{db}", db))


def _match(got, want, where: str = "$") -> None:
    """``got`` equals ``want``; '<int>', '<str>' in ``want`` match any value of that type."""
    if want in ("<int>", "<str>"):
        assert isinstance(got, int if want == "<int>" else str), f"{where}: {got!r} is no {want}"
        return
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want) if where.endswith("schema") \
            else set(got) == set(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            _match(got[k], want[k], f"{where}.{k}")
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _match(g, w, f"{where}[{i}]")
        return
    assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"


def _envelope_schema(prefix: str, db: str, other_modes: bool) -> dict:
    fields = copy.deepcopy(GOLDEN["value_fields"])
    if other_modes:
        overrides = GOLDEN["other_modes_fields"]
        fields = [overrides.get(f["field"], f) for f in fields]
    value = {"type": "struct", "fields": fields, "optional": True,
             "name": f"{prefix}.{db}.golden.Value"}
    return _fill({
        "type": "struct",
        "fields": [{**value, "field": "before"}, {**value, "field": "after"},
                   {**GOLDEN["source_schema"], "field": "source"},
                   {**GOLDEN["transaction_schema"], "field": "transaction"},
                   {"type": "string", "optional": False, "field": "op"},
                   {"type": "int64", "optional": True, "field": "ts_ms"},
                   {"type": "int64", "optional": True, "field": "ts_us"},
                   {"type": "int64", "optional": True, "field": "ts_ns"}],
        "optional": False, "name": f"{prefix}.{db}.golden.Envelope", "version": 2,
    }, prefix, db)


def _image(which, other_modes: bool):
    if which is None:
        return None
    image = dict(GOLDEN["after"])
    if other_modes:
        image.update(GOLDEN["other_modes_after"])
    if which == "after with id 2":
        image["id"] = 2
    return image


def _check_events(kafka, prefix: str, db: str, other_modes: bool) -> None:
    msgs = [m for p in read_topic(kafka.bootstrap, f"{prefix}.{db}.golden").values() for m in p]
    msgs.sort(key=lambda m: (int(dict(m.headers())["seq"]), m.value() is None))
    assert len(msgs) == len(GOLDEN["events"])
    key_schema = _fill(GOLDEN["key_schema"], prefix, db)
    envelope = _envelope_schema(prefix, db, other_modes)
    txn_id = None
    for m, want in zip(msgs, GOLDEN["events"]):
        _match(json.loads(m.key()), {"schema": key_schema, "payload": want["key"]}, "key")
        if want.get("tombstone"):
            assert m.value() is None
            continue
        value = json.loads(m.value())
        _match(value["schema"], envelope, "value.schema")
        payload = value["payload"]
        txn_id = txn_id if want["op"] == "d" else payload["transaction"]["id"]
        _match(payload, {
            "before": _image(want["before"], other_modes),
            "after": _image(want["after"], other_modes),
            "source": _fill(GOLDEN["source"], prefix, db),
            "transaction": {"id": payload["source"]["gtid"], "total_order": want["total_order"],
                            "data_collection_order": want["data_collection_order"]},
            "op": want["op"], "ts_ms": "<int>", "ts_us": "<int>", "ts_ns": "<int>"}, "payload")
        headers = {k: v.decode() for k, v in m.headers()}
        assert headers["seq"] == payload["source"]["seq"]
        assert (headers["file"], headers["pos"], headers["row"], headers["gtid"]) == (
            payload["source"]["file"], str(payload["source"]["pos"]), "0",
            payload["source"]["gtid"])
        moved = {k: json.loads(v) for k, v in headers.items() if k.startswith("__debezium")}
        assert moved == want["headers"]


def _check_schema_changes(kafka, prefix: str, db: str) -> None:
    key_schema = GOLDEN["schema_change_key_schema"]
    msgs = read_topic(kafka.bootstrap, prefix)[0]
    values = []
    for m in msgs:
        _match(json.loads(m.key()), {"schema": key_schema, "payload": {"databaseName": db}}, "key")
        value = json.loads(m.value())
        assert value["schema"]["name"] == "io.debezium.connector.mysql.SchemaChangeValue"
        assert [f["field"] for f in value["schema"]["fields"]] == [
            "source", "ts_ms", "databaseName", "schemaName", "ddl", "tableChanges"]
        values.append(value["payload"])
    assert len(values) == len(GOLDEN["schema_changes"])
    for got, want in zip(values, _fill(GOLDEN["schema_changes"], prefix, db)):
        assert (got["databaseName"], got["schemaName"], got["ddl"]) == (
            db, None, want.get("logged", want["ddl"]))
        assert got["source"]["table"] == want["table"] and got["source"]["db"] == db
        assert len(got["tableChanges"]) == len(want["tableChanges"])
        for change, expected in zip(got["tableChanges"], want["tableChanges"]):
            assert (change["type"], change["id"]) == (expected["type"], expected["id"])
            if "table" in expected:
                _match(change["table"], expected["table"], "tableChanges.table")
            else:
                assert len(change["table"]["columns"]) == expected["columns_after"]
            if "last_column" in expected:
                _match(change["table"]["columns"][-1], expected["last_column"], "column")


def test_golden_messages_field_for_field(spark, mariadb, kafka, fresh_db, tmp_path):
    from mysqlcdc.config import load_pipeline_from_dict
    from mysqlcdc.pipeline.runner import run_pipeline

    mariadb.sql(TABLE, db=fresh_db)
    start = binlog_position(mariadb)
    mariadb.sql(ROW, "UPDATE golden SET id = 2 WHERE id = 1", db=fresh_db)
    base = {"bootstrap_servers": kafka.bootstrap, "format": "debezium", "partitions": 2,
            "transaction_topic": "{prefix}.transaction", "position_headers": True}
    cfg = load_pipeline_from_dict({
        "name": fresh_db.replace("_", "-"),
        "source": {"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                   "server_id": 3700 + 10 * int(fresh_db.rsplit("_", 1)[-1]),
                   "start": str(start), "tables": {"include": [f"{fresh_db}.*"]}},
        "spark": {"checkpoint": str(tmp_path / "ck"), "trigger_interval": "200 milliseconds"},
        "sinks": [
            {"kafka": {**base, "topic_prefix": f"{fresh_db}-g1"}},
            {"kafka": {**base, "topic_prefix": f"{fresh_db}-g2", "decimal_handling_mode": "string",
                       "time_precision_mode": "connect", "bigint_unsigned_handling_mode": "precise",
                       "binary_handling_mode": "hex"}},
        ],
    })
    run_pipeline(cfg, until_idle=True, spark=spark)
    # DDL while the pipeline has a schema history (a new one refuses to start before a
    # RENAME of a table that exists today)
    mariadb.sql(*(c["ddl"] for c in GOLDEN["schema_changes"]), db=fresh_db)
    run_pipeline(cfg, until_idle=True, spark=spark)
    _check_events(kafka, f"{fresh_db}-g1", fresh_db, other_modes=False)
    _check_events(kafka, f"{fresh_db}-g2", fresh_db, other_modes=True)
    _check_schema_changes(kafka, f"{fresh_db}-g1", fresh_db)
