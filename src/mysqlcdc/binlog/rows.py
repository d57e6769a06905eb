"""Row-image decoding by generated code.

For each distinct (columns, image bitmaps, event kind) the decoder writes the
Python source of one function that decodes *all* rows of a rows event: the
null-bitmap tests are inlined, fixed-size values are read with bound
``struct`` methods or byte arithmetic, and each image becomes a dict display.
The source is compiled once and cached. Hard encodings (DECIMAL, TIME2, JSON,
SET) call into ``values/``.

A generated function returns ``(rows, pos)``; the caller checks that ``pos``
lands exactly on the end of the rows data, which also catches overruns (slices
past the end of ``bytes`` are silently short).
"""

from __future__ import annotations

import binascii
import struct
from collections import OrderedDict
from typing import Any, Callable

from . import constants as C
from .columns import ColumnSpec
from .values import temporal as T
from .values.charsets import error_mode
from .values.fixedbin import text_of
from .values.decimal import DIGIT_TABLES, decimal_code, decimal_size, make_decimal_decoder
from .values.float32 import float32_value
from .values.json_binary import decode_json
from .values.json_diff import JSON_DIFF_TYPE, read_json_diffs

__all__ = ["compile_rows_decoder", "RowsDecoder", "float32_value", "vector_value"]

RowsDecoder = Callable[[bytes, int, int], tuple[list, int]]

_CACHE: OrderedDict[tuple, RowsDecoder] = OrderedDict()
_CACHE_SIZE = 4096


def vector_value(raw: bytes) -> list[float]:
    """VECTOR: little-endian float32 elements."""
    if len(raw) % 4:
        raise ValueError("VECTOR length is not a multiple of 4")
    return [float32_value(raw[i:i + 4]) for i in range(0, len(raw), 4)]


