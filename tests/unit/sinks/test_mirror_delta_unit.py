"""Delta mirror and history mode without a server: the Arrow type mapping, images to
Arrow a column at a time, history versions, the stepped idempotent commit, config."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from pydantic import ValidationError

from mysqlcdc.config.models import PipelineConfig
from mysqlcdc.schema.model import ColumnDef as C, TableDef as T
from mysqlcdc.sinks.deltacommit import applied_step, commit_once
from mysqlcdc.sinks.mirror import from_sink_config
from mysqlcdc.sinks.mirror.arrowvalues import UnsupportedType, arrow_type, images_to_arrow
from mysqlcdc.sinks.mirror.history import Change, history_def, scd2, utc_text, version_row

pytestmark = pytest.mark.unit

ID = C("id", "int", is_primary_key=True, column_type="int(11)")


def test_arrow_types():
    assert arrow_type(C("a", "tinyint")) == pa.int8()
    assert arrow_type(C("a", "tinyint", unsigned=True)) == pa.int16()
    assert arrow_type(C("a", "int", unsigned=True)) == pa.int64()
    assert arrow_type(C("a", "bigint", unsigned=True)) == pa.decimal128(20, 0)
    assert arrow_type(C("a", "bit", length=64)) == pa.decimal128(20, 0)
    assert arrow_type(C("a", "datetime", fsp=3)) == pa.timestamp("us")
    assert arrow_type(C("a", "timestamp")) == pa.timestamp("us", tz="UTC")
    assert arrow_type(C("a", "varchar", charset="binary")) == pa.binary()
    assert arrow_type(C("a", "point")) == pa.binary()
    assert arrow_type(C("a", "json")) == pa.string()
    with pytest.raises(UnsupportedType, match="38 digits"):
        arrow_type(C("a", "decimal", precision=65, scale=30))


def test_images_to_arrow_column_at_a_time():
    d = T("d", "t", (ID, C("u", "bigint", unsigned=True), C("p", "decimal", precision=6, scale=2),
                     C("da", "date"), C("ts", "timestamp", fsp=3), C("t", "time"),
                     C("s", "set"), C("j", "json"), C("b", "blob"), C("y", "year"),
                     C("x", "tinyint")))
    images = [json.dumps(r) for r in (
        {"id": 1, "u": 18446744073709551615, "p": "-1.50", "da": "0000-00-00",
         "ts": "2024-02-29T13:45:07.123Z", "t": "-01:00:00.5", "s": ["a", "b"],
         "j": {"k": [1]}, "b": "AP8=", "y": 2024, "x": -128},
        {"id": 2, "da": "2024-02-29", "s": [], "j": None},
        {"id": 3, "da": "2024-02-30"})]                 # an invalid date: value by value
    got = images_to_arrow(d, images).to_pylist()
    one, two, three = got
    assert one["u"] == Decimal(18446744073709551615) and one["p"] == Decimal("-1.50")
    assert one["da"] is None and two["da"] == date(2024, 2, 29) and three["da"] is None
    assert one["ts"] == datetime(2024, 2, 29, 13, 45, 7, 123000, tzinfo=timezone.utc)
    assert one["t"] == -3_600_500_000 and one["s"] == "a,b" and two["s"] == ""
    assert json.loads(one["j"]) == {"k": [1]} and two["j"] is None
    assert one["b"] == b"\x00\xff" and one["y"] == 2024 and one["x"] == -128
    assert three["u"] is None and three["s"] is None        # missing fields are null


def test_a_value_that_does_not_fit_raises():
    d = T("d", "t", (ID, C("x", "tinyint")))
    with pytest.raises(pa.ArrowInvalid):
        images_to_arrow(d, [json.dumps({"id": 1, "x": 300})])


def test_scd2_versions_and_closes():
    ch = [Change("c", '{"id": 1, "n": 1}', '{"id": 1}', Decimal(10), 1000),
          Change("u", '{"id": 1, "n": 2}', '{"id": 1}', Decimal(20), 2000),
          Change("d", None, '{"id": 2}', Decimal(15), 1500),
          Change("d", None, '{"id": 1}', Decimal(30), 3000),
          Change("c", '{"id": 1, "n": 9}', '{"id": 1}', Decimal(40), 4000)]
    closes, versions = scd2(list(reversed(ch)))                 # order comes from seq
    assert [(c.key, c.seq) for c in closes] == [('{"id": 1}', 10), ('{"id": 2}', 15)]
    assert [(json.loads(v.after)["n"], v.valid_from_seq, v.valid_to_seq, v.is_current)
            for v in versions] == [(1, 10, 20, False), (2, 20, 30, False), (9, 40, None, True)]
    row = version_row(versions[0])
    assert row["valid_from"] == "1970-01-01T00:00:01.000Z" and row["valid_to_seq"] == "20"
    assert utc_text(1709214307123) == "2024-02-29T13:45:07.123Z"


def test_history_def_keys_and_name_clash():
    h = history_def(T("d", "t", (ID, C("n", "int"))))
    assert h.primary_key == ("id", "valid_from_seq")
    assert [c.name for c in h.columns][-5:] == ["valid_from", "valid_to", "valid_from_seq",
                                               "valid_to_seq", "is_current"]
    with pytest.raises(ValueError, match="is_current"):
        history_def(T("d", "t", (ID, C("is_current", "int"))))


def test_commit_once_steps(tmp_path):
    """Several commits of one batch to one table: each is skipped once the table reached
    its step; a later batch, or a stepless commit, is not a step of this one."""
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "t")
    data = pa.table({"id": [1]})

    def write(props):
        write_deltalake(uri, data, mode="append", commit_properties=props)
    assert commit_once(uri, "app", 3, write, step=Decimal(10))
    assert not commit_once(uri, "app", 3, write, step=Decimal(10))      # replayed step
    assert not commit_once(uri, "app", 3, write, step=Decimal(5))       # an earlier one
    assert commit_once(uri, "app", 3, write, step=Decimal(11))          # the next step
    assert applied_step(DeltaTable(uri), "app", 3) == Decimal(11)
    assert not commit_once(uri, "app", 2, write, step=Decimal(99))      # an older batch
    assert commit_once(uri, "other-app", 0, write)                      # another writer
    assert not commit_once(uri, "app", 3, write, step=Decimal(10))
    assert commit_once(uri, "app", 4, write)
    assert not commit_once(uri, "app", 4, write, step=Decimal(1))       # whole batch done
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 4


def _cfg(sink):
    return PipelineConfig.model_validate(
        {"name": "x", "source": {"host": "h", "user": "u", "server_id": 5},
         "spark": {"checkpoint": "/tmp/ck"}, "sinks": [{"mirror": sink}]},
        context={"env": {}, "base_dir": "/base"})


def test_config_delta_and_history():
    cfg = _cfg({"target": "delta", "path": "lake", "mode": "history", "compact_every": "1h"})
    s = from_sink_config(cfg.sinks[0], "x", "/tmp/h", 2)
    assert s.path == "/base/lake" and s.mode == "history" and s.compact_seconds == 3600
    assert s.app_id("q1") == "mysqlcdc/x/2-mirror/q1" and "storage" in s.unavailable_hint
    for bad, text in (({"target": "delta"}, "path is required"),
                      ({"target": "redis", "mode": "history"}, "mode history"),
                      ({"target": "postgresql", "user": "u", "path": "x"}, "only used"),
                      ({"target": "postgresql", "user": "u", "compact_every": 5}, "delta"),
                      ({"target": "delta", "path": "s3://b/x"}, "object-store")):
        with pytest.raises(ValidationError, match=text):
            _cfg(bad)
