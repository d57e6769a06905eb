"""Row images -> envelope JSON texts, a column at a time.

The second half of columnar decoding (``binlog.rowscan`` is the first): the row
images of a whole batch, located but not decoded, become their JSON texts with
numpy and Arrow kernels instead of one Python object per value. The texts are
exactly the ones the reference path writes (``rows.compile_rows_decoder`` to a
dict, orjson to text); a value a kernel cannot vouch for (a corrupt DECIMAL
group, a date past year 9999, invalid UTF-8, a control character to escape) is
decoded by the reference code for that one value, and a value the reference
code rejects raises as it would have. ``tests/unit/envelope/test_columnar.py``
holds the two paths to the same bytes.

Per column a *fragment* is the JSON text of its value (``null`` for NULL); an
image is ``{"name":fragment,...}``, joined by Arrow.
"""

from __future__ import annotations

from binascii import b2a_base64
from functools import cache
from typing import Any, Callable

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.arrowbuild import bool_array, from_numpy, int64_array, scalar
from mysqlcdc.binlog import constants as C
from mysqlcdc.binlog.columns import ColumnSpec
from mysqlcdc.binlog.rows import _Gen, _value_code, compile_generated, decode_set
from mysqlcdc.binlog.rowscan import column_extent
from mysqlcdc.binlog.values.decimal import _DIG2BYTES
from mysqlcdc.binlog.values.float32 import _TABLE as _FLOAT32_TABLE
from mysqlcdc.binlog.values.temporal import FRAC_SCALE

__all__ = ["ImagePlan", "ValueFailed", "image_plan"]

_PLANS: dict[tuple, "ImagePlan"] = {}


@cache
def _scalar(text: bytes) -> pa.Scalar:
    """A binary scalar, made at its first use: pyarrow imports pandas at its first
    conversion of a Python value, which the processes that only plan never need."""
    return scalar(text, pa.binary())


class ValueFailed(Exception):
    """The reference decoder rejected the value of image ``index``: ``cause`` says why."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(index, cause)
        self.index, self.cause = index, cause


def image_plan(cols: tuple[ColumnSpec, ...], present: tuple[int, ...]) -> "ImagePlan":
    key = (cols, present)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        plan = _PLANS[key] = ImagePlan(cols, present)
    return plan


def _binary(values: list[bytes]) -> pa.Array:
    return pa.array(values, pa.binary())


def _gather(buf: np.ndarray, off: np.ndarray, width: int) -> np.ndarray:
    """(m, width) bytes at ``off``: rows of a strided view of the buffer (no index
    matrix)."""
    return np.ndarray((len(buf) - width, width), np.uint8, buf, 0, (1, 1))[off]


_SHIFT_1, _SHIFT_63 = np.uint64(1), np.uint64(63)


def _uint(buf: np.ndarray, off: np.ndarray, width: int, big: bool = False) -> np.ndarray:
    """Unsigned ints of ``width`` bytes (1..8) at ``off``, little- or big-endian, as uint64.

    Read as the two aligned 64-bit words around each offset, shifted together: two
    gathers of whole words instead of one per byte. ``buf`` is padded (``_Ctx``), so
    the word after the last value's exists."""
    if width == 1:
        return buf[off].astype(np.uint64)
    words = buf[:len(buf) & ~7].view("<u8")
    q = off >> 3
    s = ((off & 7) << 3).astype(np.uint64)
    v = words[q] >> s
    v |= (words[q + 1] << _SHIFT_1) << (_SHIFT_63 - s)     # s == 0 shifts it all out
    if big:
        v = v.byteswap()
        if width < 8:
            v >>= np.uint64(64 - 8 * width)
    elif width < 8:
        v &= np.uint64((1 << 8 * width) - 1)
    return v


def _int_text(values: np.ndarray) -> pa.Array:
    return from_numpy(values).cast(pa.string()).cast(pa.binary())


def _join(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _scalar(b""))


def _join_json(*parts: Any) -> pa.Array:
    """``_join`` writing ``null`` for a null part (a NULL value)."""
    return pc.binary_join_element_wise(*parts, _scalar(b""), null_handling="replace", null_replacement="null")


def _with_nulls(frags: pa.Array, null: np.ndarray) -> pa.Array:
    """``frags`` with the entries of ``null`` made null: a validity bitmap over the
    same buffers where it can, else Arrow's if_else."""
    buffers = frags.buffers()
    if frags.offset or buffers[0] is not None or frags.type != pa.binary():
        return pc.if_else(bool_array(null), scalar(None, frags.type), frags)
    valid = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), len(frags), [valid, buffers[1], buffers[2]],
                                 null_count=int(null.sum()))