def decode_set(bits: int, labels: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(lab for i, lab in enumerate(labels) if bits >> i & 1)


def _set_decoder(labels: tuple[str, ...]) -> Callable[[int], list[str]]:
    cache: dict[int, tuple[str, ...]] = {}

    def decode(bits: int) -> list[str]:
        t = cache.get(bits)
        if t is None:
            t = decode_set(bits, labels)
            if len(cache) < 4096:
                cache[bits] = t
        return list(t)

    return decode


_STATIC_ENV: dict[str, Any] = {
    "U16": struct.Struct("<H").unpack_from, "S16": struct.Struct("<h").unpack_from,
    "U32": struct.Struct("<I").unpack_from, "S32": struct.Struct("<i").unpack_from,
    "U64": struct.Struct("<Q").unpack_from, "S64": struct.Struct("<q").unpack_from,
    "F64": struct.Struct("<d").unpack_from, "U32BE": struct.Struct(">I").unpack_from,
    "U16BE": struct.Struct(">H").unpack_from, "F32V": float32_value, "VEC": vector_value,
    "JSON": decode_json, "DATEC": T._ymd_cache, "DATEF": T.format_date,
    "DAYC": T._day_cache, "DAYF": T.format_date_packed, "HMSC": T._hms_cache,
    "HMSF": T.format_hms, "TSF": T.format_timestamp,
    "EPC": T._epoch_day_cache, "EPF": T.format_epoch_day, "SODC": T._sod_cache,
    "SODF": T.format_second_of_day, "TIME2P": T.time2_packed,
    "TIMEF": T.format_time_packed, "OLDTIMEF": T.format_old_time,
    "OLDDTF": T.format_old_datetime, "HEX": bytes.hex, "JDIFF": read_json_diffs,
    "B2A": binascii.b2a_base64,
    "FB": int.from_bytes,   # bound once: ``int.from_bytes`` makes a bound method per call
    **DIGIT_TABLES,
}


class _Gen:
    """Accumulates generated lines and the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {}

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def emit(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + line for line in lines)


def _frac_code(fsp: int, at: str) -> str:
    """Expression for the microseconds stored after a temporal's integer part."""
    if fsp <= 0:
        return "0"
    if fsp <= 2:
        return f"data[{at}] * 10000"
    if fsp <= 4:
        return f"U16BE(data, {at})[0] * 100"
    return f"(data[{at}] << 16 | data[{at} + 1] << 8 | data[{at} + 2])"


def _string_code(g: _Gen, col: ColumnSpec, n: str, pad: int = 0) -> str:
    """Expression turning data[pos:pos+n] into the column's value."""
    raw = f"data[pos:pos + {n}]"
    if col.text_form is not None:
        return f"{g.const('FXT', text_of(col.text_form))}({raw})"
    if col.codec is None:
        return (f"B2A({raw}.ljust({pad}, b'\\x00'), newline=False).decode('ascii')" if pad
                else f"B2A({raw}, newline=False).decode('ascii')")
    return f"{raw}.decode({col.codec!r}, {error_mode(col.codec)!r})"


def _int_code(g: _Gen, col: ColumnSpec, ind: int, v: str) -> bool:
    t = col.type
    u = col.unsigned
    if t == C.MYSQL_TYPE_TINY:
        g.emit(ind, f"{v} = data[pos]", "pos += 1")
        if not u:
            g.emit(ind, f"if {v} > 127: {v} -= 256")
    elif t == C.MYSQL_TYPE_SHORT:
        g.emit(ind, f"{v} = {'U16' if u else 'S16'}(data, pos)[0]", "pos += 2")
    elif t == C.MYSQL_TYPE_INT24:
        g.emit(ind, f"{v} = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16", "pos += 3")
        if not u:
            g.emit(ind, f"if {v} & 0x800000: {v} -= 0x1000000")
    elif t == C.MYSQL_TYPE_LONG:
        g.emit(ind, f"{v} = {'U32' if u else 'S32'}(data, pos)[0]", "pos += 4")
    elif t == C.MYSQL_TYPE_LONGLONG:
        g.emit(ind, f"{v} = {'U64' if u else 'S64'}(data, pos)[0]", "pos += 8")
    elif t == C.MYSQL_TYPE_YEAR:
        g.emit(ind, f"{v} = data[pos]", "pos += 1", f"if {v}: {v} += 1900")
    elif t == C.MYSQL_TYPE_FLOAT:
        g.emit(ind, f"{v} = F32V(data[pos:pos + 4])", "pos += 4")
    elif t == C.MYSQL_TYPE_DOUBLE:
        g.emit(ind, f"{v} = F64(data, pos)[0]", "pos += 8")
    elif t == C.MYSQL_TYPE_NULL:
        g.emit(ind, f"{v} = None")
    else:
        return False
    return True


def _temporal_code(g: _Gen, col: ColumnSpec, ind: int, v: str) -> bool:
    t, fsp = col.type, col.meta
    if t in (C.MYSQL_TYPE_DATE, C.MYSQL_TYPE_NEWDATE):
        g.emit(ind, "x = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16", "pos += 3",
               f"{v} = DATEC.get(x) or DATEF(x)")
    elif t == C.MYSQL_TYPE_DATETIME2:
        fb = T.frac_bytes(fsp)
        frac = f" + {g.const('FR', T._FRAC_FMT[fsp])}.format(({_frac_code(fsp, 'pos + 5')}) // {T.FRAC_SCALE[fsp]})" if fsp else ""
        g.emit(ind, "x = FB(data[pos:pos + 5], 'big') - 0x8000000000",
               f"{v} = (DAYC.get(x >> 17) or DAYF(x >> 17)) + ' ' + (HMSC.get(x & 0x1FFFF) or HMSF(x & 0x1FFFF)){frac}",
               f"pos += {5 + fb}")
    elif t == C.MYSQL_TYPE_TIMESTAMP2:
        frac = f" + {g.const('FR', T._FRAC_FMT[fsp])}.format(({_frac_code(fsp, 'pos + 4')}) // {T.FRAC_SCALE[fsp]})" if fsp else ""
        g.emit(ind, "x = U32BE(data, pos)[0]", "if x:",
               "    d, x = divmod(x, 86400)",
               f"    {v} = (EPC.get(d) or EPF(d)) + (SODC.get(x) or SODF(x)){frac} + 'Z'",
               "else:",
               f"    {v} = TSF(0, {_frac_code(fsp, 'pos + 4')}, {fsp})",
               f"pos += {4 + T.frac_bytes(fsp)}")
    elif t == C.MYSQL_TYPE_TIME2:
        n = 3 + T.frac_bytes(fsp)
        g.emit(ind, f"{v} = TIMEF(TIME2P(data[pos:pos + {n}], {fsp}), {fsp})", f"pos += {n}")
    elif t == C.MYSQL_TYPE_TIMESTAMP:
        g.emit(ind, f"{v} = TSF(U32(data, pos)[0], 0, 0)", "pos += 4")
    elif t == C.MYSQL_TYPE_TIME:
        g.emit(ind, "x = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16",
               "if x & 0x800000: x -= 0x1000000", f"{v} = OLDTIMEF(x)", "pos += 3")
    elif t == C.MYSQL_TYPE_DATETIME:
        g.emit(ind, f"{v} = OLDDTF(U64(data, pos)[0])", "pos += 8")
    else:
        return False
    return True


def _length_prefix(g: _Gen, ind: int, nbytes: int) -> None:
    if nbytes == 1:
        g.emit(ind, "n = data[pos]", "pos += 1")
    elif nbytes == 2:
        g.emit(ind, "n = U16(data, pos)[0]", "pos += 2")
    else:
        g.emit(ind, f"n = FB(data[pos:pos + {nbytes}], 'little')", f"pos += {nbytes}")


def _string_like_code(g: _Gen, col: ColumnSpec, ind: int, v: str) -> bool:
    t, meta = col.type, col.meta
    if t in (C.MYSQL_TYPE_VARCHAR, C.MYSQL_TYPE_VAR_STRING):
        _length_prefix(g, ind, 1 if meta < 256 else 2)
        g.emit(ind, f"{v} = {_string_code(g, col, 'n')}", "pos += n")
    elif t == C.MYSQL_TYPE_STRING:
        _length_prefix(g, ind, 1 if meta < 256 else 2)
        g.emit(ind, f"{v} = {_string_code(g, col, 'n', pad=meta)}", "pos += n")
    elif t in (C.MYSQL_TYPE_BLOB, C.MYSQL_TYPE_TINY_BLOB, C.MYSQL_TYPE_MEDIUM_BLOB,
               C.MYSQL_TYPE_LONG_BLOB, C.MYSQL_TYPE_JSON, C.MYSQL_TYPE_GEOMETRY,
               C.MYSQL_TYPE_VECTOR):
        if not 1 <= meta <= 4:
            raise ValueError(f"invalid length-bytes metadata {meta} for type {t}")
        _length_prefix(g, ind, meta)
        raw = "data[pos:pos + n]"
        expr = {C.MYSQL_TYPE_JSON: f"JSON({raw})", C.MYSQL_TYPE_GEOMETRY: f"HEX({raw})",
                C.MYSQL_TYPE_VECTOR: f"VEC({raw})"}.get(t) or _string_code(g, col, "n")
        g.emit(ind, f"{v} = {expr}", "pos += n")
    else:
        return False
    return True


def _other_code(g: _Gen, col: ColumnSpec, ind: int, v: str) -> bool:
    t, meta = col.type, col.meta
    if t == C.MYSQL_TYPE_NEWDECIMAL:
        fn = make_decimal_decoder(meta >> 8, meta & 0xFF)
        size = decimal_size(meta >> 8, meta & 0xFF)
        g.emit(ind, f"{v} = {g.const('DEC', fn)}(data[pos:pos + {size}])", f"pos += {size}")
    elif t == C.MYSQL_TYPE_BIT:
        n = (meta >> 8) + (1 if meta & 0xFF else 0)
        g.emit(ind, f"{v} = FB(data[pos:pos + {n}], 'big')", f"pos += {n}")
    elif t == C.MYSQL_TYPE_ENUM:
        _length_prefix(g, ind, meta)
        if col.enum_labels is None:
            g.emit(ind, f"{v} = n")
        else:
            labels = g.const("EN", ("",) + col.enum_labels)
            g.emit(ind, f"{v} = {labels}[n] if n < {len(col.enum_labels) + 1} else n")
    elif t == C.MYSQL_TYPE_SET:
        _length_prefix(g, ind, meta)
        if col.set_labels is None:
            g.emit(ind, f"{v} = n")
        else:
            g.emit(ind, f"{v} = {g.const('SET', _set_decoder(col.set_labels))}(n)")
    elif t == JSON_DIFF_TYPE:
        g.emit(ind, "n = U32(data, pos)[0]", "pos += 4", f"{v} = JDIFF(data[pos:pos + n])", "pos += n")
    else:
        return False
    return True


def _value_code(g: _Gen, col: ColumnSpec, ind: int, v: str) -> None:
    for emit in (_int_code, _temporal_code, _string_like_code, _other_code):
        if emit(g, col, ind, v):
            return
    raise NotImplementedError(f"column type {col.type} of {col.name!r}")


def _nullmap_code(g: _Gen, present: tuple[int, ...], ind: int, mask: bool = False) -> None:
    """Code reading an image's null bitmap (one bit per present column) into ``nb``;
    with ``mask``, without the unused high bits (servers set them)."""
    nb = (len(present) + 7) // 8
    cut = f" & {(1 << len(present)) - 1:#x}" if mask and len(present) % 8 else ""
    if nb == 1:
        g.emit(ind, f"nb = data[pos]{cut}", "pos += 1")
    elif nb == 2:
        g.emit(ind, f"nb = U16(data, pos)[0]{cut}", "pos += 2")
    elif nb:
        g.emit(ind, f"nb = FB(data[pos:pos + {nb}], 'little'){cut}", f"pos += {nb}")


_DISPLAY_ITEMS = 15


def _dict_code(g: _Gen, ind: int, out: str, items: list[tuple[str, str]]) -> None:
    """``out`` = the dict of (name, expression) ``items``, in order. CPython compiles a
    display of more than 15 items to one MAP_ADD per item on a growing dict plus a
    second dict merged in (~0.9 us for 19 items); a display of the first 15 (one
    presized BUILD_CONST_KEY_MAP) and a store per further item takes about half."""
    head, rest = items[:_DISPLAY_ITEMS], items[_DISPLAY_ITEMS:]
    g.emit(ind, f"{out} = {{{', '.join(f'{k!r}: {v}' for k, v in head)}}}")
    g.emit(ind, *(f"{out}[{k!r}] = {v}" for k, v in rest))


def _branching_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], ind: int,
                    out: str) -> None:
    """Code decoding the columns of one image into dict ``out``, testing ``nb`` per column."""
    items = []
    for j, ci in enumerate(present):
        v = f"v{ci}"
        g.emit(ind, f"if nb & {1 << j}:", f"    {v} = None", "else:")
        _value_code(g, cols[ci], ind + 1, v)
        items.append((cols[ci].name, v))
    _dict_code(g, ind, out, items)


