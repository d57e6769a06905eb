"""Debezium's field schemas and value encodings, type by type and mode by mode; schema
change events; transaction orders. Expected values are worked out by hand from
Debezium MySQL's documented mappings (docs/KAFKA.md), not from our code."""

from __future__ import annotations

import base64
import json
import pytest

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.kafka.connect import SOURCE
from mysqlcdc.sinks.kafka.debezium import (TXN_ORDER, TXN_TABLE_ORDER, DebeziumEncoder,
                                           KafkaSchemaUnknownError)
from mysqlcdc.sinks.kafka.formats import mysqlcdc_value
from mysqlcdc.sinks.kafka.schemachange import schema_change_messages
from mysqlcdc.sinks.kafka.txnorder import orders
from mysqlcdc.sinks.kafka.typemap import Modes, column_codec, decimal_bytes

pytestmark = pytest.mark.unit

DEFAULT = Modes()
OTHER = Modes(decimal="string", time="connect", bigint_unsigned="precise", binary="hex")


def col(type_: str, **kw) -> ColumnDef:
    return ColumnDef("c", type_, **kw)


def encode(c: ColumnDef, value, modes: Modes = DEFAULT):
    codec = column_codec(c, modes)
    return value if codec.convert is None else codec.convert(value)


def schema_of(c: ColumnDef, modes: Modes = DEFAULT) -> dict:
    return column_codec(c, modes).schema


@pytest.mark.parametrize("c, type_", [
    (col("tinyint"), "int8"), (col("tinyint", unsigned=True), "int16"),
    (col("smallint"), "int16"), (col("smallint", unsigned=True), "int32"),
    (col("mediumint"), "int32"), (col("mediumint", unsigned=True), "int32"),
    (col("int"), "int32"), (col("int", unsigned=True), "int64"), (col("bigint"), "int64"),
    (col("float", column_type="float"), "float"), (col("float", column_type="float(7,3)"), "double"),
    (col("double"), "double"), (col("varchar"), "string"), (col("longtext"), "string"),
])
def test_basic_types_take_debezium_s_literal_types(c, type_):
    assert schema_of(c) == {"type": type_, "optional": True}
    assert column_codec(c, DEFAULT).convert is None          # the envelope's value is kept


def test_optional_follows_nullability():
    assert schema_of(col("int", nullable=False)) == {"type": "int32", "optional": False}


