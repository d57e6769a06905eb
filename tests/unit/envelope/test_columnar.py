"""Columnar row images (``binlog.rowscan`` + ``envelope.columnar``) against the
reference path (``rows.compile_rows_decoder`` to dicts, orjson to text): the same
envelope batches byte for byte, on random row data of every column type, with and
without NULLs, FULL and MINIMAL images, corrupt values included; and a value the
reference rejects is a named error carrying its event's position."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.columns import ColumnSpec
from mysqlcdc.binlog.rows import compile_rows_decoder
from mysqlcdc.binlog.rowscan import RawRows, columnar_capable, compile_rows_scanner
from mysqlcdc.binlog.values.float32 import float32_value
from mysqlcdc.envelope.builder import EnvelopeBuilder, TxnContext
from mysqlcdc.envelope.columnar import _float_kernel, make_context
from mysqlcdc.errors import MalformedEventError
from tests.unit.binlog.test_layouts import _image, _specs

pytestmark = pytest.mark.unit

_REFERENCE_ERRORS = (ValueError, IndexError, KeyError, struct.error, OverflowError, NotImplementedError)


def _txn() -> TxnContext:
    t = TxnContext()
    t.gtid, t.txn_id, t.ts_ms, t.server_id = "0-1-7", "0-1-7", 1700000000000, 1
    return t


def _batch(events, deferred: bool) -> pa.RecordBatch:
    b = EnvelopeBuilder()
    row = 0
    for i, (cols, kind, present, after, data, keys) in enumerate(events):
        if deferred:
            rows, pos = compile_rows_scanner(cols, kind, present, after if kind == "u" else None)(
                data, 0, len(data))
            assert pos == len(data) and rows.__class__ is RawRows
        else:
            rows, _ = compile_rows_decoder(cols, kind, present, after if kind == "u" else None)(
                data, 0, len(data))
        b.add_rows(kind, "db", "t", rows, keys, _txn(), "bin.000001", 1, 100 + i, 0, None, 30)
        row += len(rows)
    return b.take()


def _reference_ok(cols, kind, present, after, data) -> bool:
    try:
        rows, pos = compile_rows_decoder(cols, kind, present, after if kind == "u" else None)(
            data, 0, len(data))
    except _REFERENCE_ERRORS:
        return False
    return pos == len(data)


@pytest.mark.parametrize("seed", range(8))
def test_columnar_batches_equal_the_reference(seed):
    rng = random.Random(seed)
    specs = [s for s in _specs() if s.type != C.MYSQL_TYPE_JSON]
    for round_ in range(12):
        cols = tuple(rng.sample(specs, rng.randint(1, 24)))
        names = [c.name for c in cols]
        events, failing = [], []
        for _ in range(rng.randint(1, 8)):
            kind = rng.choice("cud")
            minimal = rng.random() < 0.25
            present = tuple(i for i in range(len(cols)) if not minimal or rng.random() < 0.6) or (0,)
            after = (tuple(i for i in range(len(cols)) if rng.random() < 0.5) or (0,)) if minimal else present
            keys = rng.choice((None, (), tuple(rng.sample(names, min(len(names), rng.randint(1, 2))))))
            nulls = rng.choice((0.0, 0.2, 0.9))
            data = b""
            for _ in range(rng.randint(1, 6)):
                data += _image(rng, cols, present, nulls)
                if kind == "u":
                    data += _image(rng, cols, after, nulls)
            event = (cols, kind, present, after, data, keys)
            assert columnar_capable(cols, present)
            if _reference_ok(cols, kind, present, after, data):
                events.append(event)
            else:
                failing.append(event)
        if events:
            want, got = _batch(events, False), _batch(events, True)
            assert got.equals(want), (seed, round_, _first_difference(want, got))
        for event in failing:
            # a value the reference rejects: a named error at the event, or an image
            # that does not end where the event does (the scanner's caller checks that)
            cols, kind, present, after, data, keys = event
            try:
                rows, pos = compile_rows_scanner(cols, kind, present, after if kind == "u" else None)(
                    data, 0, len(data))
            except _REFERENCE_ERRORS:
                continue
            if pos != len(data):
                continue
            with pytest.raises(MalformedEventError) as err:
                _batch([event], True)
            assert err.value.pos == 100 and err.value.event_type == 30


def _first_difference(want: pa.RecordBatch, got: pa.RecordBatch) -> str:
    for name in want.schema.names:
        a, b = want.column(name).to_pylist(), got.column(name).to_pylist()
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"{name}[{i}]: {x!r} != {y!r}"
    return "schemas or lengths differ"


def test_deferred_and_decoded_events_interleave_in_row_order():
    cols = (ColumnSpec("id", C.MYSQL_TYPE_LONG, 0), ColumnSpec("s", C.MYSQL_TYPE_VARCHAR, 40),
            ColumnSpec("j", C.MYSQL_TYPE_JSON, 4, codec=None))
    rng = random.Random(1)
    b_ref, b_mix = EnvelopeBuilder(), EnvelopeBuilder()
    for i in range(30):
        shape = (0, 1) if i % 3 else (0, 1, 2)       # with the JSON column: decoded, not deferred
        data = b""
        for _ in range(rng.randint(1, 4)):
            text = rng.choice(("plain", 'q"uote\\', "é€😀", "")).encode()
            data += b"\x00" + rng.randbytes(4) + bytes([len(text)]) + text
            if len(shape) == 3:
                data += b"\x02\x00\x00\x00\x04\x01"    # JSON true
        ref, _ = compile_rows_decoder(cols, "c", shape)(data, 0, len(data))
        if columnar_capable(cols, shape):
            mixed, _ = compile_rows_scanner(cols, "c", shape)(data, 0, len(data))
        else:
            mixed = ref
        for b, rows in ((b_ref, ref), (b_mix, mixed)):
            b.add_rows("c", "db", "t", rows, ("id",), _txn(), "bin.000001", 1, 4 + i, 0)
    assert not columnar_capable(cols, (0, 1, 2))
    assert b_mix.take().equals(b_ref.take())


def test_strings_needing_escapes_equal_the_reference():
    """Quotes and backslashes anywhere in a value (first, last, doubled, next to
    multi-byte characters), empty strings, NULLs and control characters: the
    escapes written by the kernel are orjson's."""
    cols = (ColumnSpec("id", C.MYSQL_TYPE_LONG, 0), ColumnSpec("s", C.MYSQL_TYPE_VARCHAR, 400),
            ColumnSpec("t", C.MYSQL_TYPE_BLOB, 2))
    rng = random.Random(11)
    pieces = ['"', "\\", "a", "é", "😀", " ", "\\\"", '""', "\n", "\x1f", "/"]
    events = []
    for i in range(40):
        data = b""
        for _ in range(rng.randint(1, 5)):
            data += bytes([rng.choice((0, 0, 2, 4))])          # null bitmap: s or t NULL
            data += struct.pack("<i", i)
            for width in (2, 2):
                text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))).encode()
                data += len(text).to_bytes(width, "little") + text
        events.append((cols, rng.choice("cd"), (0, 1, 2), (0, 1, 2), _nulled(cols, data), ("id",)))
    got, want = _batch(events, True), _batch(events, False)
    assert got.equals(want), _first_difference(want, got)
    assert any('\\"' in a for a in got.column("after").to_pylist() if a)