def _image_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], ind: int, out: str) -> None:
    """Code decoding one row image of the ``present`` columns into dict ``out``."""
    _nullmap_code(g, present, ind)
    _branching_code(g, cols, present, ind, out)


# --- fixed layouts -----------------------------------------------------------
# For one null bitmap the position of every value is known up to the lengths of
# the variable-length ones, so a run of fixed-size values (and the length prefix
# that ends it) is read by one ``struct`` call. The decoder inlines the layout of
# an image without NULLs and compiles the others on first sight.

_VALUE_CACHE_LIMIT = 1 << 16
_VALUE_CACHES: dict[tuple, tuple[dict, Callable[[bytes], Any]]] = {}
_LAYOUTS_PER_IMAGE = 64


def _value_cache(key: tuple, fn: Callable[[bytes], Any]) -> tuple[dict, Callable[[bytes], Any]]:
    """(cache, miss) for one encoding, shared by every column using it: raw bytes ->
    value. Only for immutable values; ``miss`` computes, stores and returns."""
    hit = _VALUE_CACHES.get(key)
    if hit is None:
        cache: dict[bytes, Any] = {}

        def miss(raw: bytes) -> Any:
            value = fn(raw)
            if len(cache) >= _VALUE_CACHE_LIMIT:
                cache.clear()
            cache[raw] = value
            return value

        hit = _VALUE_CACHES[key] = (cache, miss)
    return hit


