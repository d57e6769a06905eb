"""Pure parts of snapshots: value fragments, the result-set splitter, signals, the
offset's snapshot state, chunk keys and literals, the seq of snapshot rows."""

from __future__ import annotations

import json
import struct

import numpy as np
import orjson
import pyarrow as pa
import pytest

from mysqlcdc.binlog.values.float32 import float32_value
from mysqlcdc.capture.backfill import _canonical, _entry
from mysqlcdc.capture.signals import (Signal, SignalTap, forget_signals, parse_requests,
                                      read_signals)
from mysqlcdc.capture.snapshot import (CHUNK_SLOTS, ChunkTask, SnapshotTable, _literal,
                                       _range_where, _seqs, decode_bound, encode_bound,
                                       snapshot_seq, snapshot_table)
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.envelope.textrows import fragments, object_texts
from mysqlcdc.errors import SnapshotTableError
from mysqlcdc.protocol.connection import ConnectionSettings
from mysqlcdc.protocol.resultset import split_columns
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.types import BinlogPosition

pytestmark = pytest.mark.unit


def _bin(values) -> pa.Array:
    return pa.array([None if v is None else v.encode() for v in values], pa.binary())


def _texts(arr: pa.Array) -> list:
    return [None if v is None else v.decode() for v in arr.to_pylist()]


# --- value fragments --------------------------------------------------------------

def test_string_fragments_are_what_orjson_writes():
    values = ['plain', 'quo"te', 'back\\slash', 'ümlaut ✓ 😀', '', 'tab\there', 'nl\n',
              '\x01\x1f', None, '\u2028 sep', 'del\x7f']
    got = _texts(fragments(_bin(values), "string"))
    assert got == [None if v is None else orjson.dumps(v).decode() for v in values]


def test_invalid_utf8_takes_the_reference_encoder():
    arr = pa.array([b"ok", b"\xff\xfe"], pa.binary())
    got = _texts(fragments(arr, "string"))
    assert got == ['"ok"', '"\\\\xff\\\\xfe"']       # as the binlog decoder writes it


@pytest.mark.parametrize("bits", [0x3DCCCCCD, 0x4B800001, 0x3EAAAAAB, 0x7F7FFFFF, 0x00000001,
                                  0x80000000, 0x00000000, 0xB4210FB0, 0x7F800000])
def test_float_fragments_recover_the_32_bits(bits):
    """A FLOAT arrives as the server's text of its double widening: the fragment is the
    binlog decoder's text of the same four bytes (shortest round-trip decimal)."""
    raw = struct.pack("<I", bits)
    value = struct.unpack("<f", raw)[0]
    text = repr(value) if value == value else "NaN"
    got = _texts(fragments(_bin([text, None]), "float"))
    assert got == [orjson.dumps(float32_value(raw)).decode(), None]


def test_double_fragments_are_orjson_of_the_double():
    values = ["0.30000000000000004", "5e-324", "-1.7976931348623157e308", "1e100",
              "-0.0000001500000053056283", "3", None]
    got = _texts(fragments(_bin(values), "double"))
    assert got == [None if v is None else orjson.dumps(float(v)).decode() for v in values]


def test_sets_numbers_quoted_and_json():
    assert _texts(fragments(_bin(["a,b", "", "x", None]), "set")) == [
        '["a","b"]', "[]", '["x"]', None]
    assert _texts(fragments(_bin(["-12", "18446744073709551615"]), "number")) == [
        "-12", "18446744073709551615"]
    assert _texts(fragments(_bin(["2024-02-29", None]), "quoted")) == ['"2024-02-29"', None]
    assert _texts(fragments(_bin(["2024-02-29 13:45:07.12", "0000-00-00 00:00:00", None]),
                            "timestamp")) == ['"2024-02-29T13:45:07.12Z"', '"0000-00-00 00:00:00"',
                                              None]
    assert _texts(fragments(_bin(['{"b": [1, 2.5], "a": null}']), "json")) == [
        '{"b":[1,2.5],"a":null}']
    with pytest.raises(ValueError):
        fragments(_bin(["x"]), "nope")


