"""The layout row decoders (struct runs per null bitmap, value caches) against the
per-column branching decoders they replace: same rows, same end position, and an
error from one exactly when the other fails too, on random row data of every type,
with and without NULLs, FULL and MINIMAL images."""

from __future__ import annotations

import random
import struct

import pytest

from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog import rows as R
from mysqlcdc.binlog.columns import ColumnSpec
from mysqlcdc.binlog.rows import compile_branching_decoder, compile_rows_decoder
from mysqlcdc.binlog.values.decimal import decimal_size

pytestmark = pytest.mark.unit

_LABELS = tuple(f"l{i}" for i in range(12))


def _specs() -> list[ColumnSpec]:
    s = []
    for t in (C.MYSQL_TYPE_TINY, C.MYSQL_TYPE_SHORT, C.MYSQL_TYPE_INT24, C.MYSQL_TYPE_LONG,
              C.MYSQL_TYPE_LONGLONG):
        s += [ColumnSpec(f"i{t}", t, 0, False), ColumnSpec(f"u{t}", t, 0, True)]
    s += [ColumnSpec("f", C.MYSQL_TYPE_FLOAT, 4), ColumnSpec("d", C.MYSQL_TYPE_DOUBLE, 8),
          ColumnSpec("y", C.MYSQL_TYPE_YEAR, 0), ColumnSpec("nul", C.MYSQL_TYPE_NULL, 0),
          ColumnSpec("date", C.MYSQL_TYPE_DATE, 0), ColumnSpec("ndate", C.MYSQL_TYPE_NEWDATE, 0),
          ColumnSpec("ts", C.MYSQL_TYPE_TIMESTAMP, 0), ColumnSpec("ot", C.MYSQL_TYPE_TIME, 0),
          ColumnSpec("odt", C.MYSQL_TYPE_DATETIME, 0)]
    for fsp in range(7):
        s += [ColumnSpec(f"dt{fsp}", C.MYSQL_TYPE_DATETIME2, fsp),
              ColumnSpec(f"ts{fsp}", C.MYSQL_TYPE_TIMESTAMP2, fsp),
              ColumnSpec(f"t{fsp}", C.MYSQL_TYPE_TIME2, fsp)]
    for p, sc in ((1, 0), (5, 2), (9, 9), (10, 0), (18, 9), (20, 6), (38, 10), (65, 30)):
        s.append(ColumnSpec(f"dec{p}_{sc}", C.MYSQL_TYPE_NEWDECIMAL, p << 8 | sc))
    for bits in (1, 7, 8, 9, 16, 33, 64):
        s.append(ColumnSpec(f"bit{bits}", C.MYSQL_TYPE_BIT, (bits // 8) << 8 | bits % 8))
    for meta in (1, 2):
        s += [ColumnSpec(f"e{meta}", C.MYSQL_TYPE_ENUM, meta, enum_labels=_LABELS[:5]),
              ColumnSpec(f"en{meta}", C.MYSQL_TYPE_ENUM, meta)]
    for meta, labels in ((1, _LABELS[:4]), (1, _LABELS[:8]), (2, _LABELS[:12]), (3, _LABELS),
                         (4, _LABELS), (8, _LABELS), (1, None)):
        s.append(ColumnSpec(f"s{meta}_{len(labels or ())}", C.MYSQL_TYPE_SET, meta, set_labels=labels))
    for codec in ("utf-8", "cp1252", None):
        s += [ColumnSpec(f"vc{codec}", C.MYSQL_TYPE_VARCHAR, 40, codec=codec),
              ColumnSpec(f"vcl{codec}", C.MYSQL_TYPE_VARCHAR, 300, codec=codec),
              ColumnSpec(f"vs{codec}", C.MYSQL_TYPE_VAR_STRING, 20, codec=codec),
              ColumnSpec(f"ch{codec}", C.MYSQL_TYPE_STRING, 12, codec=codec)]
        for meta in (1, 2, 3, 4):
            s.append(ColumnSpec(f"b{meta}{codec}", C.MYSQL_TYPE_BLOB, meta, codec=codec))
    s += [ColumnSpec("geo", C.MYSQL_TYPE_GEOMETRY, 4, codec=None),
          ColumnSpec("vec", C.MYSQL_TYPE_VECTOR, 4, codec=None),
          ColumnSpec("json", C.MYSQL_TYPE_JSON, 4, codec=None)]
    return s


_SIZES = {C.MYSQL_TYPE_TINY: 1, C.MYSQL_TYPE_SHORT: 2, C.MYSQL_TYPE_INT24: 3, C.MYSQL_TYPE_LONG: 4,
          C.MYSQL_TYPE_LONGLONG: 8, C.MYSQL_TYPE_FLOAT: 4, C.MYSQL_TYPE_DOUBLE: 8,
          C.MYSQL_TYPE_YEAR: 1, C.MYSQL_TYPE_NULL: 0, C.MYSQL_TYPE_DATE: 3,
          C.MYSQL_TYPE_NEWDATE: 3, C.MYSQL_TYPE_TIMESTAMP: 4, C.MYSQL_TYPE_TIME: 3,
          C.MYSQL_TYPE_DATETIME: 8}


def _fraction_bytes(rng: random.Random, fsp: int) -> bytes:
    """A stored fraction: random bytes, or a valid value, or one at an edge of the valid range."""
    n = (fsp + 1) // 2
    valid = (0, 100, 10000, 1000000)[n]
    pick = rng.random()
    if pick < 0.4:
        return rng.randbytes(n)
    if pick < 0.8:
        return rng.randrange(valid or 1).to_bytes(n, "big")
    return rng.choice((0, 1, valid - 1, valid, valid + 1, (1 << 8 * n) - 1)).to_bytes(n, "big") if n else b""


def _value_bytes(rng: random.Random, col: ColumnSpec) -> bytes:
    """Bytes of one value in the row format: random, mostly valid."""
    t, meta = col.type, col.meta
    if t in _SIZES:
        return rng.randbytes(_SIZES[t])
    if t == C.MYSQL_TYPE_DATETIME2:
        head = (0x8000000000 + ((rng.randint(1000, 9999) * 13 + rng.randint(0, 12)) << 22
                | rng.randint(0, 31) << 17 | rng.randint(0, 23) << 12 | rng.randint(0, 59) << 6
                | rng.randint(0, 59)))
        return head.to_bytes(5, "big") + _fraction_bytes(rng, meta)
    if t == C.MYSQL_TYPE_TIMESTAMP2:
        secs = rng.choice((0, rng.getrandbits(31)))
        return secs.to_bytes(4, "big") + _fraction_bytes(rng, meta)
    if t == C.MYSQL_TYPE_TIME2:
        return rng.randbytes(3 + (meta + 1) // 2)
    if t == C.MYSQL_TYPE_NEWDECIMAL:
        size = decimal_size(meta >> 8, meta & 0xFF)
        if rng.random() < 0.1:
            return rng.randbytes(size)                       # mostly out of range
        return bytes([rng.choice((0x80, 0x7F))]) + bytes(rng.choice((0, 0xFF)) for _ in range(size - 1))
    if t == C.MYSQL_TYPE_BIT:
        return rng.randbytes((meta >> 8) + (1 if meta & 0xFF else 0))
    if t in (C.MYSQL_TYPE_ENUM, C.MYSQL_TYPE_SET):
        return rng.randbytes(meta)
    if t in (C.MYSQL_TYPE_VARCHAR, C.MYSQL_TYPE_VAR_STRING, C.MYSQL_TYPE_STRING):
        body = rng.choice(("abc", "é€😀", "")).encode() + rng.randbytes(rng.randint(0, 6))
        return len(body).to_bytes(1 if meta < 256 else 2, "little") + body
    if t == C.MYSQL_TYPE_VECTOR:
        body = b"".join(struct.pack("<f", rng.uniform(-1e6, 1e6)) for _ in range(rng.randint(0, 3)))
    elif t == C.MYSQL_TYPE_JSON:
        body = rng.choice((b"\x04\x01", b"\x05\x07\x00", b"\x0c\x02hi", rng.randbytes(3)))
    else:
        body = rng.randbytes(rng.randint(0, 9))
    return len(body).to_bytes(meta, "little") + body


def _image(rng: random.Random, cols, present, nulls: float) -> bytes:
    bits, out = 0, b""
    for j, ci in enumerate(present):
        if rng.random() < nulls:
            bits |= 1 << j
        else:
            out += _value_bytes(rng, cols[ci])
    nb = (len(present) + 7) // 8
    if len(present) % 8 and rng.random() < 0.5:
        bits |= -1 << len(present) & ((1 << nb * 8) - 1)    # servers set the unused bits
    return bits.to_bytes(nb, "little") + out


def _canon(value):
    """Comparable form: floats by their bits (NaN equals itself), containers recursively."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return ("dict", [(k, _canon(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canon(v) for v in value])
    return (type(value).__name__, value)


def _outcome(decoder, data: bytes, end: int):
    try:
        rows, pos = decoder(data, 0, end)
    except (ValueError, IndexError, KeyError, struct.error, OverflowError, NotImplementedError):
        return "error"
    return "error" if pos != end else _canon(rows)


@pytest.mark.parametrize("seed", range(6))
def test_layout_decoders_equal_branching_decoders(seed):
    rng = random.Random(seed)
    specs = _specs()
    for round_ in range(40):
        cols = tuple(rng.sample(specs, rng.randint(1, 24)))
        kind = rng.choice("cud")
        minimal = rng.random() < 0.3
        present = tuple(i for i in range(len(cols)) if not minimal or rng.random() < 0.6) or (0,)
        after = (tuple(i for i in range(len(cols)) if rng.random() < 0.5) or (0,)) if minimal else present
        fast = compile_rows_decoder(cols, kind, present, after if kind == "u" else None)
        slow = compile_branching_decoder(cols, kind, present, after if kind == "u" else None)
        for nulls in (0.0, 0.2, 0.9):
            data = b""
            for _ in range(rng.randint(1, 5)):
                data += _image(rng, cols, present, nulls)
                if kind == "u":
                    data += _image(rng, cols, after, nulls)
            for cut in (len(data), len(data) - 1):
                for _ in range(2):                   # again, with the value caches warm
                    assert _outcome(fast, data, cut) == _outcome(slow, data, cut), (seed, round_, cols)


def test_many_null_bitmaps_fall_back_to_the_branching_image():
    cols = tuple(ColumnSpec(f"c{i}", C.MYSQL_TYPE_LONG, 0) for i in range(9))
    fast = compile_rows_decoder(cols, "c", tuple(range(9)))
    slow = compile_branching_decoder(cols, "c", tuple(range(9)))
    rng = random.Random(7)
    data = b""
    for bits in rng.sample(range(1, 512), R._LAYOUTS_PER_IMAGE + 40):
        data += bits.to_bytes(2, "little") + b"".join(
            rng.randbytes(4) for j in range(9) if not bits >> j & 1)
    assert fast(data, 0, len(data)) == slow(data, 0, len(data))


def test_value_caches_stay_bounded(monkeypatch):
    monkeypatch.setattr(R, "_VALUE_CACHE_LIMIT", 8)
    cols = (ColumnSpec("f", C.MYSQL_TYPE_FLOAT, 4), ColumnSpec("t", C.MYSQL_TYPE_TIME2, 3))
    R._VALUE_CACHES.clear()
    fast = compile_rows_decoder(cols, "c", (0, 1))
    slow = compile_branching_decoder(cols, "c", (0, 1))
    rng = random.Random(3)
    data = b"".join(b"\x00" + rng.randbytes(4) + rng.randbytes(5) for _ in range(50))
    assert _canon(fast(data, 0, len(data))) == _canon(slow(data, 0, len(data)))
    assert all(len(cache) <= 8 for cache, _ in R._VALUE_CACHES.values())
    R._VALUE_CACHES.clear()