def _frac_of(raw: bytes, at: int, fsp: int) -> int:
    """Microseconds stored after a temporal's integer part (as ``_frac_code``)."""
    if fsp <= 0:
        return 0
    if fsp <= 2:
        return raw[at] * 10000
    if fsp <= 4:
        return int.from_bytes(raw[at:at + 2], "big") * 100
    return int.from_bytes(raw[at:at + 3], "big")


def _date_value(raw: bytes) -> str:
    return T.format_date(int.from_bytes(raw, "little"))


def _datetime2_head(x: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` of a DATETIME2's stored 40-bit integer part."""
    x -= 0x8000000000
    return T.format_date_packed(x >> 17) + " " + T.format_hms(x & 0x1FFFF)


def _timestamp2_head(secs: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a TIMESTAMP2's seconds; '' for 0 (the zero date)."""
    if not secs:
        return ""
    d, secs = divmod(secs, 86400)
    return T.format_epoch_day(d) + T.format_second_of_day(secs)


def _us_expr(fsp: int, x: str) -> str:
    """Microseconds, from int ``x`` whose low bytes hold the stored fraction (as ``_frac_code``)."""
    if fsp <= 0:
        return "0"
    if fsp <= 2:
        return f"({x} & 0xFF) * 10000"
    return f"({x} & 0xFFFF) * 100" if fsp <= 4 else f"({x} & 0xFFFFFF)"


_FRAC_HIGH = tuple(f".{i:03d}" for i in range(1000))      # the first three fraction digits
_FRAC_LOW: dict[tuple[int, str], tuple[str, ...]] = {}      # (digits, suffix) -> the rest


def _fraction_code(g: _Gen, fsp: int, x: str, v: str, suffix: str) -> tuple[list[str], Callable[[str], str]]:
    """The text after a temporal's integer part, whose stored fraction is the low bytes of
    int ``x``: (lines to run first, ``text(h)``: the expression of head text ``h``
    followed by ``'.%0{fsp}d' % digits`` and ``suffix``), as ``_us_expr`` reads the
    fraction. Formatting an int with ``%`` costs more than the rest of the value, so
    one or two bytes of fraction are looked up in a cache of their texts (at most
    65,536 keys), three bytes in two tables of three-digit texts when valid."""
    if not fsp:
        return [], lambda h: f"{h} + {suffix!r}" if suffix else h
    scale, fmt = T.FRAC_SCALE[fsp], f".%0{fsp}d"
    if fsp <= 4:
        mask, mul = (0xFF, 10000) if fsp <= 2 else (0xFFFF, 100)
        cache, miss = _value_cache(("fraction", fsp, suffix),
                                   lambda stored: fmt % (stored * mul // scale) + suffix)
        c, m, f = g.const("C", cache), g.const("M", miss), f"{v}f"
        return ([f"{f} = {c}.get({x} & {mask:#x})", f"if {f} is None: {f} = {m}({x} & {mask:#x})"],
                lambda h: f"{h} + {f}")
    q, low = f"{v}q", 10 ** (fsp - 3)
    high_t = g.const("FH", _FRAC_HIGH)
    rest = _FRAC_LOW.get((fsp - 3, suffix))
    if rest is None:
        rest = _FRAC_LOW[fsp - 3, suffix] = tuple(f"{i:0{fsp - 3}d}{suffix}" for i in range(low))
    low_t = g.const("FL", rest)
    fr = g.const("FR", fmt)
    tail = f" + {suffix!r}" if suffix else ""
    return ([f"{q} = ({x} & 0xFFFFFF) // {scale}" if scale != 1 else f"{q} = {x} & 0xFFFFFF"],
            lambda h: (f"{h} + {high_t}[{q} // {low}] + {low_t}[{q} % {low}] if {q} < {10 ** fsp} "
                       f"else {h} + {fr} % {q}{tail}"))


def _head_field(g: _Gen, whole: int, fsp: int, key: str, head: Callable[[int], str],
                suffix: str, finish: Callable[[str, str, str], str]) -> _Field:
    """A temporal of ``whole`` integer bytes and a fraction, big-endian: the text of the
    integer part is cached per value; ``finish(x, h, text)`` is the value, given int ``x``
    (all the bytes), the head text ``h`` and ``text``, ``h`` followed by the fraction and
    ``suffix``."""
    fb = T.frac_bytes(fsp)
    cache, miss = _value_cache((key,), head)
    c, m = g.const("C", cache), g.const("M", miss)

    def lines(v: str, f: str) -> list[str]:
        x, h = f"{v}x", f"{v}h"
        part = f"{x} >> {8 * fb}" if fb else x
        pre, text = _fraction_code(g, fsp, x, v, suffix)
        return [f"{x} = FB({f}, 'big')", f"{h} = {c}.get({part})",
                f"if {h} is None: {h} = {m}({part})", *pre, f"{v} = {finish(x, h, text(h))}"]
    return _Field(f"{whole + fb}s", whole + fb, lines)


def _datetime2_field(g: _Gen, fsp: int) -> _Field:
    return _head_field(g, 5, fsp, "datetime2 head", _datetime2_head, "", lambda x, h, text: text)


def _timestamp2_field(g: _Gen, fsp: int) -> _Field:
    # the head text is '' for the zero timestamp, whose text TSF makes
    return _head_field(g, 4, fsp, "timestamp2 head", _timestamp2_head, "Z",
                       lambda x, h, text: f"({text}) if {h} else TSF(0, {_us_expr(fsp, x)}, {fsp})")


def _decimal_field(g: _Gen, meta: int) -> _Field:
    precision, scale = meta >> 8, meta & 0xFF
    size = decimal_size(precision, scale)
    decimal_code(precision, scale, "raw", "v", "_")       # invalid shapes raise here
    return _Field(f"{size}s", size, lambda v, f: decimal_code(precision, scale, f, v, f"{v}_"))


def _time2_value(fsp: int) -> Callable[[bytes], str]:
    def value(raw: bytes) -> str:
        return T.format_time_packed(T.time2_packed(raw, fsp), fsp)
    return value


class _Field:
    """How one non-NULL value is read in a layout.

    Fixed size: ``fmt`` (struct code giving one item of ``size`` bytes) and
    ``lines(v, f)``, code turning item ``f`` into value ``v`` (None: ``v`` is ``f``).
    Variable size: ``fmt`` reads the length prefix, ``length(f)`` turns that item
    into the byte count ``n`` and ``body(n)`` is the value of ``data[pos:pos + n]``.
    """

    __slots__ = ("fmt", "size", "lines", "length", "body")

    def __init__(self, fmt: str, size: int, lines: Callable[[str, str], list[str]] | None = None,
                 length: Callable[[str], str] | None = None,
                 body: Callable[[str], str] | None = None) -> None:
        self.fmt, self.size, self.lines, self.length, self.body = fmt, size, lines, length, body


def _prefix_field(nbytes: int, body: Callable[[str], str]) -> _Field:
    """A value with a little-endian length prefix of ``nbytes`` bytes (``_length_prefix``)."""
    fmt = {1: "B", 2: "H", 4: "I"}.get(nbytes)
    if fmt:
        return _Field(fmt, nbytes, length=lambda f: f, body=body)
    return _Field(f"{nbytes}s", nbytes, length=lambda f: f"FB({f}, 'little')", body=body)


def _cached_field(g: _Gen, size: int, key: tuple, fn: Callable[[bytes], Any]) -> _Field:
    cache, miss = _value_cache(key, fn)
    c, m = g.const("C", cache), g.const("M", miss)
    return _Field(f"{size}s", size, lambda v, f: [f"{v} = {c}.get({f})", f"if {v} is None: {v} = {m}({f})"])


def _expr_field(fmt: str, size: int, expr: str) -> _Field:
    """Fixed size; ``expr`` is the value, written over ``{f}``."""
    return _Field(fmt, size, lambda v, f: [f"{v} = " + expr.format(f=f)])


_INT_FMT = {C.MYSQL_TYPE_TINY: ("b", 1), C.MYSQL_TYPE_SHORT: ("h", 2), C.MYSQL_TYPE_LONG: ("i", 4),
            C.MYSQL_TYPE_LONGLONG: ("q", 8)}


def _layout_field(g: _Gen, col: ColumnSpec) -> _Field:
    """The ``_Field`` of a column: the same values as ``_value_code``, read differently."""
    t, meta = col.type, col.meta
    if t in _INT_FMT:
        fmt, size = _INT_FMT[t]
        return _Field(fmt.upper() if col.unsigned else fmt, size)
    if t == C.MYSQL_TYPE_INT24:
        return _expr_field("3s", 3, f"FB({{f}}, 'little', signed={not col.unsigned})")
    if t == C.MYSQL_TYPE_YEAR:
        return _expr_field("B", 1, "{f} + 1900 if {f} else 0")
    if t == C.MYSQL_TYPE_FLOAT:
        return _cached_field(g, 4, ("float",), float32_value)
    if t == C.MYSQL_TYPE_DOUBLE:
        return _Field("d", 8)
    if t == C.MYSQL_TYPE_NULL:
        return _Field("", 0, lambda v, f: [f"{v} = None"])
    if t in (C.MYSQL_TYPE_DATE, C.MYSQL_TYPE_NEWDATE):
        return _cached_field(g, 3, ("date",), _date_value)
    if t == C.MYSQL_TYPE_DATETIME2:
        return _datetime2_field(g, meta)
    if t == C.MYSQL_TYPE_TIMESTAMP2:
        return _timestamp2_field(g, meta)
    if t == C.MYSQL_TYPE_TIME2:
        return _cached_field(g, 3 + T.frac_bytes(meta), ("time2", meta), _time2_value(meta))
    if t == C.MYSQL_TYPE_TIMESTAMP:
        return _expr_field("I", 4, "TSF({f}, 0, 0)")
    if t == C.MYSQL_TYPE_TIME:
        return _expr_field("3s", 3, "OLDTIMEF(FB({f}, 'little', signed=True))")
    if t == C.MYSQL_TYPE_DATETIME:
        return _expr_field("Q", 8, "OLDDTF({f})")
    if t == C.MYSQL_TYPE_NEWDECIMAL:
        return _decimal_field(g, meta)
    if t == C.MYSQL_TYPE_BIT:
        n = (meta >> 8) + (1 if meta & 0xFF else 0)
        return _Field("B", 1) if n == 1 else _expr_field(f"{n}s", n, "FB({f}, 'big')")
    if t in (C.MYSQL_TYPE_ENUM, C.MYSQL_TYPE_SET):
        return _enum_set_field(g, col)
    return _var_field(g, col)


def _enum_set_field(g: _Gen, col: ColumnSpec) -> _Field:
    meta = col.meta
    fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}.get(meta)
    n = "{f}" if fmt else "FB({f}, 'little')"
    fmt = fmt or f"{meta}s"
    if col.type == C.MYSQL_TYPE_ENUM:
        if col.enum_labels is None:
            return _expr_field(fmt, meta, n)
        labels = g.const("EN", ("",) + col.enum_labels)
        k = len(col.enum_labels) + 1
        if n == "{f}":
            return _expr_field(fmt, meta, f"{labels}[{{f}}] if {{f}} < {k} else {{f}}")
        return _Field(fmt, meta, lambda v, f: [f"{v} = " + n.format(f=f),
                                               f"if {v} < {k}: {v} = {labels}[{v}]"])
    if col.set_labels is None:
        return _expr_field(fmt, meta, n)
    decode = g.const("SET", _set_decoder(col.set_labels))
    if len(col.set_labels) > 8 or n != "{f}":
        return _expr_field(fmt, meta, f"{decode}({n})")
    table = g.const("SETS", tuple(tuple(decode_set(b, col.set_labels)) for b in range(1 << len(col.set_labels))))
    return _expr_field(fmt, meta, f"list({table}[{{f}}]) if {{f}} < {1 << len(col.set_labels)} else {decode}({{f}})")


def _var_field(g: _Gen, col: ColumnSpec) -> _Field:
    t, meta = col.type, col.meta
    if t in (C.MYSQL_TYPE_VARCHAR, C.MYSQL_TYPE_VAR_STRING):
        return _prefix_field(1 if meta < 256 else 2, lambda n: _string_code(g, col, n))
    if t == C.MYSQL_TYPE_STRING:
        return _prefix_field(1 if meta < 256 else 2, lambda n: _string_code(g, col, n, pad=meta))
    if t in (C.MYSQL_TYPE_BLOB, C.MYSQL_TYPE_TINY_BLOB, C.MYSQL_TYPE_MEDIUM_BLOB,
             C.MYSQL_TYPE_LONG_BLOB, C.MYSQL_TYPE_JSON, C.MYSQL_TYPE_GEOMETRY, C.MYSQL_TYPE_VECTOR):
        if not 1 <= meta <= 4:
            raise ValueError(f"invalid length-bytes metadata {meta} for type {t}")
        wrap = {C.MYSQL_TYPE_JSON: "JSON", C.MYSQL_TYPE_GEOMETRY: "HEX", C.MYSQL_TYPE_VECTOR: "VEC"}.get(t)
        if wrap:
            return _prefix_field(meta, lambda n: f"{wrap}(data[pos:pos + {n}])")
        return _prefix_field(meta, lambda n: _string_code(g, col, n))
    if t == JSON_DIFF_TYPE:
        return _prefix_field(4, lambda n: f"JDIFF(data[pos:pos + {n}])")
    raise NotImplementedError(f"column type {col.type} of {col.name!r}")


def _layout_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], nb: int,
                 ind: int, out: str) -> None:
    """Code decoding one image whose null bitmap is ``nb`` into dict ``out`` (at ``pos``,
    after the bitmap): runs of fixed-size values are read by one struct call each."""
    items: list[tuple[str, str]] = []        # (column name, value expression)
    run: list[tuple[str, int, str]] = []      # (fmt, size, item variable)
    after: list[str] = []                     # code turning run items into values

    def flush() -> None:
        if not run:
            return
        fmt = "".join(r[0] for r in run)
        size = sum(r[1] for r in run)
        names = [r[2] for r in run if r[0]]
        if names:
            reader = g.const("R", struct.Struct("<" + fmt).unpack_from)
            g.emit(ind, f"{', '.join(names)}, = {reader}(data, pos)")
        if size:
            g.emit(ind, f"pos += {size}")
        g.emit(ind, *after)
        run.clear()
        after.clear()

    for j, ci in enumerate(present):
        col = cols[ci]
        if nb >> j & 1:
            items.append((col.name, "None"))
            continue
        field = _layout_field(g, col)
        v = f"v{ci}"
        if field.body is not None:              # variable size: the prefix ends the run
            run.append((field.fmt, field.size, f"n{ci}"))
            flush()
            n = field.length(f"n{ci}")
            if n != f"n{ci}":
                g.emit(ind, f"n{ci} = {n}")
            g.emit(ind, f"{v} = {field.body(f'n{ci}')}", f"pos += n{ci}")
            items.append((col.name, v))
            continue
        item = f"f{ci}"
        run.append((field.fmt, field.size, item if field.fmt else ""))
        if field.lines is None:
            items.append((col.name, item))
        else:
            after.extend(field.lines(v, item))
            items.append((col.name, v))
    flush()
    _dict_code(g, ind, out, items)


def compile_generated(g: _Gen, name: str, label: str) -> Callable:
    env = dict(_STATIC_ENV, **g.env)
    exec(compile("\n".join(g.lines), label, "exec"), env)
    return env[name]


def per_bitmap(params: str, write: Callable[[_Gen, int | None], None], result: str, limit: int,
               label: str) -> tuple[dict, Callable]:
    """(functions, make) of one image shape: ``functions[nb]`` is ``def f(params)``,
    its body written by ``write(g, nb)`` for null bitmap ``nb``, returning ``result``;
    ``make(nb)`` compiles and stores one, or, once ``limit`` bitmaps have one, returns
    a single function written by ``write(g, None)`` (testing ``nb`` per column)."""
    functions: dict[int, Callable] = {}
    general: list[Callable] = []

    def compiled(nb: int | None) -> Callable:
        g = _Gen()
        g.emit(0, f"def f({params}):")
        write(g, nb)
        g.emit(1, f"return {result}")
        return compile_generated(g, "f", f"<{label}, null bitmap {'any' if nb is None else hex(nb)}>")

    def make(nb: int) -> Callable:
        if len(functions) >= limit:
            if not general:
                general.append(compiled(None))
            return general[0]
        fn = functions[nb] = compiled(nb)
        return fn

    return functions, make


def bitmap_dispatch(g: _Gen, ind: int, functions: dict, make: Callable, call: str) -> None:
    """The ``else`` branch after an inlined ``if nb == 0:``: the function of bitmap
    ``nb`` (compiled on first sight) called as ``call`` (``f(...)``)."""
    fs, mk = g.const("L", functions), g.const("MK", make)
    g.emit(ind, "else:",
           f"    f = {fs}.get(nb)",
           f"    if f is None: f = {mk}(nb)",
           f"    {call}")


def _fast_image_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], ind: int,
                     out: str) -> None:
    """One image: the layout without NULLs inline, the others through ``per_bitmap``
    (the per-column decoder once an image has had many bitmaps). The bitmap's unused
    high bits (servers set them) are masked off first."""
    if not present:
        g.emit(ind, f"{out} = {{}}")
        return
    _nullmap_code(g, present, ind, mask=True)
    g.emit(ind, "if nb == 0:")
    _layout_code(g, cols, present, 0, ind + 1, out)

    def write(g2: _Gen, nb: int | None) -> None:
        if nb is None:
            _branching_code(g2, cols, present, 1, "a")
        else:
            _layout_code(g2, cols, present, nb, 1, "a")

    functions, make = per_bitmap("data, pos, nb", write, "a, pos", _LAYOUTS_PER_IMAGE, "row image")
    bitmap_dispatch(g, ind, functions, make, f"{out}, pos = f(data, pos, nb)")


def _rows_function(image_code: Callable, cols: tuple[ColumnSpec, ...], kind: str,
                   present: tuple[int, ...], present_after: tuple[int, ...] | None,
                   label: str) -> RowsDecoder:
    """The loop over a rows event's rows, each image decoded by ``image_code``."""
    g = _Gen()
    g.emit(0, "def decode_rows(data, pos, end):", "    rows = []", "    append = rows.append",
           "    while pos < end:")
    image_code(g, cols, present, 2, "a")
    if kind == "u":
        image_code(g, cols, present_after or present, 2, "b")
        g.emit(2, "append((a, b))")
    else:
        g.emit(2, "append((None, a))" if kind == "c" else "append((a, None))")
    g.emit(1, "return rows, pos")
    return compile_generated(g, "decode_rows", label)


def compile_rows_decoder(
    cols: tuple[ColumnSpec, ...], kind: str, present: tuple[int, ...],
    present_after: tuple[int, ...] | None = None,
) -> RowsDecoder:
    """The decoding function for rows events of ``kind`` ('c', 'u', 'd') over these columns."""
    key = (cols, kind, present, present_after)
    fn = _CACHE.get(key)
    if fn is not None:
        _CACHE.move_to_end(key)
        return fn
    fn = _rows_function(_fast_image_code, cols, kind, present, present_after,
                        f"<rows decoder {len(cols)} cols>")
    _CACHE[key] = fn
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return fn


def compile_branching_decoder(
    cols: tuple[ColumnSpec, ...], kind: str, present: tuple[int, ...],
    present_after: tuple[int, ...] | None = None,
) -> RowsDecoder:
    """As ``compile_rows_decoder`` with one null-bitmap test per column and no layouts:
    the reference the layout decoders are tested against (not cached)."""
    return _rows_function(_image_code, cols, kind, present, present_after,
                          f"<rows decoder {len(cols)} cols, branching>")


def compile_image_decoder(cols: tuple[ColumnSpec, ...], present: tuple[int, ...]) -> RowsDecoder:
    """Decode exactly one row image at ``pos``: returns ``([image], pos)``."""
    key = (cols, "image", present, None)
    fn = _CACHE.get(key)
    if fn is None:
        g = _Gen()
        g.emit(0, "def decode_image(data, pos, end):")
        _image_code(g, cols, present, 1, "a")
        g.emit(1, "return [a], pos")
        fn = _CACHE[key] = compile_generated(g, "decode_image", "<row image decoder>")
    return fn