_POW10 = np.array([10 ** k for k in range(19)], np.int64)


_TEN, _ZERO_CHAR = np.uint64(10), np.uint64(48)


def _put_digits(out: np.ndarray, end: int, value: np.ndarray, width: int) -> None:
    """Write ``value`` (non-negative ints) as ``width`` zero-padded ASCII digits
    ending before column ``end`` of the text matrix ``out``, a digit at a time
    (numpy divides by a constant without a division instruction; a table of
    several digits costs more in its gather than it saves)."""
    q = value.astype(np.uint64)
    for k in range(1, width + 1):
        nq = q // _TEN
        out[:, end - k] = q - nq * _TEN + _ZERO_CHAR
        q = nq


def _fixed_texts(out: np.ndarray) -> pa.Array:
    """A binary array of the rows of a text matrix, all of its width."""
    m, width = out.shape
    offsets = np.arange(m + 1, dtype=np.int32) * width
    return pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(out))])


def _aligned_texts(out: np.ndarray, start: np.ndarray) -> pa.Array:
    """A binary array of the rows of a text matrix, each from its column ``start``."""
    m, width = out.shape
    keep = np.arange(width) >= start[:, None]
    offsets = np.zeros(m + 1, np.int32)
    np.cumsum(width - start, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offsets), pa.py_buffer(out[keep])])


def _text_matrix(m: int, template: bytes) -> np.ndarray:
    return np.tile(np.frombuffer(template, np.uint8), (m, 1))


class _Column:
    """How one present column becomes fragments.

    ``convert(ctx, off, vstart, vlen, null) -> (fragments, redo)``: fragments for
    every image (any text where ``null``), and a bool array (or None) of images
    whose value the kernel could not vouch for; those are decoded by ``value``,
    the reference code for one value read at ``off`` (the length prefix for a
    variable-size value)."""

    __slots__ = ("col", "convert", "value")

    def __init__(self, col: ColumnSpec, convert: Callable | None) -> None:
        self.col, self.convert = col, convert
        g = _Gen()
        g.emit(0, "def value(data, pos):")
        _value_code(g, col, 1, "v")
        g.emit(1, "return v")
        self.value = compile_generated(g, "value", "<one value>")


_PAD = bytes(32)


class _Ctx:
    """One batch's bytes: ``data``, followed by ``_PAD`` zero bytes (a value's
    reads of whole words, see ``_uint``, and a NULL's offset past the end stay in
    it), and ``buf`` and ``arrow``, views of them."""

    __slots__ = ("buf", "data", "arrow")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.buf = np.frombuffer(data, np.uint8)
        self.arrow = pa.py_buffer(data)


# --- kernels -------------------------------------------------------------------

def _int_kernel(width: int, signed: bool, big: bool = False, year: bool = False) -> Callable:
    table = None
    if width == 1 and not big:
        if year:
            table = _binary([str(v + 1900 if v else 0).encode() for v in range(256)])
        else:
            table = _binary([str(v - 256 if signed and v > 127 else v).encode() for v in range(256)])

    shift, ishift = np.uint64(64 - 8 * width), np.int64(64 - 8 * width)

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        if table is not None:
            return table.take(pa.array(ctx.buf[off])), None
        u = _uint(ctx.buf, off, width, big)
        if signed:         # sign-extended from the value's top bit
            return _int_text((u << shift).view(np.int64) >> ishift if width < 8 else u.view(np.int64)), None
        return _int_text(u), None
    return convert


def _list_texts(values: np.ndarray) -> pa.Array:
    """orjson's text of each of ``values`` (numbers), from one text of the whole list:
    the values between its commas taken by Arrow (no bytes object per value)."""
    m = len(values)
    if not m:
        return pa.nulls(0, pa.binary())
    text = orjson.dumps(values.tolist())           # [v0,v1,...]: no comma inside a number
    commas = np.flatnonzero(np.frombuffer(text, np.uint8) == 44)
    bounds = np.empty(2 * m, np.int64)             # v0 , v1 , ... v(m-1): every other one
    bounds[0] = 1
    bounds[1:-1:2] = commas
    bounds[2::2] = commas + 1
    bounds[-1] = len(text) - 1
    spread = pa.Array.from_buffers(pa.binary(), 2 * m - 1, [None, pa.py_buffer(bounds.astype(np.int32)),
                                                            pa.py_buffer(text)])
    return spread.take(int64_array(np.arange(0, 2 * m, 2)))


def _double_kernel(ctx: _Ctx, off, vstart, vlen, null):
    v = _uint(ctx.buf, off, 8).view("<f8")
    return _list_texts(v), None