def _nulled(cols, data: bytes) -> bytes:
    """Images as written above with the values of the columns their null bitmap marks
    NULL taken out (those take no bytes in a row image)."""
    out, pos = b"", 0
    while pos < len(data):
        nb = data[pos]
        out += data[pos:pos + 5]
        pos += 5
        for j in (1, 2):
            n = int.from_bytes(data[pos:pos + 2], "little")
            if not nb >> j & 1:
                out += data[pos:pos + 2 + n]
            pos += 2 + n
    return out


def test_update_whose_before_image_has_no_columns():
    cols = (ColumnSpec("id", C.MYSQL_TYPE_LONG, 0), ColumnSpec("s", C.MYSQL_TYPE_VARCHAR, 40))
    data = b"".join(b"\x00" + struct.pack("<i", i) + b"\x02hi" for i in range(3))  # after images only
    event = (cols, "u", (), (0, 1), data, None)
    got = _batch([event], True)
    assert got.equals(_batch([event], False))
    assert got.column("before").to_pylist() == ["{}"] * 3


def test_one_tables_inserts_updates_and_deletes_keep_their_rows():
    """One table, one shape: each image column comes from a single converted part, which
    covers every row (key) or some of them (before, after); the rows keep their order."""
    cols = (ColumnSpec("id", C.MYSQL_TYPE_LONG, 0), ColumnSpec("s", C.MYSQL_TYPE_VARCHAR, 40))

    def image(i: int, text: bytes) -> bytes:
        return b"\x00" + struct.pack("<i", i) + bytes([len(text)]) + text

    full = (0, 1)
    events = [(cols, "c", full, full, image(1, b"a") + image(2, b"b"), ("id",)),
              (cols, "d", full, full, image(1, b"a"), ("id",)),
              (cols, "u", full, full, image(2, b"b") + image(2, b"B"), ("id",)),
              (cols, "c", full, full, image(3, b"c"), ("id",))]
    got = _batch(events, True)
    assert got.equals(_batch(events, False))
    assert got.column("op").to_pylist() == ["c", "c", "d", "u", "c"]
    assert got.column("before").to_pylist() == [
        None, None, '{"id":1,"s":"a"}', '{"id":2,"s":"b"}', None]
    assert got.column("after").to_pylist() == [
        '{"id":1,"s":"a"}', '{"id":2,"s":"b"}', None, '{"id":2,"s":"B"}', '{"id":3,"s":"c"}']
    assert got.column("key").to_pylist() == ['{"id":1}', '{"id":2}', '{"id":1}', '{"id":2}',
                                             '{"id":3}']


def test_float_kernel_equals_float32_value_bit_for_bit():
    rng = random.Random(5)
    words = [rng.getrandbits(32) for _ in range(20000)]
    words += [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 1, 0x007FFFFF, 0x00800000,
              0x3F800000, 0x3DCCCCCD, 0x49742400, 0x4974_23FF, 0x3727C5AC, 0x3727C5AB]
    words += [struct.unpack("<I", struct.pack("<f", v))[0]
              for v in (rng.uniform(-1e6, 1e6) for _ in range(5000))]
    data = b"".join(struct.pack("<I", w) for w in words)
    import numpy as np
    off = np.arange(len(words), dtype=np.int64) * 4
    frags, redo = _float_kernel(make_context([data]), off, None, None, np.zeros(len(words), bool))
    import orjson
    for i, w in enumerate(words):
        if redo[i]:
            continue
        assert frags[i].as_py() == orjson.dumps(float32_value(struct.pack("<I", w))), hex(w)
    # values of the usual magnitudes are the kernel's own; the reference decides the rest
    assert not redo[-5000:].any()