def test_object_texts_join_names_and_nulls():
    frags = [_bin(["1", "2"]), _bin(['"x"', None])]
    got = object_texts(["id", 'we"ird'], frags).to_pylist()
    assert got == ['{"id":1,"we\\"ird":"x"}', '{"id":2,"we\\"ird":null}']
    assert [json.loads(t) for t in got] == [{"id": 1, 'we"ird': "x"}, {"id": 2, 'we"ird': None}]


# --- the result-set splitter ------------------------------------------------------

def _lenenc(value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 251:
        return bytes([n]) + value
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + value
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + value
    return b"\xfe" + n.to_bytes(8, "little") + value


def test_split_columns_reads_every_length_encoding():
    rows = [[b"1", None, b"x" * 300], [b"", b"y" * 70000, None], [b"22", b"z", b""]]
    data, starts = bytearray(), []
    for row in rows:
        payload = b"".join(_lenenc(v) for v in row)
        data += len(payload).to_bytes(3, "little") + b"\x01"
        starts.append(len(data))
        data += payload
    cols = split_columns(bytes(data), np.array(starts, np.int64), 3)
    assert [c.to_pylist() for c in cols] == [list(col) for col in zip(*rows)]


# --- signals --------------------------------------------------------------------

def _sig(data, type_="execute-snapshot") -> Signal:
    return Signal((1, 4, 0), "id1", type_, data)


def test_signal_requests_follow_debeziums_format():
    reqs, why = parse_requests(_sig({"data-collections": ["s.a", "s.b"], "additional-conditions":
                                     [{"data-collection": "s.a", "filter": "id < 5"}]}), "p")
    assert why is None and [(r.table, r.where) for r in reqs] == [("s.a", "id < 5"), ("s.b", None)]
    reqs, _ = parse_requests(_sig({"data-collections": ["s.a"], "additional-condition": "x=1"}), "p")
    assert reqs[0].where == "x=1"
    assert parse_requests(_sig({"data-collections": ["s.a"], "pipeline": "other"}), "p") == ([], None)
    assert parse_requests(_sig({}, "stop-snapshot"), "p")[0][0].table is None
    for bad in ({}, {"data-collections": "s.a"}, {"_invalid": "{"},
                {"data-collections": ["s.a"], "additional-conditions": [{"filter": 1}]}):
        assert parse_requests(_sig(bad), "p")[1]
    assert "unknown signal type" in parse_requests(_sig({"data-collections": ["s.a"]}, "log"), "p")[1]


def _envelope_batch(rows: list[dict]) -> pa.RecordBatch:
    cols = {f.name: [r.get(f.name) for r in rows] for f in ARROW_SCHEMA}
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in ARROW_SCHEMA],
                                      schema=ARROW_SCHEMA)


def test_the_tap_writes_inserted_signals_once_and_drops_them_from_the_output(tmp_path):
    image = json.dumps({"id": "x1", "type": "execute-snapshot",
                        "data": json.dumps({"data-collections": ["s.a"]})})
    rows = [{"op": "c", "db": "m", "table": "sig", "after": image, "file": "b.000003", "pos": 90,
             "row": 0},
            {"op": "u", "db": "m", "table": "sig", "after": image, "file": "b.000003", "pos": 95,
             "row": 0},
            {"op": "c", "db": "s", "table": "a", "after": "{}", "file": "b.000003", "pos": 99,
             "row": 0}]
    tap = SignalTap("m", "sig", str(tmp_path))
    out = list(tap.tap(iter([_envelope_batch(rows)])))
    assert [r["table"] for b in out for r in b.to_pylist()] == ["a"]
    again = list(SignalTap("m", "sig", str(tmp_path), keep=True).tap(iter([_envelope_batch(rows)])))
    assert sum(len(b) for b in again) == 3                       # captured too: kept
    found = read_signals(tmp_path, None, (3, 1000, 0))
    assert [(s.key, s.id, s.data) for s in found] == [((3, 90, 0), "x1", {"data-collections": ["s.a"]})]
    assert read_signals(tmp_path, [3, 90, 0], (3, 1000, 0)) == []
    assert read_signals(tmp_path, None, (3, 90, 0)) == []         # not before its batch ends
    forget_signals(tmp_path, (3, 89, 0))
    assert len(read_signals(tmp_path, None, (3, 1000, 0))) == 1
    forget_signals(tmp_path, (3, 90, 0))                          # once an offset holds it
    assert read_signals(tmp_path, None, (3, 1000, 0)) == []