def _float_tables() -> tuple[np.ndarray, ...]:
    """``float32._TABLE`` as arrays: per sign-and-exponent, the threshold and the
    (scale, power of ten) of each digit count, for significands at or above the
    threshold and below it (``ok`` False: the reference decides)."""
    thr = np.zeros(512, np.float64)
    c = np.ones((2, 512, 3), np.float64)
    p = np.ones((2, 512, 3), np.float64)
    ok = np.zeros((2, 512), bool)
    for i, (t, high, low) in enumerate(_FLOAT32_TABLE):
        thr[i] = min(max(t, 0), 1 << 24)
        for h, steps in ((0, high), (1, low)):
            if steps is not None:
                ok[h, i] = True
                for n, (cc, pp) in enumerate(steps):
                    c[h, i, n], p[h, i, n] = cc, pp
    return thr, c, p, ok


_F_THR, _F_C, _F_P, _F_OK = _float_tables()
_ROUND = 6755399441055744.0     # 1.5 * 2**52, as float32_value rounds


def _float_kernel(ctx: _Ctx, off, vstart, vlen, null):
    """``float32_value`` for a whole column in double arithmetic, the same steps in the
    same order (see ``binlog.values.float32``); zero, subnormals, inf, NaN and far
    exponents take the reference."""
    bits = _uint(ctx.buf, off, 4).astype(np.uint32)
    with np.errstate(all="ignore"):
        x = bits.view(np.float32).astype(np.float64)
    e = (bits >> 23).astype(np.int64)
    m = ((bits & 0x7FFFFF) | 0x800000).astype(np.float64)
    low = (m < _F_THR[e]).astype(np.int64)
    c, p, ok = _F_C[low, e], _F_P[low, e], _F_OK[low, e]
    out = x.copy()
    done = ~ok
    with np.errstate(all="ignore"):
        for n in range(3):
            cn, pn = c[:, n], p[:, n]
            r = m * cn
            d = (r + _ROUND) - _ROUND
            diff = r - d
            y = d / pn
            hit = ~done & (-cn < diff) & (diff < cn) & (y.astype(np.float32).view(np.uint32) == bits)
            out[hit] = y[hit]
            done |= hit
    return _list_texts(out), ~ok


_TEXT_TABLES: dict[str, np.ndarray] = {}


