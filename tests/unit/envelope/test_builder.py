"""EnvelopeBuilder's fast paths (one-row events, one-column keys written directly, seq
written into the decimal128 buffer) against the plain definition: every image and key
through ``_encode``, keys through ``_key_of``, seq through pyarrow's own conversion."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mysqlcdc.envelope.builder import EnvelopeBuilder, TxnContext, _encode, _key_of, _seq_array
from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.types import SEQ_FILE, SEQ_POS

pytestmark = pytest.mark.unit

_IMAGES = [
    {"id": 1, "v": "a"}, {"id": -2**63, "v": None}, {"id": 2**64 - 1, "v": 1.5},
    {"id": 2**70, "v": "past 64 bits: the standard library encodes"}, {"id": "k\"é\n😀", "v": [1]},
    {"id": None, "v": 0.1}, {"id": 1e16, "v": {"x": 1}}, {"id": True, "v": False}, {"v": "no key"},
]


def _expected(op, rows, key_columns, first_row, base):
    """(op, before, after, key, moved_key, row, seq) by the envelope's definition: an
    update whose key changed is a delete of the old key and a create of the new one."""
    out = []
    for i, (before, after) in enumerate(rows):
        b = None if before is None else _encode(before)
        a = None if after is None else _encode(after)
        if key_columns:
            key = _encode(_key_of(key_columns, before, after, op))
            old = None if before is None else _encode(_key_of(key_columns, before, after, "d"))
        else:
            key = b if op == "d" else a
            old = b
        seq = base + 2 * i
        if op == "u" and old is not None and old != key:
            out.append(("d", b, None, old, key, first_row + i, seq))
            out.append(("c", None, a, key, old, first_row + i, seq + 1))
        else:
            out.append((op, b, a, key, None, first_row + i, seq))
    return out


def _rows(op, images):
    if op == "c":
        return [(None, i) for i in images]
    if op == "d":
        return [(i, None) for i in images]
    return [(images[k - 1], i) for k, i in enumerate(images)]


@pytest.mark.parametrize("op", ["c", "u", "d"])
@pytest.mark.parametrize("key_columns", [None, ("id",), ("v",), ("id", "v"), ("missing",)])
@pytest.mark.parametrize("n", [1, 3, len(_IMAGES)])
def test_rows_match_the_plain_definition(op, key_columns, n):
    images = _IMAGES[:n] if n < len(_IMAGES) else _IMAGES
    rows = _rows(op, images)
    if key_columns == ("id",) and op == "u":
        rows = [({"id": 7, "v": "before"}, {"v": "after, MINIMAL"})] + rows   # key from the other image
    ctx = TxnContext()
    ctx.gtid, ctx.txn_id, ctx.ts_ms, ctx.server_id = "0-1-5", "0-1-5", 1234, 9
    b = EnvelopeBuilder()
    nxt = b.add_rows(op, "db", "t", rows, key_columns, ctx, "bin.000042", 42, 777, 3, query="q")
    batch = b.take()
    assert nxt == 3 + len(rows) and batch.schema == ARROW_SCHEMA
    want = _expected(op, rows, key_columns, 3, 42 * SEQ_FILE + 777 * SEQ_POS + 2 * 3)
    got = list(zip(*(batch.column(c).to_pylist()
                     for c in ("op", "before", "after", "key", "moved_key", "row", "seq"))))
    assert [(o, b_, a, k, m, r, int(s)) for o, b_, a, k, m, r, s in got] == want
    assert set(batch.column("query").to_pylist()) == {"q"}


def test_seq_buffer_equals_pyarrow_conversion():
    firsts = (0, 10**24 + 5 * 10**12, 999_999 * 10**24 + 2**40 * 10**12 + 12345, 10**38 - 5,
              -(10**38) + 1)
    counts = (1, 3, 2, 3, 1)
    want = [f + 2 * j for f, c in zip(firsts, counts) for j in range(c)]
    assert _seq_array(firsts, counts).equals(pa.array(want, type=pa.decimal128(38, 0)))


def test_seq_limbs_carry_into_the_high_word():
    firsts = (0, 2**64 - 2, 5 * 2**64 + 2**64 - 1, 10**24 + 7, 10**38 - 5)
    counts = (2, 4, 2, 1, 3)
    want = [f + 2 * j for f, c in zip(firsts, counts) for j in range(c)]
    assert _seq_array(firsts, counts).equals(pa.array(want, type=pa.decimal128(38, 0)))


def test_events_and_rows_mix_and_empty_batches():
    ctx = TxnContext()
    b = EnvelopeBuilder()
    assert b.take().num_rows == 0 and b.take().schema == ARROW_SCHEMA
    assert b.add_rows("c", "db", "t", [], ("id",), ctx, "bin.000001", 1, 4, 0) == 0
    b.add_rows("c", "db", "t", [(None, {"id": 1})] * 3, ("id",), ctx, "bin.000001", 1, 100, 0)
    b.add_event("s", "db", "t", None, {"table": "t"}, "ALTER TABLE t ADD c INT", ctx,
                "bin.000001", 1, 200)
    ctx.gtid = "0-1-2"
    b.add_rows("d", "db2", "u", [({"id": 2}, None)], None, ctx, "bin.000002", 2, 300, 5)
    assert len(b) == 5
    rows = b.take().to_pylist()
    assert [(r["op"], r["db"], r["pos"], r["row"], r["gtid"], r["key"]) for r in rows] == [
        ("c", "db", 100, 0, None, '{"id":1}'), ("c", "db", 100, 1, None, '{"id":1}'),
        ("c", "db", 100, 2, None, '{"id":1}'), ("s", "db", 200, 0, None, None),
        ("d", "db2", 300, 5, "0-1-2", '{"id":2}')]
    assert [int(r["seq"]) for r in rows] == [
        10**24 + 100 * 10**12, 10**24 + 100 * 10**12 + 2, 10**24 + 100 * 10**12 + 4,
        10**24 + 200 * 10**12, 2 * 10**24 + 300 * 10**12 + 10]
    assert rows[3]["query"] == "ALTER TABLE t ADD c INT" and rows[3]["after"] == '{"table":"t"}'
    assert len(b) == 0 and b.take().num_rows == 0
