"""Kafka record encodings and sink settings: pure, no broker."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from mysqlcdc.errors import ConfigError
from mysqlcdc.sinks.kafka.formats import (
    VERSION, boundary_records, debezium_value, encode_key, headers, merge_tallies,
    mysqlcdc_value, tally_transactions,
)
from mysqlcdc.sinks.kafka.settings import KafkaSettings
from mysqlcdc.types import make_seq

pytestmark = pytest.mark.unit

SEQ = Decimal(make_seq(3, 1234, 2))

ROW = {
    "op": "u", "db": "shop", "table": "orders",
    "before": '{"id":18446744073709551615,"amount":"-12.3400","note":"a\\"b"}',
    "after": '{"id":18446744073709551615,"amount":"-1.0000","note":null}',
    "key": '{"id":18446744073709551615}', "ts_ms": 1709214307123, "server_id": 7,
    "gtid": "0-7-42", "txn_id": "0-7-42", "file": "mariadb-bin.000003", "pos": 1234,
    "row": 2, "seq": SEQ,
}


def test_mysqlcdc_value_is_the_envelope_with_exact_values():
    value = json.loads(mysqlcdc_value(ROW))
    assert list(value) == ["op", "db", "table", "before", "after", "key", "ts_ms",
                           "server_id", "gtid", "txn_id", "file", "pos", "row", "seq", "query",
                           "moved_key"]
    assert value["before"] == {"id": 18446744073709551615, "amount": "-12.3400", "note": 'a"b'}
    assert value["after"]["note"] is None and value["seq"] == str(SEQ)
    assert int(value["seq"]) == 3 * 10**24 + 1234 * 10**12 + 2 * 2
    # The row images are embedded byte for byte, not re-encoded.
    assert ROW["before"].encode() in mysqlcdc_value(ROW)


def test_debezium_value_field_by_field():
    value = json.loads(debezium_value(ROW, "shop-cdc", now_ms=1700000000000))
    assert set(value) == {"before", "after", "source", "op", "ts_ms", "transaction"}
    assert value["op"] == "u" and value["ts_ms"] == 1700000000000
    assert value["before"]["amount"] == "-12.3400" and value["after"]["amount"] == "-1.0000"
    assert value["source"] == {
        "version": VERSION, "connector": "mysql", "name": "shop-cdc", "ts_ms": 1709214307123,
        "snapshot": "false", "db": "shop", "sequence": None, "table": "orders",
        "server_id": 7, "gtid": "0-7-42", "file": "mariadb-bin.000003", "pos": 1234,
        "row": 2, "thread": None, "query": None, "seq": str(SEQ),
    }


def test_insert_and_delete_images_are_null_where_absent():
    insert = {**ROW, "op": "c", "before": None}
    delete = {**ROW, "op": "d", "after": None, "gtid": None}
    assert json.loads(mysqlcdc_value(insert))["before"] is None
    assert json.loads(debezium_value(delete, "x", 0))["after"] is None
    assert json.loads(debezium_value(delete, "x", 0))["source"]["gtid"] is None


def test_key_and_headers():
    assert encode_key(ROW) == b'{"id":18446744073709551615}'
    assert dict(headers(ROW)) == {"seq": str(SEQ).encode(), "file": b"mariadb-bin.000003",
                                  "pos": b"1234", "row": b"2", "gtid": b"0-7-42"}
    assert "gtid" not in dict(headers({**ROW, "gtid": None}))


def test_transaction_boundaries_merge_tasks_and_keep_binlog_order():
    rows = [{**ROW, "txn_id": t, "table": tb, "seq": s}
            for t, tb, s in [("b", "x", 20), ("a", "x", 10), ("a", "y", 11), ("b", "x", 21)]]
    merged = merge_tallies([tally_transactions(rows[:2]), tally_transactions(rows[2:])])
    records = [(json.loads(k), json.loads(v)) for k, v in boundary_records(merged)]
    assert [(k["id"], v["status"]) for k, v in records] == [
        ("a", "BEGIN"), ("a", "END"), ("b", "BEGIN"), ("b", "END")]
    assert records[1][1]["event_count"] == 2
    assert records[1][1]["data_collections"] == [
        {"data_collection": "shop.x", "event_count": 1},
        {"data_collection": "shop.y", "event_count": 1}]


def test_settings_round_trip_through_spark_options_and_hide_secrets():
    s = KafkaSettings(producer={"bootstrap.servers": "b:9092", "sasl.password": "hunter2"},
                      prefix="p", format="debezium", tombstones=True, topic_config={"a.b": "1"},
                      transaction_topic="{prefix}.tx", topic_column="t", checkpoint=None)
    opts = {k.lower(): v for k, v in s.to_options().items()}   # Spark lower-cases keys
    assert KafkaSettings.parse(opts) == s
    assert "hunter2" not in repr(s)
    assert s.producer_config()["enable.idempotence"] == "true"
    assert s.producer_config()["acks"] == "all"


def test_settings_force_idempotence_and_name_topics_legally():
    s = KafkaSettings(producer={"bootstrap.servers": "b", "acks": "1", "enable.idempotence": "false"},
                      prefix="cdc")
    assert s.producer_config()["acks"] == "all"
    assert s.producer_config()["enable.idempotence"] == "true"
    assert s.resolve(s.topic, "shop", "order lines$") == "cdc.shop.order_lines_"
    with pytest.raises(ConfigError):
        s.resolve("{prefix}.{nope}")
    with pytest.raises(ConfigError):
        KafkaSettings.parse({"topic": "x"})
    with pytest.raises(ConfigError):
        KafkaSettings.parse({"kafka.bootstrap.servers": "b", "format": "avro"})


def test_topic_by_template_fixed_name_or_column():
    from mysqlcdc.sinks.kafka.producer import KafkaDeliveryError
    from mysqlcdc.sinks.kafka.topics import TopicRouter

    base = {"bootstrap.servers": "b"}
    assert TopicRouter(KafkaSettings(producer=base, prefix="p")).topic(ROW) == "p.shop.orders"
    assert TopicRouter(KafkaSettings(producer=base, topic="all-changes")).topic(ROW) == "all-changes"
    by_column = TopicRouter(KafkaSettings(producer=base, topic_column="route"))
    assert by_column.topic({**ROW, "route": "vip"}) == "vip"
    with pytest.raises(KafkaDeliveryError):
        by_column.topic({**ROW, "route": None})


def test_kafka_secrets_come_from_the_environment_and_are_never_dumped():
    from mysqlcdc.config import load_pipeline_from_dict
    from mysqlcdc.sinks.kafka.settings import from_sink_config

    cfg = load_pipeline_from_dict({
        "name": "p", "source": {"host": "h", "user": "u", "server_id": 9},
        "spark": {"checkpoint": "/tmp/ck"},
        "sinks": [{"kafka": {"bootstrap_servers": "b:9093",
                             "producer_config": {"security.protocol": "SASL_SSL"},
                             "producer_config_env": {"sasl.password": "KAFKA_PW"}}}],
    }, env={"KAFKA_PW": "hunter2"})
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())
    settings = from_sink_config(cfg.sinks[0], cfg.name)
    assert settings.producer_config()["sasl.password"] == "hunter2"
    assert "hunter2" not in repr(settings)
    with pytest.raises(Exception, match="KAFKA_PW"):
        load_pipeline_from_dict(cfg.model_dump(mode="json"), env={})


def test_key_change_halves_carry_each_others_key_in_headers():
    delete = {**ROW, "op": "d", "after": None, "moved_key": '{"id":5}'}
    create = {**ROW, "op": "c", "before": None, "key": '{"id":5}',
              "moved_key": '{"id":18446744073709551615}'}
    assert dict(headers(delete))["__debezium.newkey"] == b'{"id":5}'
    assert dict(headers(create))["__debezium.oldkey"] == b'{"id":18446744073709551615}'
    assert not any(k.startswith("__debezium") for k, _ in headers(ROW))
    assert json.loads(mysqlcdc_value(create))["moved_key"] == {"id": 18446744073709551615}


def test_snapshot_rows_carry_debeziums_snapshot_marks():
    from mysqlcdc.sinks.kafka.formats import snapshot_mark

    for query, mark in ((None, "true"), ("snapshot", "true"),
                        ("snapshot:last_in_table", "last_in_data_collection"),
                        ("snapshot:last", "last"), ("backfill", "incremental"),
                        ("backfill:last_in_table", "incremental")):
        row = {**ROW, "op": "r", "before": None, "query": query}
        value = json.loads(debezium_value(row, "x", 0))
        assert value["source"]["snapshot"] == mark and value["source"]["query"] is None
        assert snapshot_mark(row) == mark
    assert snapshot_mark({**ROW, "op": "c", "query": "snapshot:last"}) == "false"