def _text_table(name: str) -> np.ndarray:
    """Fixed-width texts by number, built once (with the kernels' own digit writer):
    ``ym`` 'YYYY-MM' of DATETIME2's year*13+month, ``hms`` 'HH:MM:SS' of its packed
    hour<<12|minute<<6|second, ``day`` 'YYYY-MM-DD' of days since 1970 (TIMESTAMP's
    range), ``sod`` 'HH:MM:SS' of seconds of the day, ``year`` 'YYYY', ``md`` 'MM-DD'
    of DATE's month<<5|day."""
    table = _TEXT_TABLES.get(name)
    if table is not None:
        return table
    if name == "ym":
        v = np.arange(1 << 17, dtype=np.int64)
        table = _text_matrix(len(v), b"0000-00")
        _put_digits(table, 4, np.minimum(v // 13, 9999), 4)
        _put_digits(table, 7, v % 13, 2)
    elif name in ("hms", "sod"):
        v = np.arange(1 << 17 if name == "hms" else 86400, dtype=np.int64)
        h, m, sec = ((v >> 12, (v >> 6) & 63, v & 63) if name == "hms" else (v // 3600, v // 60 % 60, v % 60))
        table = _text_matrix(len(v), b"00:00:00")
        _put_digits(table, 2, h, 2)
        _put_digits(table, 5, m, 2)
        _put_digits(table, 8, sec, 2)
    elif name == "day":
        y, m, d = _civil(np.arange(1 << 16, dtype=np.int64))   # 2**32 seconds < 2**16 days
        table = _text_matrix(len(y), b"0000-00-00")
        _put_digits(table, 4, y, 4)
        _put_digits(table, 7, m, 2)
        _put_digits(table, 10, d, 2)
    elif name == "year":
        table = _text_matrix(10000, b"0000")
        _put_digits(table, 4, np.arange(10000, dtype=np.int64), 4)
    else:                                            # md
        v = np.arange(512, dtype=np.int64)
        table = _text_matrix(len(v), b"00-00")
        _put_digits(table, 2, v >> 5, 2)
        _put_digits(table, 5, v & 31, 2)
    _TEXT_TABLES[name] = table
    return table


def _date_kernel(ctx: _Ctx, off, vstart, vlen, null):
    v = _uint(ctx.buf, off, 3).astype(np.int64)
    year = v >> 9
    redo = year > 9999
    out = _text_matrix(len(v), b'"0000-00-00"')
    out[:, 1:5] = _text_table("year")[np.minimum(year, 9999)]
    out[:, 6:11] = _text_table("md")[v & 0x1FF]
    return _fixed_texts(out), redo


def _frac_micro(buf, off: np.ndarray, fsp: int) -> np.ndarray:
    """The stored fraction after a temporal's integer part, as ``_frac_code`` reads it,
    in units of the column's last digit (``q`` of ``'.%0{fsp}d' % q``)."""
    if fsp <= 2:
        us = _uint(buf, off, 1, big=True).astype(np.int64) * 10000
    elif fsp <= 4:
        us = _uint(buf, off, 2, big=True).astype(np.int64) * 100
    else:
        us = _uint(buf, off, 3, big=True).astype(np.int64)
    return us // FRAC_SCALE[fsp]


def _put_fraction(out: np.ndarray, buf, off: np.ndarray, fsp: int) -> np.ndarray:
    """Write the stored fraction at ``off`` as the ``fsp`` digits after the seconds
    (``..SS.`` ends at column 21) of the text matrix ``out``; True where it has more
    digits (the reference decides)."""
    q = _frac_micro(buf, off, fsp)
    _put_digits(out, 21 + fsp, q, fsp)
    return q >= 10 ** fsp


def _datetime2_kernel(fsp: int) -> Callable:
    template = b'"0000-00-00 00:00:00' + (b"." + b"0" * fsp if fsp else b"") + b'"'

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        x = _uint(ctx.buf, off, 5, big=True).astype(np.int64) - 0x8000000000
        redo = x < 0
        x = np.where(redo, 0, x)
        ymd = x >> 17
        ym = ymd >> 5
        redo |= ym >= 10000 * 13                 # a fifth year digit: the reference writes it
        out = _text_matrix(len(x), template)
        out[:, 1:8] = _text_table("ym")[ym]
        _put_digits(out, 11, ymd & 31, 2)
        out[:, 12:20] = _text_table("hms")[x & 0x1FFFF]
        if fsp:
            redo |= _put_fraction(out, ctx.buf, off + 5, fsp)
        return _fixed_texts(out), redo
    return convert


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Days since 1970-01-01 (>= 0) -> proleptic Gregorian (year, month, day)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = np.where(mp < 10, mp + 3, mp - 9)
    return y + (m <= 2), m, d


def _timestamp2_kernel(fsp: int) -> Callable:
    template = b'"0000-00-00T00:00:00' + (b"." + b"0" * fsp if fsp else b"") + b'Z"'

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        secs = _uint(ctx.buf, off, 4, big=True).astype(np.int64)
        redo = secs == 0                  # the zero timestamp: the reference writes it
        out = _text_matrix(len(secs), template)
        out[:, 1:11] = _text_table("day")[secs // 86400]
        out[:, 12:20] = _text_table("sod")[secs % 86400]
        if fsp:
            redo |= _put_fraction(out, ctx.buf, off + 4, fsp)
        return _fixed_texts(out), redo
    return convert


def _time2_kernel(fsp: int) -> Callable:

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        buf = ctx.buf
        if fsp >= 5:
            packed = _uint(buf, off, 6, big=True).astype(np.int64) - 0x800000000000
        else:
            intpart = _uint(buf, off, 3, big=True).astype(np.int64) - 0x800000
            if fsp <= 0:
                packed = intpart << 24
            else:
                one = fsp <= 2
                frac = _uint(buf, off + 3, 1 if one else 2, big=True).astype(np.int64)
                fix = (intpart < 0) & (frac != 0)
                intpart = intpart + fix
                frac = frac - fix * (0x100 if one else 0x10000)
                packed = (intpart << 24) + frac * (10000 if one else 100)
        neg = packed < 0
        packed = np.abs(packed)
        hms, us = packed >> 24, packed & 0xFFFFFF
        hours = (hms >> 12) & 0x3FF
        # '"' sign hours(2-4 digits) ':MM:SS' fraction '"', right-aligned in 4 hour digits
        tail = b":00:00" + (b"." + b"0" * fsp if fsp else b"") + b'"'
        out = _text_matrix(len(packed), b'  "-0000' + tail)
        _put_digits(out, 8, hours, 4)
        _put_digits(out, 11, (hms >> 6) & 63, 2)
        _put_digits(out, 14, hms & 63, 2)
        redo = None
        if fsp:
            q = us // FRAC_SCALE[fsp]
            redo = q >= 10 ** fsp
            _put_digits(out, 15 + fsp, q, fsp)
        digits = np.where(hours >= 1000, 4, np.where(hours >= 100, 3, 2))
        first = 8 - digits                 # the first hour digit
        rows = np.arange(len(packed))
        out[rows, first - 1] = np.where(neg, 45, 34)
        out[rows, first - 2] = 34
        return _aligned_texts(out, first - 1 - neg), redo
    return convert


def _decimal_kernel(precision: int, scale: int) -> Callable | None:
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    if intg > 18 or scale > 9:
        return None
    lead_n, trail_n = _DIG2BYTES[intg0x], _DIG2BYTES[frac0x]
    size = lead_n + 4 * intg0 + 4 * frac0 + trail_n

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        buf = ctx.buf
        positive = (buf[off] & 0x80) != 0
        # as the reference: a positive value loses its sign bit, a negative one has
        # every bit but the sign bit inverted
        at = 0

        def be(n: int) -> np.ndarray:
            """The next ``n`` bytes as a big-endian unsigned int (uint64), sign-fixed."""
            nonlocal at
            w = _uint(buf, off + at, n, big=True)
            w ^= np.where(positive, np.uint64(0), np.uint64((1 << 8 * n) - 1))
            if at == 0:
                w ^= np.uint64(0x80 << 8 * (n - 1))
            at += n
            return w

        whole = be(lead_n) if lead_n else np.zeros(len(off), np.uint64)
        redo = np.zeros(len(off), bool)
        for _ in range(intg0):
            w = be(4)
            redo |= w >= 10**9
            whole = whole * np.uint64(10**9) + w
        frac = None
        if frac0:
            frac = be(4)
            redo |= frac >= 10**9
        elif trail_n:
            frac = be(trail_n)
            redo |= frac >= 10**frac0x
        # '"' sign digits(1-20) ['.' fraction] '"', right-aligned in 20 digits
        out = _text_matrix(len(off), b'"-' + b"0" * 20 + (b"." + b"0" * scale if scale else b"") + b'"')
        whole = whole.astype(np.int64)     # below 2**63: at most 18 digits' groups + a short lead
        nd = np.maximum(np.searchsorted(_POW10, whole, side="right"), 1)   # digits, at least one
        _put_digits(out, 22, whole, int(nd.max()))
        if scale:
            _put_digits(out, 23 + scale, frac, scale)
        first = 22 - nd
        neg = (~positive).astype(np.int64)
        rows = np.arange(len(off))
        out[rows, first - 1] = np.where(neg, 45, 34)
        out[rows, first - 2] = 34
        return _aligned_texts(out, first - 1 - neg), redo
    return convert



def _slices(ctx: _Ctx, vstart: np.ndarray, vlen: np.ndarray, null: np.ndarray) -> list[bytes]:
    """The ``vlen`` bytes at each ``vstart`` (empty where ``null``), as bytes objects."""
    data = ctx.data
    starts = vstart.tolist()
    ends = np.where(null, vstart, vstart + vlen).tolist()
    return [data[a:b] for a, b in zip(starts, ends)]


def _values(ctx: _Ctx, vstart: np.ndarray, vlen: np.ndarray, null: np.ndarray) -> pa.Array:
    """A binary array of the ``vlen`` bytes at each ``vstart`` (empty where ``null``).

    The values of one column of one group of images lie in order in the batch's bytes,
    so an array over those bytes whose even elements are the values and odd ones the
    gaps between them costs no copy; Arrow's ``take`` of the even ones makes it compact.
    """
    m = len(vstart)
    ends = np.where(null, vstart, vstart + vlen)
    bounds = np.empty(2 * m + 1, np.int64)
    bounds[0:2 * m:2] = vstart
    bounds[1:2 * m:2] = ends
    bounds[2 * m] = ends[-1] if m else 0
    if m and (np.diff(bounds) < 0).any() or len(ctx.data) >= 2**31:
        return pa.array(_slices(ctx, vstart, vlen, null), pa.binary())
    spread = pa.Array.from_buffers(pa.binary(), 2 * m, [None, pa.py_buffer(bounds.astype(np.int32)),
                                                        ctx.arrow])
    return spread.take(int64_array(np.arange(0, 2 * m, 2)))


class _Bare:
    """A string column's fragments without their quotes: the image join writes them
    (one pass less; none around a NULL, see ``_literal``); a key text quotes them."""

    __slots__ = ("array",)

    def __init__(self, array: pa.Array) -> None:
        self.array = array


def _quoted(text: pa.Array) -> pa.Array:
    return _join(_scalar(b'"'), text.cast(pa.binary()), _scalar(b'"'))


def _utf8_kernel(ctx: _Ctx, off, vstart, vlen, null):
    raw = _values(ctx, vstart, vlen, null)
    try:
        raw.cast(pa.string())                          # checks the UTF-8
    except pa.ArrowInvalid:
        return raw, np.ones(len(off), bool)             # invalid UTF-8 somewhere: the reference
    offsets = np.frombuffer(raw.buffers()[1], np.int32)[raw.offset:raw.offset + len(raw) + 1]
    body = np.frombuffer(raw.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    # control characters: orjson writes them as escapes; those values take the reference
    ctl = np.flatnonzero(body < 0x20)
    redo = None
    if len(ctl):
        redo = (np.searchsorted(ctl, offsets[1:] - offsets[0])
                - np.searchsorted(ctl, offsets[:-1] - offsets[0])) > 0
    # '"' and '\\' are written with a backslash before them: inserted in one pass
    escape = np.flatnonzero((body == 0x5C) | (body == 0x22))
    if len(escape) and len(body) + len(escape) >= 2**31:      # past 32-bit offsets: as before
        text = pc.replace_substring(raw.cast(pa.string()), "\\", "\\\\")
        return _Bare(pc.replace_substring(text, '"', '\\"').cast(pa.binary())), redo
    if len(escape):
        bounds = (offsets - offsets[0]).astype(np.int64)
        bounds += np.searchsorted(escape, bounds)
        body = np.insert(body, escape, 0x5C)
        raw = pa.Array.from_buffers(pa.binary(), len(raw), [None, pa.py_buffer(bounds.astype(np.int32)),
                                                            pa.py_buffer(body)])
    return _Bare(raw), redo


def _base64_kernel(pad: int) -> Callable:
    """Binary values as base64 (BINARY(n) right-padded with zero bytes to ``pad``, as
    the server pads it): the values of the whole column, each padded with zero bytes
    to whole 3-byte groups, encoded by one ``b2a_base64`` call; the characters of
    those alignment bytes become ``=``."""

    def convert(ctx: _Ctx, off, vstart, vlen, null):
        raw = _values(ctx, vstart, vlen, null)
        if 4 * (len(raw.buffers()[2]) + 2 * len(raw)) + 3 * pad * len(raw) >= 3 * 2**31:
            return _Bare(pa.array([b2a_base64(r.ljust(pad, b"\x00") if pad else r, newline=False)   # past
                                   for r in _slices(ctx, vstart, vlen, null)], pa.binary())), None   # 2 GiB
        offsets = np.frombuffer(raw.buffers()[1], np.int32)[raw.offset:raw.offset + len(raw) + 1]
        body = np.frombuffer(raw.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
        ends = (offsets[1:] - offsets[0]).astype(np.int64)
        size = np.diff(offsets).astype(np.int64)
        padded = np.where(null, 0, np.maximum(size, pad)) if pad else size
        align = -padded % 3
        zeros = padded - size + align                  # zero bytes after each value
        if zeros.any():
            body = np.insert(body, np.repeat(ends, zeros), 0)
        text = np.frombuffer(b2a_base64(body.tobytes(), newline=False), np.uint8).copy()
        bounds = np.zeros(len(raw) + 1, np.int64)
        np.cumsum((padded + align) // 3 * 4, out=bounds[1:])
        text[bounds[1:][align > 0] - 1] = 61           # '='
        text[bounds[1:][align == 2] - 2] = 61
        return _Bare(pa.Array.from_buffers(pa.binary(), len(raw), [None, pa.py_buffer(bounds.astype(np.int32)),
                                                                   pa.py_buffer(text)])), None
    return convert


def _label_table(col: ColumnSpec) -> pa.Array | None:
    """ENUM/SET fragments by stored number, for one- and two-byte values."""
    meta = col.meta
    if meta not in (1, 2):
        return None
    n = 1 << (8 * meta)
    if col.type == C.MYSQL_TYPE_ENUM:
        labels = col.enum_labels
        if labels is None:
            return _binary([str(i).encode() for i in range(n)])
        return _binary([orjson.dumps(([""] + list(labels))[i]) if i <= len(labels) else str(i).encode()
                        for i in range(n)])
    if col.set_labels is None:
        return _binary([str(i).encode() for i in range(n)])
    return _binary([orjson.dumps(list(decode_set(i, col.set_labels))) for i in range(n)])


def _table_kernel(table: pa.Array, width: int) -> Callable:
    def convert(ctx: _Ctx, off, vstart, vlen, null):
        return table.take(pa.array(_uint(ctx.buf, off, width).astype(np.int64))), None
    return convert


_INT_WIDTH = {C.MYSQL_TYPE_TINY: 1, C.MYSQL_TYPE_SHORT: 2, C.MYSQL_TYPE_INT24: 3, C.MYSQL_TYPE_LONG: 4,
              C.MYSQL_TYPE_LONGLONG: 8}
_TEXT_TYPES = frozenset({C.MYSQL_TYPE_VARCHAR, C.MYSQL_TYPE_STRING, C.MYSQL_TYPE_VAR_STRING, C.MYSQL_TYPE_BLOB,
                         C.MYSQL_TYPE_TINY_BLOB, C.MYSQL_TYPE_MEDIUM_BLOB, C.MYSQL_TYPE_LONG_BLOB})


def _kernel(col: ColumnSpec) -> Callable | None:
    """The kernel of a column, None where the reference decodes every value."""
    t, meta = col.type, col.meta
    if t in _INT_WIDTH:
        return _int_kernel(_INT_WIDTH[t], not col.unsigned)
    if t == C.MYSQL_TYPE_YEAR:
        return _int_kernel(1, False, year=True)
    if t == C.MYSQL_TYPE_BIT:
        n = (meta >> 8) + (1 if meta & 0xFF else 0)
        return _int_kernel(n, False, big=True) if 1 <= n <= 8 else None
    if t == C.MYSQL_TYPE_DOUBLE:
        return _double_kernel
    if t in (C.MYSQL_TYPE_DATE, C.MYSQL_TYPE_NEWDATE):
        return _date_kernel
    if t == C.MYSQL_TYPE_DATETIME2 and 0 <= meta <= 6:
        return _datetime2_kernel(meta)
    if t == C.MYSQL_TYPE_TIMESTAMP2 and 0 <= meta <= 6:
        return _timestamp2_kernel(meta)
    if t == C.MYSQL_TYPE_TIME2 and 0 <= meta <= 6:
        return _time2_kernel(meta)
    if t == C.MYSQL_TYPE_NEWDECIMAL:
        return _decimal_kernel(meta >> 8, meta & 0xFF)
    if t in (C.MYSQL_TYPE_ENUM, C.MYSQL_TYPE_SET):
        table = _label_table(col)
        return _table_kernel(table, meta) if table is not None else None
    if col.text_form is not None:
        return None                    # INET6, INET4, UUID: rare, written value by value
    if t in _TEXT_TYPES and col.codec == "utf-8":
        return _utf8_kernel
    if t in _TEXT_TYPES and col.codec is None:
        return _base64_kernel(meta if t == C.MYSQL_TYPE_STRING else 0)
    if t == C.MYSQL_TYPE_FLOAT:
        return _float_kernel
    return None


def _literal(before: tuple, text: bytes, after: tuple) -> Any:
    """The text between two fragments of an image: ``text``, after the closing quote
    of a bare string fragment before it and before the opening quote of a bare one
    after it (``before``/``after``: (bare, NULLs of a bare one or None)). Per image
    where a bare one has NULLs: a NULL gets no quotes (the join writes ``null``)."""
    (b_bare, b_null), (a_bare, a_null) = before, after
    if b_null is None and a_null is None:
        return (b'"' if b_bare else b"") + text + (b'"' if a_bare else b"")
    variants = _binary([(b'"' if b_bare and not nb else b"") + text + (b'"' if a_bare and not na else b"")
                        for nb in (0, 1) for na in (0, 1)])
    index = np.zeros(len(b_null if b_null is not None else a_null), np.int8)
    if b_null is not None:
        index += b_null.astype(np.int8) * 2
    if a_null is not None:
        index += a_null
    return variants.take(pa.array(index))


class ImagePlan:
    """Columnar conversion of the images of one shape (columns, present columns)."""

    def __init__(self, cols: tuple[ColumnSpec, ...], present: tuple[int, ...]) -> None:
        self.present = present
        self.names = [cols[i].name for i in present]
        self.width = len(present)
        self.nbb = (len(present) + 7) // 8
        fixed, prefix, segment, var_of = [], [], [], []
        var = 0
        for ci in present:
            f, p = column_extent(cols[ci])
            fixed.append(f)
            prefix.append(p)
            segment.append(var)          # the record entry this column's offset counts from
            if p:
                var += 1
        self.nvar = var
        self.fixed = np.array(fixed, np.int64)
        self.prefix = prefix
        self.segment = segment
        # the column that starts each segment: the offset of column j is its segment's
        # base plus the fixed bytes of the non-NULL columns from that one up to j
        self.segment_first = [0] + [j + 1 for j, p in enumerate(prefix) if p]
        self.columns = [_Column(cols[ci], _kernel(cols[ci])) for ci in present]
        self.keys = [orjson.dumps(n) for n in self.names]
        self._name_index = {n: j for j, n in enumerate(self.names)}

    def fragments(self, ctx: _Ctx, recs: np.ndarray) -> list[tuple]:
        """Per present column ``(fragments, bare, NULLs)``: the fragment of every image
        (``recs``: (m, 1 + nvar) positions in ``ctx``, see ``binlog.rowscan``), null
        for a NULL; ``bare`` for strings without their quotes (``_Bare``); ``NULLs``
        the bool array of NULL images of a bare column that has some, else None."""
        m = len(recs)
        starts = recs[:, 0]
        bitmap = _gather(ctx.buf, starts, self.nbb) if self.nbb else np.zeros((m, 0), np.uint8)
        null = np.unpackbits(bitmap, axis=1, bitorder="little")[:, :self.width].astype(bool)
        sizes = np.where(null, 0, self.fixed)
        before = np.cumsum(sizes, axis=1) - sizes            # fixed bytes of columns before j
        out = []
        for j, column in enumerate(self.columns):
            s = self.segment[j]
            base = starts + self.nbb if s == 0 else recs[:, s]
            first = self.segment_first[s]
            off = base + before[:, j] - before[:, first] if first < self.width else base
            col_null = null[:, j]
            vstart = vlen = None
            if self.prefix[j]:
                # a NULL's "value" is empty, where the column would have been
                vstart = np.where(col_null, off, off + self.prefix[j])
                vlen = np.where(col_null, 0, recs[:, s + 1] - vstart)
            any_null = bool(col_null.any())
            if column.convert is not None:
                frags, redo = column.convert(ctx, off, vstart, vlen, col_null)
            else:
                frags, redo = None, np.ones(m, bool)
            bare = frags.__class__ is _Bare
            if bare:
                frags = frags.array
            if redo is not None:
                redo = redo & ~col_null
                if redo.any():
                    frags = self._redo(ctx, column, off, redo, frags, m, bare)
            bare_null = None
            if frags is None:                    # every value NULL
                frags, bare = pa.nulls(m, pa.binary()), False
            elif any_null:
                # NULL as a null entry: the image join writes ``null`` for it (and no
                # quotes around it, see ``images``)
                frags = _with_nulls(frags, col_null)
                if bare:
                    bare_null = col_null
            out.append((frags, bare, bare_null))
        return out

    @staticmethod
    def _redo(ctx: _Ctx, column: _Column, off: np.ndarray, redo: np.ndarray, frags: pa.Array | None,
              m: int, bare: bool = False) -> pa.Array:
        """``frags`` with the images of ``redo`` decoded by the reference code (their
        texts without the quotes when ``bare``: the value is a string then)."""
        idx = np.flatnonzero(redo)
        value, data = column.value, ctx.data
        texts = []
        for i in idx.tolist():
            try:
                v = value(data, int(off[i]))
            except Exception as e:          # noqa: BLE001 - the caller names it
                raise ValueFailed(i, e) from e
            texts.append(orjson.dumps(v)[1:-1] if bare else orjson.dumps(v))
        if frags is None or len(idx) == m:
            full = [b"null"] * m
            for i, t in zip(idx.tolist(), texts):
                full[i] = t
            return _binary(full)
        return pc.replace_with_mask(frags.cast(pa.binary()) if frags.type != pa.binary() else frags,
                                    pa.array(redo), _binary(texts))

    def images(self, frags: list[tuple], m: int) -> pa.Array:
        """``{"name":fragment,...}`` of each of ``m`` images (``frags`` from ``fragments``)."""
        if not frags:                   # images of no columns (a MINIMAL before image)
            return pa.array([b"{}"] * m, pa.binary())
        parts: list[Any] = []
        prev: tuple = (False, None)
        for j, (f, bare, null) in enumerate(frags):
            parts += [_literal(prev, (b"," if j else b"{") + self.keys[j] + b":", (bare, null)), f]
            prev = (bare, null)
        parts.append(_literal(prev, b"}", (False, None)))
        return _join_json(*parts)

    def key_texts(self, frags: list[tuple[pa.Array, bool]], key_columns: tuple[str, ...]) -> pa.Array | None:
        """``{"k":fragment,...}`` of the key columns; None when one is not in the image."""
        parts: list[Any] = []
        for n, k in enumerate(key_columns):
            j = self._name_index.get(k)
            if j is None:
                return None
            f, bare, _ = frags[j]
            parts += [(b"{" if n == 0 else b",") + orjson.dumps(k) + b":", _quoted(f) if bare else f]
        parts.append(b"}")
        return _join_json(*parts)


def make_context(parts: list[bytes]) -> _Ctx:
    """The context of the bytes of ``parts`` joined (one copy, the padding with it)."""
    return _Ctx(b"".join([*parts, _PAD]))