def test_bigint_unsigned_long_wraps_and_precise_is_an_exact_decimal():
    c = col("bigint", unsigned=True)
    assert schema_of(c) == {"type": "int64", "optional": True}
    assert encode(c, 18446744073709551615) == -1                # documented: silently negative
    assert encode(c, 9223372036854775807) == 9223372036854775807
    assert schema_of(c, OTHER) == {
        "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1, "parameters": {"scale": "0", "connect.decimal.precision": "20"}}
    assert encode(c, 18446744073709551615, OTHER) == "AP//////////"   # 00 ff*8


@pytest.mark.parametrize("unscaled, b64", [
    (0, "AA=="), (127, "fw=="), (128, "AIA="), (-128, "gA=="), (-129, "/38="),
    (-1234, "+y4="), (99999, "AYaf"),
])
def test_decimal_bytes_are_minimal_big_endian_twos_complement(unscaled, b64):
    assert decimal_bytes(unscaled) == b64
    raw = base64.b64decode(b64)
    assert int.from_bytes(raw, "big", signed=True) == unscaled


def test_decimal_modes():
    c = col("decimal", precision=10, scale=2)
    assert schema_of(c) == {
        "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}}
    assert encode(c, "-12.34") == "+y4="
    assert encode(c, "0.00") == "AA=="
    big = col("decimal", precision=65, scale=30)
    text = "-" + "9" * 35 + "." + "9" * 30
    raw = base64.b64decode(encode(big, text))
    assert int.from_bytes(raw, "big", signed=True) == int(text.replace(".", ""))   # 65 digits
    assert schema_of(c, OTHER) == {"type": "string", "optional": True}
    assert encode(c, "-12.34", OTHER) == "-12.34"
    double = Modes(decimal="double")
    assert schema_of(c, double) == {"type": "double", "optional": True}
    assert encode(c, "-12.34", double) == -12.34


def test_temporal_adaptive_time_microseconds():
    assert schema_of(col("date")) == {"type": "int32", "optional": True,
                                      "name": "io.debezium.time.Date", "version": 1}
    assert encode(col("date"), "2024-02-29") == 19782
    assert encode(col("date"), "1969-12-31") == -1
    assert schema_of(col("time", fsp=6))["name"] == "io.debezium.time.MicroTime"
    assert schema_of(col("time", fsp=0))["type"] == "int64"
    assert encode(col("time", fsp=6), "12:34:56.789012") == 45296789012
    assert encode(col("time"), "-838:59:59") == -3020399000000
    assert encode(col("time", fsp=2), "-00:00:00.50") == -500000
    for fsp, name in ((0, "Timestamp"), (3, "Timestamp"), (4, "MicroTimestamp"),
                      (6, "MicroTimestamp")):
        assert schema_of(col("datetime", fsp=fsp)) == {
            "type": "int64", "optional": True, "name": f"io.debezium.time.{name}", "version": 1}
    assert encode(col("datetime", fsp=0), "2018-06-20 06:37:03") == 1529476623000   # documented
    assert encode(col("datetime", fsp=3), "2024-02-29 13:45:07.123") == 1709214307123
    assert encode(col("datetime", fsp=6), "1969-12-31 23:59:59.999999") == -1
    assert schema_of(col("year")) == {"type": "int32", "optional": True,
                                      "name": "io.debezium.time.Year", "version": 1}
    assert encode(col("year"), 2024) == 2024


def test_temporal_connect_mode_uses_kafka_connect_s_logical_types():
    assert schema_of(col("date"), OTHER)["name"] == "org.apache.kafka.connect.data.Date"
    assert schema_of(col("time", fsp=6), OTHER) == {
        "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time",
        "version": 1}
    assert encode(col("time", fsp=6), "12:34:56.789012", OTHER) == 45296789
    assert encode(col("time", fsp=3), "-00:00:01.500", OTHER) == -1500
    assert schema_of(col("datetime", fsp=6), OTHER)["name"] == \
        "org.apache.kafka.connect.data.Timestamp"
    assert encode(col("datetime", fsp=6), "1969-12-31 23:59:59.999999", OTHER) == -1   # floor


def test_timestamp_is_a_zoned_iso_string_in_every_mode():
    for modes in (DEFAULT, OTHER):
        assert schema_of(col("timestamp", fsp=3), modes) == {
            "type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
            "version": 1}
    assert encode(col("timestamp", fsp=3), "2018-06-20T13:37:03.500Z") == \
        "2018-06-20T13:37:03.500Z"


def test_zero_dates_are_null_or_the_epoch():
    assert encode(col("date"), "0000-00-00") is None
    assert encode(col("date", nullable=False), "0000-00-00") == 0
    assert encode(col("date"), "2024-02-30") is None                 # invalid
    assert encode(col("datetime", fsp=0), "0000-00-00 00:00:00") is None
    assert encode(col("datetime", fsp=0, nullable=False), "0000-00-00 00:00:00") == 0
    assert encode(col("timestamp", fsp=0), "0000-00-00 00:00:00") is None
    assert encode(col("timestamp", fsp=0, nullable=False), "0000-00-00 00:00:00") == \
        "1970-01-01T00:00:00Z"


def test_bits_boolean_or_little_endian_bytes():
    assert schema_of(col("bit", length=1)) == {"type": "boolean", "optional": True}
    assert encode(col("bit", length=1), 1) is True
    assert encode(col("bit", length=1), 0) is False
    c = col("bit", length=10)
    assert schema_of(c) == {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits",
                            "version": 1, "parameters": {"length": "10"}}
    assert encode(c, 0b1000000001) == "AQI="                          # 01 02
    assert encode(col("bit", length=64), 2**64 - 1) == "//////////8="
    assert encode(col("bit", length=17), 1) == "AQAA"                 # padded to 3 bytes


def test_binary_modes():
    c = col("varbinary", charset="binary")
    envelope = base64.b64encode(b"\x00\xff>?").decode()              # "AP8+Pw=="
    assert schema_of(c) == {"type": "bytes", "optional": True}
    assert encode(c, envelope) == envelope
    assert schema_of(c, OTHER) == {"type": "string", "optional": True}
    assert encode(c, envelope, OTHER) == "00ff3e3f"
    assert encode(c, envelope, Modes(binary="base64")) == envelope
    assert encode(c, envelope, Modes(binary="base64-url-safe")) == "AP8-Pw=="


def test_enum_set_json():
    e = col("enum", enum_values=("red", "green"))
    assert schema_of(e) == {"type": "string", "optional": True, "name": "io.debezium.data.Enum",
                            "version": 1, "parameters": {"allowed": "red,green"}}
    s = col("set", set_values=("a", "b", "c"))
    assert schema_of(s)["name"] == "io.debezium.data.EnumSet"
    assert schema_of(s)["parameters"] == {"allowed": "a,b,c"}
    assert encode(s, ["a", "c"]) == "a,c" and encode(s, []) == ""
    j = col("json")
    assert schema_of(j) == {"type": "string", "optional": True, "name": "io.debezium.data.Json",
                            "version": 1}
    assert json.loads(encode(j, {"k": [1, 2.5, "s"]})) == {"k": [1, 2.5, "s"]}
    assert encode(j, "text") == '"text"'


def test_spatial_types():
    wkb = "0101000000000000000000f03f0000000000000040"               # POINT(1 2)
    g = col("geometry")
    assert schema_of(g)["name"] == "io.debezium.data.geometry.Geometry"
    assert [f["field"] for f in schema_of(g)["fields"]] == ["wkb", "srid"]
    assert encode(g, "e6100000" + wkb) == {
        "wkb": base64.b64encode(bytes.fromhex(wkb)).decode(), "srid": 4326}
    assert encode(g, "00000000" + wkb)["srid"] is None
    p = col("point")
    assert schema_of(p)["name"] == "io.debezium.data.geometry.Point"
    assert encode(p, "00000000" + wkb) == {
        "x": 1.0, "y": 2.0, "wkb": base64.b64encode(bytes.fromhex(wkb)).decode(), "srid": None}


# --- whole events ------------------------------------------------------------

T = TableDef("shop", "t", (
    ColumnDef("id", "int", is_primary_key=True, nullable=False),
    ColumnDef("d", "date"), ColumnDef("v", "varchar", charset="utf8mb4", length=5)))
ROW = {"op": "c", "db": "shop", "table": "t", "before": None,
       "after": '{"id":7,"d":"2024-02-29","v":"x"}', "key": '{"id":7}', "ts_ms": 1000,
       "server_id": 1, "gtid": "0-1-9", "txn_id": "0-1-9", "file": "b.000001", "pos": 400,
       "row": 0, "seq": 10**24 + 400 * 10**12, "query": None, "moved_key": None}


class Defs:
    def __init__(self, definition):
        self.definition = definition

    def at(self, db, table, file, pos):
        return self.definition


def test_event_with_schemas_is_what_the_json_converter_writes():
    enc = DebeziumEncoder(prefix="pfx", schemas=True, modes=DEFAULT, definitions=Defs(T))
    key = json.loads(enc.key(ROW))
    assert key == {"schema": {"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"}], "optional": False,
        "name": "pfx.shop.t.Key"}, "payload": {"id": 7}}
    value = json.loads(enc.value({**ROW, TXN_ORDER: 2, TXN_TABLE_ORDER: 1}, 5 * 10**18))
    envelope = value["schema"]
    assert (envelope["name"], envelope["version"], envelope["optional"]) == \
        ("pfx.shop.t.Envelope", 2, False)
    assert [f["field"] for f in envelope["fields"]] == [
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
    before = envelope["fields"][0]
    assert (before["name"], before["optional"]) == ("pfx.shop.t.Value", True)
    assert [f["field"] for f in before["fields"]] == ["id", "d", "v"]
    assert envelope["fields"][2] == {**SOURCE, "field": "source"}
    assert envelope["fields"][3]["name"] == "event.block"
    payload = value["payload"]
    assert payload["after"] == {"id": 7, "d": 19782, "v": "x"}
    assert payload["transaction"] == {"id": "0-1-9", "total_order": 2, "data_collection_order": 1}
    assert payload["ts_ms"] == 5 * 10**12 and payload["ts_ns"] == 5 * 10**18


def test_snapshot_reads_carry_no_transaction_and_say_snapshot():
    enc = DebeziumEncoder(prefix="pfx", schemas=False, modes=DEFAULT, definitions=Defs(T))
    value = json.loads(enc.value({**ROW, "op": "r", TXN_ORDER: 1, TXN_TABLE_ORDER: 1}, 0))
    assert value["transaction"] is None and value["source"]["snapshot"] == "true"


def test_a_row_without_a_definition_is_a_named_error():
    enc = DebeziumEncoder(prefix="pfx", schemas=True, modes=DEFAULT, definitions=Defs(None))
    with pytest.raises(KafkaSchemaUnknownError, match="shop.t"):
        enc.value(ROW, 0)
    truncate = {**ROW, "op": "t", "after": None, "key": None}
    assert json.loads(enc.value(truncate, 0))["payload"]["op"] == "t"
    other = TableDef("shop", "t", (ColumnDef("id", "int", is_primary_key=True),
                                   ColumnDef("d", "date")))
    with pytest.raises(KafkaSchemaUnknownError, match="'v'"):
        DebeziumEncoder(prefix="p", schemas=True, modes=DEFAULT,
                        definitions=Defs(other)).value(ROW, 0)


def test_the_named_error_survives_spark_s_text():
    from mysqlcdc.errors import from_text

    text = ("py4j...\nmysqlcdc.errors.KafkaSchemaUnknownError: [KAFKA_SCHEMA_UNKNOWN] no "
            "definition of shop.t\n  hint: run it through mysqlcdc run")
    err = from_text(text)
    assert isinstance(err, KafkaSchemaUnknownError) and err.code == "KAFKA_SCHEMA_UNKNOWN"


def test_the_debezium_format_needs_the_schema_history_folder(tmp_path):
    from mysqlcdc.errors import ConfigError
    from mysqlcdc.sinks.kafka.writer import KafkaDataSource

    options = {"kafka.bootstrap.servers": "b:1", "format": "debezium",
               "checkpointLocation": str(tmp_path)}
    with pytest.raises(ConfigError, match="schemaHistory"):
        KafkaDataSource(options).streamWriter(None, False)
    assert KafkaDataSource({**options, "schemaHistory": str(tmp_path)}).streamWriter(None, False)


def test_tables_without_conversions_embed_the_envelope_text():
    plain = TableDef("shop", "t", (ColumnDef("id", "int", is_primary_key=True),
                                   ColumnDef("v", "varchar")))
    enc = DebeziumEncoder(prefix="p", schemas=False, modes=DEFAULT, definitions=Defs(plain))
    after = '{"id":1,"v":"a \\u00e9"}'
    assert after.encode() in enc.value({**ROW, "after": after}, 0)


def _s(table: str, before: TableDef | None, after: TableDef | None, pos: int, query: str):
    return {**ROW, "op": "s", "table": table, "key": None, "pos": pos, "query": query,
            "seq": 10**24 + pos * 10**12,
            "before": None if before is None else json.dumps(before.to_json()),
            "after": None if after is None else json.dumps(after.to_json())}


def test_schema_change_events_group_a_statement_per_database():
    t2 = TableDef("shop", "u", T.columns, charset="utf8mb4")
    rows = [_s("t", T, None, 900, "DROP TABLE t, u"), _s("u", t2, None, 900, "DROP TABLE t, u"),
            _s("t", None, T, 500, "CREATE TABLE t (...)")]
    msgs = schema_change_messages(rows, format="debezium", prefix="pfx", schemas=True,
                                  now_ms=7, envelope_value=mysqlcdc_value)
    assert len(msgs) == 2
    key, value = (json.loads(x) for x in msgs[0])
    assert key["payload"] == {"databaseName": "shop"}
    assert key["schema"]["name"] == "io.debezium.connector.mysql.SchemaChangeKey"
    assert value["schema"]["name"] == "io.debezium.connector.mysql.SchemaChangeValue"
    p = value["payload"]
    assert (p["databaseName"], p["ddl"], p["ts_ms"]) == ("shop", "CREATE TABLE t (...)", 7)
    [change] = p["tableChanges"]
    assert (change["type"], change["id"]) == ("CREATE", '"shop"."t"')
    assert change["table"]["primaryKeyColumnNames"] == ["id"]
    assert change["table"]["columns"][0] == {
        "name": "id", "jdbcType": 4, "nativeType": None, "typeName": "INT",
        "typeExpression": "INT", "charsetName": None, "length": None, "scale": None,
        "position": 1, "optional": False, "autoIncremented": False, "generated": False,
        "comment": None, "defaultValueExpression": None, "enumValues": None}
    assert change["table"]["columns"][2]["jdbcType"] == 12
    assert change["table"]["columns"][2]["charsetName"] == "utf8mb4"
    drop = json.loads(msgs[1][1])["payload"]
    assert [(c["type"], c["id"]) for c in drop["tableChanges"]] == [
        ("DROP", '"shop"."t"'), ("DROP", '"shop"."u"')]
    assert drop["source"]["table"] == "t,u"
    bare = schema_change_messages(rows, format="debezium", prefix="pfx", schemas=False,
                                  now_ms=7, envelope_value=mysqlcdc_value)
    assert json.loads(bare[0][0]) == {"databaseName": "shop"}
    assert json.loads(bare[0][1])["tableChanges"][0]["type"] == "CREATE"
    ours = schema_change_messages(rows, format="mysqlcdc", prefix="pfx", schemas=True,
                                  now_ms=7, envelope_value=mysqlcdc_value)
    assert [json.loads(v)["op"] for _, v in ours] == ["s", "s", "s"]


def test_a_rename_is_one_alter_naming_both_tables():
    renamed = TableDef("shop", "t2", T.columns)
    rows = [_s("t", T, None, 700, "RENAME TABLE t TO t2"),
            _s("t2", T, renamed, 700, "RENAME TABLE t TO t2")]
    [(_, value)] = schema_change_messages(rows, format="debezium", prefix="p", schemas=False,
                                          now_ms=0, envelope_value=mysqlcdc_value)
    [change] = json.loads(value)["tableChanges"]
    assert (change["type"], change["id"]) == ("ALTER", '"shop"."t","shop"."t2"')
    assert json.loads(value)["source"]["table"] == "t,t2"


def test_transaction_orders_count_per_transaction_and_per_table():
    ops = ["c", "u", "s", "d", "c", "r", "c"]
    txns = ["a", "a", "a", "a", "b", "snap", "b"]
    tables = ["x", "y", "x", "x", "x", "x", "x"]
    total, per_table = orders(ops, txns, ["db"] * 7, tables)
    assert total == [1, 2, None, 3, 1, None, 2]
    assert per_table == [1, 1, None, 2, 1, None, 2]
