"""Kafka record encodings and sink settings: pure, no broker."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from mysqlcdc.errors import ConfigError
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.kafka.debezium import VERSION, DebeziumEncoder
from mysqlcdc.sinks.kafka.formats import (
    boundary_records, encode_key, headers, merge_tallies, mysqlcdc_value, tally_transactions,
)
from mysqlcdc.sinks.kafka.typemap import Modes
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


ORDERS = TableDef("shop", "orders", (
    ColumnDef("id", "bigint", unsigned=True, is_primary_key=True, nullable=False),
    ColumnDef("amount", "decimal", precision=10, scale=4),
    ColumnDef("note", "varchar", charset="utf8mb4", length=20)))


class _Fixed:
    def at(self, db, table, file, pos):
        return ORDERS


def _bare(modes: Modes = Modes()) -> DebeziumEncoder:
    return DebeziumEncoder(prefix="shop-cdc", schemas=False, modes=modes, definitions=_Fixed())


def debezium_value(row, name, now_ms):
    return _bare(Modes(decimal="string", bigint_unsigned="precise")).value(row, now_ms * 10**6)


def test_debezium_value_field_by_field():
    value = json.loads(debezium_value(ROW, "shop-cdc", now_ms=1700000000000))
    assert set(value) == {"before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns",
                          "transaction"}
    assert value["op"] == "u" and value["ts_ms"] == 1700000000000
    assert value["ts_us"] == 1700000000000000 and value["transaction"] is None
    assert value["before"]["amount"] == "-12.3400" and value["after"]["amount"] == "-1.0000"
    assert value["source"] == {
        "version": VERSION, "connector": "mysql", "name": "shop-cdc", "ts_ms": 1709214307123,
        "ts_us": 1709214307123000, "ts_ns": 1709214307123000000,
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
                      transaction_topic="{prefix}.tx", topic_column="t", checkpoint=None,
                      schemas=False, decimal_handling_mode="string", time_precision_mode="connect",
                      bigint_unsigned_handling_mode="precise", binary_handling_mode="hex",
                      schema_change_topic=None, history_dir="/ck/mysqlcdc-schema")
    opts = {k.lower(): v for k, v in s.to_options().items()}   # Spark lower-cases keys
    assert KafkaSettings.parse(opts) == s
    default = KafkaSettings(producer={"bootstrap.servers": "b"})
    assert KafkaSettings.parse(default.to_options()) == default
    assert "hunter2" not in repr(s)
    assert s.producer_config()["enable.idempotence"] == "true"
    assert s.producer_config()["acks"] == "all"


def test_messages_are_compressed_with_lz4_unless_the_user_chose():
    assert KafkaSettings(producer={"bootstrap.servers": "b"}).producer_config()[
        "compression.type"] == "lz4"
    for own in ({"compression.type": "none"}, {"compression.type": "zstd"}):
        config = KafkaSettings(producer={"bootstrap.servers": "b", **own}).producer_config()
        assert config["compression.type"] == own["compression.type"]
    # librdkafka's alias: ours would be a second, conflicting choice
    config = KafkaSettings(producer={"bootstrap.servers": "b",
                                     "compression.codec": "gzip"}).producer_config()
    assert config["compression.codec"] == "gzip" and "compression.type" not in config
    # a setting of the producer only, never of the admin and consumer clients
    assert "compression.type" not in KafkaSettings(
        producer={"bootstrap.servers": "b"}).admin_config()


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
    with pytest.raises(ConfigError, match="decimal_handling_mode"):
        KafkaSettings.parse({"kafka.bootstrap.servers": "b", "decimalHandlingMode": "exact"})


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
    # in the debezium format the header is the key payload with Debezium's encodings
    precise = _bare(Modes(bigint_unsigned="precise"))
    assert json.loads(precise.moved_key(create)) == {"id": "AP//////////"}
    assert json.loads(_bare().moved_key(create)) == {"id": -1}


def test_tombstones_default_to_debezium_s_and_can_be_set():
    base = {"bootstrap.servers": "b"}
    assert KafkaSettings(producer=base, format="debezium").send_tombstones
    assert not KafkaSettings(producer=base).send_tombstones
    assert not KafkaSettings(producer=base, format="debezium", tombstones=False).send_tombstones
    assert KafkaSettings(producer=base, tombstones=True).send_tombstones


def test_snapshot_reads_and_schema_changes_open_no_transaction():
    rows = [{**ROW, "txn_id": "t1", "seq": 1}, {**ROW, "op": "r", "txn_id": "snap:1", "seq": 2},
            {**ROW, "op": "s", "txn_id": "t2", "seq": 3}]
    assert list(tally_transactions(rows)) == ["t1"]


def test_snapshot_rows_carry_debeziums_snapshot_marks():
    from mysqlcdc.sinks.kafka.debezium import snapshot_mark

    for query, mark in ((None, "true"), ("snapshot", "true"),
                        ("snapshot:last_in_table", "last_in_data_collection"),
                        ("snapshot:last", "last"), ("backfill", "incremental"),
                        ("backfill:last_in_table", "incremental")):
        row = {**ROW, "op": "r", "before": None, "query": query}
        value = json.loads(debezium_value(row, "x", 0))
        assert value["source"]["snapshot"] == mark and value["source"]["query"] is None
        assert snapshot_mark(row) == mark
    assert snapshot_mark({**ROW, "op": "c", "query": "snapshot:last"}) == "false"


def test_value_and_headers_columns_replace_the_format_where_a_row_sets_them():
    from mysqlcdc.sinks.kafka.publish import row_encoder

    settings = KafkaSettings(producer={"bootstrap.servers": "b"}, value_column="message_value",
                             headers_column="message_headers")
    assert KafkaSettings.parse({**settings.to_options(), "kafka.bootstrap.servers": "b"}
                               ).value_column == "message_value"
    encode = row_encoder(settings)
    event = {**ROW, "op": "c", "before": None, "key": '"7"',
             "message_value": '{"reservation": 7}',
             "message_headers": '{"id": 12, "eventType": "Booked", "aggregateType": "r"}'}
    key, value, hdrs = encode(event)
    assert (key, value) == (b'"7"', b'{"reservation": 7}')
    assert dict(hdrs)["eventType"] == b"Booked" and dict(hdrs)["id"] == b"12"
    assert "seq" not in dict(hdrs)                        # no position headers by default
    plain = {**ROW, "message_value": None, "message_headers": None}
    assert encode(plain) == (encode_key(ROW), mysqlcdc_value(ROW), None)
    # with position_headers the sink's own headers stay next to the column's
    settings = KafkaSettings(producer={"bootstrap.servers": "b"}, value_column="message_value",
                             headers_column="message_headers", position_headers=True)
    assert KafkaSettings.parse({**settings.to_options(), "kafka.bootstrap.servers": "b"}
                               ).position_headers is True
    encode = row_encoder(settings)
    key, value, hdrs = encode(event)
    assert dict(hdrs)["eventType"] == b"Booked" and dict(hdrs)["seq"] == str(SEQ).encode()
    assert encode(plain) == (encode_key(ROW), mysqlcdc_value(ROW), headers(ROW))


def test_position_headers_are_off_by_default_and_key_changes_keep_theirs():
    from mysqlcdc.sinks.kafka.publish import row_encoder

    settings = KafkaSettings(producer={"bootstrap.servers": "b"})
    assert settings.position_headers is False
    assert KafkaSettings.parse(settings.to_options()).position_headers is False
    assert headers(ROW, position=False) is None
    delete = {**ROW, "op": "d", "moved_key": '{"id":5}'}
    assert headers(delete, position=False) == [("__debezium.newkey", b'{"id":5}')]
    encode = row_encoder(settings)
    assert encode(ROW)[2] is None
    assert [k for k, _ in encode(delete)[2]] == ["__debezium.newkey"]
    on = row_encoder(KafkaSettings(producer={"bootstrap.servers": "b"}, position_headers=True))
    assert [k for k, _ in on(ROW)[2]] == ["seq", "file", "pos", "row", "gtid"]


def _envelope_batch(rows: list[dict]):
    import pyarrow as pa

    from mysqlcdc.envelope.model import ARROW_SCHEMA

    return pa.RecordBatch.from_pylist([{**dict.fromkeys(ARROW_SCHEMA.names), **r} for r in rows],
                                      schema=ARROW_SCHEMA)


def test_a_batchs_messages_built_by_column_equal_the_row_encoders():
    from mysqlcdc.sinks.kafka.publish import batch_messages, row_encoder
    from mysqlcdc.sinks.kafka.topics import TopicRouter

    rows = [ROW,
            {**ROW, "op": "c", "before": None, "gtid": None, "db": 'we"ird\\db', "row": 0,
             "table": "täble\n", "txn_id": "f:1", "seq": Decimal(make_seq(12, 4, 0))},
            {**ROW, "op": "d", "after": None, "moved_key": '{"id":2}', "query": "x\x01\"y"},
            {**ROW, "op": "c", "before": None, "moved_key": '{"id":1}', "key": None},
            {**ROW, "op": "t", "before": None, "after": None, "key": None, "file": None,
             "pos": None, "row": None, "ts_ms": None}]
    for tombstones, position in ((None, True), (False, True), (None, False), (False, False)):
        settings = KafkaSettings(producer={"bootstrap.servers": "b"}, tombstones=tombstones,
                                 position_headers=position)
        batch = _envelope_batch(rows)
        topics, keys, values, hdrs, after = batch_messages(settings, batch)
        encode, router = row_encoder(settings), TopicRouter(settings)
        for i, row in enumerate(batch.to_pylist()):
            assert (keys[i], values[i], hdrs[i]) == encode(row)
            assert topics[i] == router.topic(row)
            assert after[i] == (settings.send_tombstones and row["op"] == "d")
    # every row with a GTID and no moved key (the headers' shorter path), of one binlog
    # file or of two
    one_file = [{**ROW, "pos": 100 + i, "row": i, "gtid": f"0-7-{i}"} for i in range(4)]
    two_files = [{**r, "file": f"mariadb-bin.00000{3 + r['row'] % 2}"} for r in one_file]
    settings = KafkaSettings(producer={"bootstrap.servers": "b"}, position_headers=True)
    encode = row_encoder(settings)
    for rows_ in (one_file, two_files):
        batch = _envelope_batch(rows_)
        _, keys, values, hdrs, _ = batch_messages(settings, batch)
        assert [(k, v, h) for k, v, h in zip(keys, values, hdrs)] == \
            [encode(row) for row in batch.to_pylist()]
        assert {h[1] for h in hdrs} == {("file", r["file"].encode()) for r in rows_}
    # what the column path does not cover goes row by row
    for other in ({"format": "debezium"}, {"value_column": "v"}, {"topic_column": "t"}):
        settings = KafkaSettings(producer={"bootstrap.servers": "b"}, **other)
        assert batch_messages(settings, _envelope_batch(rows)) is None


def test_a_ddl_that_leaves_no_table_under_a_name_is_a_truncate_in_its_topic():
    """A RENAME's old name (and a DROP) voids what the name's topic holds: a ``t`` at the
    DDL's place; every ``s`` still goes to the schema-change topic."""
    import pyarrow as pa

    from mysqlcdc.envelope.model import ARROW_SCHEMA
    from mysqlcdc.sinks.kafka.publish import split_schema_changes

    def row(op, table, pos, row_=0, after=None, before=None, key=None):
        return {**dict.fromkeys(ARROW_SCHEMA.names), "op": op, "db": "shop", "table": table,
                "before": before, "after": after, "key": key, "file": "b.000001", "pos": pos,
                "row": row_, "seq": Decimal(make_seq(1, pos, row_)), "query": "RENAME ..."}

    rows = [row("c", "t", 10, after='{"id":1}', key='{"id":1}'),
            row("s", "t", 20, 0, before='{"name":"t"}'),                        # t renamed away
            row("s", "_t_gho", 20, 1, before='{"n":1}'),                         # gho away
            row("s", "t", 20, 2, before='{"n":1}', after='{"name":"t"}'),        # gho becomes t
            row("r", "t", 30, after='{"id":2}', key='{"id":2}'),
            row("s", "x", 40, 0, before='{"name":"x"}', after='{"name":"x","v":1}')]  # ALTER
    batch = pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)
    settings = KafkaSettings(producer={"bootstrap.servers": "b:9092"}, prefix="p")
    changes, schema_rows = split_schema_changes(settings, batch)
    got = changes.to_pylist()
    assert [(r["op"], r["table"], r["pos"], r["row"]) for r in got] == [
        ("c", "t", 10, 0), ("t", "t", 20, 0), ("t", "_t_gho", 20, 1), ("r", "t", 30, 0)]
    assert all(r["before"] is None and r["after"] is None and r["key"] is None
               for r in got if r["op"] == "t")
    assert got[1]["query"] == "RENAME ..."
    assert [(r["table"], r["row"]) for r in schema_rows] == [("t", 0), ("_t_gho", 1), ("t", 2),
                                                             ("x", 0)]
