"""Envelope rows <-> typed event dicts: the Python type of each MySQL type, and values that
come back unchanged as exactly their text."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import orjson
import pytest

from mysqlcdc.envelope.values import encode_value, image_decoder, image_encoder
from mysqlcdc.schema.history import SchemaHistory
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.transforms.events import Definitions, from_events, to_events
from mysqlcdc.types import BinlogPosition

from tests.unit.transforms.rows import batch, row

pytestmark = pytest.mark.unit

TABLE = TableDef("shop", "t", (
    ColumnDef("id", "bigint", unsigned=True, is_primary_key=True),
    ColumnDef("amount", "decimal", precision=12, scale=4),
    ColumnDef("f", "double"), ColumnDef("b", "bit", length=8), ColumnDef("y", "year"),
    ColumnDef("d", "date"), ColumnDef("dt", "datetime", fsp=3), ColumnDef("dt0", "datetime", fsp=0),
    ColumnDef("ts", "timestamp", fsp=6), ColumnDef("tm", "time", fsp=2),
    ColumnDef("s", "varchar", charset="utf8mb4"), ColumnDef("blob", "blob", charset="binary"),
    ColumnDef("e", "enum", enum_values=("a", "b")), ColumnDef("set", "set", set_values=("x", "y", "z")),
    ColumnDef("j", "json"), ColumnDef("g", "point"), ColumnDef("zero", "date"),
))
IMAGE = {"id": 18446744073709551615, "amount": "-12.3400", "f": 0.1, "b": 5, "y": 2024,
         "d": "2024-02-29", "dt": "2024-02-29 13:45:07.120", "dt0": "2024-02-29 13:45:07",
         "ts": "2024-02-29T13:45:07.000001Z", "tm": "-838:59:59.50", "s": "ü😀\"x",
         "blob": "AAEC/w==", "e": "b", "set": ["x", "z"], "j": {"k": [1, 2.5, None]},
         "g": "000000000101000000000000000000f03f0000000000000040", "zero": "0000-00-00"}


def test_python_types():
    typed = image_decoder(TABLE)(dict(IMAGE))
    assert typed["id"] == 18446744073709551615
    assert typed["amount"] == Decimal("-12.3400")
    assert typed["d"] == date(2024, 2, 29)
    assert typed["dt"] == datetime(2024, 2, 29, 13, 45, 7, 120000)
    assert typed["ts"] == datetime(2024, 2, 29, 13, 45, 7, 1, tzinfo=timezone.utc)
    assert typed["tm"] == -timedelta(hours=838, minutes=59, seconds=59, microseconds=500000)
    assert typed["blob"] == b"\x00\x01\x02\xff"
    assert typed["set"] == {"x", "z"}
    assert typed["j"] == {"k": [1, 2.5, None]}
    assert typed["g"] == bytes.fromhex(IMAGE["g"])
    assert typed["zero"] == "0000-00-00"
    assert image_encoder(TABLE)(typed) == IMAGE


def test_encoding_by_column_type():
    col = {c.name: c for c in TABLE.columns}
    assert encode_value(Decimal("1.5"), col["amount"]) == "1.5000"
    assert encode_value(datetime(2024, 1, 1, 1, 2, 3), col["dt"]) == "2024-01-01 01:02:03.000"
    naive = datetime(2024, 1, 1, 1, 2, 3)
    assert encode_value(naive, col["ts"]) == "2024-01-01T01:02:03.000000Z"
    cet = timezone(timedelta(hours=1))
    assert encode_value(datetime(2024, 1, 1, 1, 2, 3, tzinfo=cet), col["ts"]) == \
        "2024-01-01T00:02:03.000000Z"
    assert encode_value({"z", "x", "y"}, col["set"]) == ["x", "y", "z"]
    assert encode_value(timedelta(hours=30), col["tm"]) == "30:00:00.00"
    assert encode_value(b"\x01", None) == "AQ=="
    with pytest.raises(TypeError):
        encode_value(object(), None)


def test_rows_round_trip_exactly(tmp_path):
    history = SchemaHistory(tmp_path)
    history.bootstrap(BinlogPosition.of("mariadb-bin.000001", 4), {("shop", "t"): TABLE})
    defs = Definitions(str(tmp_path))
    r = row("u", "t", before=IMAGE, after={**IMAGE, "amount": "1.0000"}, key={"id": IMAGE["id"]})
    original = batch(r)
    events = to_events(original, defs)
    assert events[0]["after"]["amount"] == Decimal("1.0000")
    assert isinstance(events[0]["seq"], int)
    back = from_events(events, original.schema, defs)
    assert back.to_pylist() == original.to_pylist()          # byte for byte
    events[0]["after"]["amount"] = Decimal("2.5")
    events[0]["after"]["d"] = date(2025, 1, 1)
    changed = orjson.loads(from_events(events, original.schema, defs).column("after")[0].as_py())
    assert changed["amount"] == "2.5000" and changed["d"] == "2025-01-01"


def test_without_history_values_stay_json(tmp_path):
    events = to_events(batch(row("c", "t", after=IMAGE)), Definitions(None))
    assert events[0]["after"] == IMAGE