# --- offsets, keys, literals, seq --------------------------------------------------

def test_the_snapshot_state_has_one_text():
    a = _canonical({"plan": [], "chunk": 3, "tables": ["s.a"], "done": 0, "signals": None})
    b = _canonical({"tables": ["s.a"], "after": None, "chunk": 3, "plan": [], "reset": None})
    assert json.dumps(a) == json.dumps(b) == \
        '{"tables": ["s.a"], "after": null, "chunk": 3, "plan": []}'
    assert _entry("s.a") == ("s.a", None, "snapshot")
    assert _entry({"table": "s.a", "where": "x", "kind": "backfill"}) == ("s.a", "x", "backfill")


def _col(name, data_type, **kw) -> ColumnDef:
    return ColumnDef(name=name, data_type=data_type, **kw)


def test_chunk_keys_prefer_the_users_then_the_primary_then_a_unique_key(caplog):
    d = TableDef("s", "t", (_col("a", "int", nullable=False), _col("b", "varchar"),
                            _col("c", "int", nullable=True)))
    assert snapshot_table(d, {"ub": ("b",), "ua": ("a",)}).key == ("a",)   # b is nullable
    assert snapshot_table(d, {"ub": ("b",)}).key == ()
    assert "one unchunked read task" in caplog.text
    t = snapshot_table(d, {}, ("c",))
    assert t.key == ("c",) and t.nullable
    with pytest.raises(SnapshotTableError, match="no column"):
        snapshot_table(d, {}, ("nope",))
    pk = TableDef("s", "p", (_col("x", "int", is_primary_key=True, nullable=False),
                             _col("y", "int", is_primary_key=True, nullable=False)))
    assert snapshot_table(pk, {"PRIMARY": ("y", "x")}).key == ("y", "x")    # index order


def test_literals_compare_like_the_column():
    assert _literal(_col("i", "int"), "42") == "42" and _literal(_col("i", "int"), 7) == "7"
    assert _literal(_col("d", "decimal"), b"-12.50") == "-12.50"
    assert _literal(_col("s", "varchar"), "it's") == "'it\\'s'"
    assert _literal(_col("b", "varbinary"), b"\x00\xff") == "X'00ff'"
    assert _literal(_col("i", "int"), "1; DROP") == "'1; DROP'"      # never bare text
    t = SnapshotTable(TableDef("s", "t", (_col("a", "int"), _col("b", "varchar"))), ("a", "b"))
    where = _range_where(t, ("1", "x"), ("5", "y"), False, "v > 0")
    assert where == (" WHERE ((`a` > 1) OR (`a` = 1 AND `b` > 'x')) AND NOT ((`a` > 5) OR "
                     "(`a` = 5 AND `b` > 'y')) AND (v > 0)")
    nulls = SnapshotTable(t.definition, ("b",), nullable=True)
    assert _range_where(nulls, None, None, True, None) == " WHERE (`b` IS NULL)"
    assert _range_where(nulls, ("q",), None, False, None) == " WHERE ((`b` > 'q')) AND `b` IS NOT NULL"
    assert decode_bound(encode_bound((b"abc", b"\xff", 3))) == ("abc", b"\xff", 3)


def test_snapshot_seqs_sort_between_the_changes_around_them():
    high = BinlogPosition.of("b.000002", 500)
    task = ChunkTask(ConnectionSettings("h", user="u"), 0,
                     SnapshotTable(TableDef("s", "t", (_col("a", "int"),)), ()), None, None, 7)
    seqs = [int(v) for v in _seqs(task, high, 999_999, 3).to_pylist()]
    assert seqs == [snapshot_seq(high, 7, 999_999), snapshot_seq(high, 8, 0), snapshot_seq(high, 8, 1)]
    before = 2 * 10**24 + 499 * 10**12 + 2 * 5 + 1               # the last row event before H
    after = 2 * 10**24 + 500 * 10**12                            # an event at H
    assert before < min(seqs) and max(seqs) < after
    assert snapshot_seq(high, CHUNK_SLOTS + 3, 0) == snapshot_seq(high, 3, 0)
