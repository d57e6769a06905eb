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
from .values.decimal import decimal_size, make_decimal_decoder
from .values.json_binary import decode_json
from .values.json_diff import JSON_DIFF_TYPE, read_json_diffs

__all__ = ["compile_rows_decoder", "RowsDecoder", "float32_value", "vector_value"]

RowsDecoder = Callable[[bytes, int, int], tuple[list, int]]

_F32 = struct.Struct("<f")
_F32_UNPACK, _F32_PACK = _F32.unpack, _F32.pack
_CACHE: OrderedDict[tuple, RowsDecoder] = OrderedDict()
_CACHE_SIZE = 4096


def float32_value(raw: bytes) -> float:
    """A FLOAT as the shortest decimal that round-trips through float32 (1.1, not 1.100000023841858)."""
    x = _F32_UNPACK(raw)[0]
    y = float("%.6g" % x)
    if _F32_PACK(y) == raw:
        return y
    for fmt in ("%.7g", "%.8g"):
        y = float(fmt % x)
        if _F32_PACK(y) == raw:
            return y
    return x  # 9 significant digits always round-trip: x itself is the shortest


def vector_value(raw: bytes) -> list[float]:
    """VECTOR: little-endian float32 elements."""
    if len(raw) % 4:
        raise ValueError("VECTOR length is not a multiple of 4")
    return [float32_value(raw[i:i + 4]) for i in range(0, len(raw), 4)]


def _b64(raw: bytes) -> str:
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def _set_decoder(labels: tuple[str, ...]) -> Callable[[int], list[str]]:
    cache: dict[int, tuple[str, ...]] = {}

    def decode(bits: int) -> list[str]:
        t = cache.get(bits)
        if t is None:
            t = tuple(lab for i, lab in enumerate(labels) if bits >> i & 1)
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
    "B64": _b64, "JSON": decode_json, "DATEC": T._ymd_cache, "DATEF": T.format_date,
    "DAYC": T._day_cache, "DAYF": T.format_date_packed, "HMSC": T._hms_cache,
    "HMSF": T.format_hms, "TSF": T.format_timestamp,
    "EPC": T._epoch_day_cache, "EPF": T.format_epoch_day, "SODC": T._sod_cache,
    "SODF": T.format_second_of_day, "TIME2P": T.time2_packed,
    "TIMEF": T.format_time_packed, "OLDTIMEF": T.format_old_time,
    "OLDDTF": T.format_old_datetime, "HEX": bytes.hex, "JDIFF": read_json_diffs,
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
    if col.codec is None:
        return f"B64({raw}.ljust({pad}, b'\\x00'))" if pad else f"B64({raw})"
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
        g.emit(ind, "x = int.from_bytes(data[pos:pos + 5], 'big') - 0x8000000000",
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
        g.emit(ind, f"n = int.from_bytes(data[pos:pos + {nbytes}], 'little')", f"pos += {nbytes}")


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
        g.emit(ind, f"{v} = int.from_bytes(data[pos:pos + {n}], 'big')", f"pos += {n}")
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


def _image_code(g: _Gen, cols: tuple[ColumnSpec, ...], present: tuple[int, ...], ind: int, out: str) -> None:
    """Code decoding one row image of the ``present`` columns into dict ``out``."""
    nb = (len(present) + 7) // 8
    if nb == 1:
        g.emit(ind, "nb = data[pos]", "pos += 1")
    elif nb:
        g.emit(ind, f"nb = int.from_bytes(data[pos:pos + {nb}], 'little')", f"pos += {nb}")
    items = []
    for j, ci in enumerate(present):
        v = f"v{ci}"
        g.emit(ind, f"if nb & {1 << j}:", f"    {v} = None", "else:")
        _value_code(g, cols[ci], ind + 1, v)
        items.append(f"{cols[ci].name!r}: {v}")
    g.emit(ind, f"{out} = {{{', '.join(items)}}}")


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
    g = _Gen()
    g.emit(0, "def decode_rows(data, pos, end):", "    rows = []", "    append = rows.append",
           "    while pos < end:")
    _image_code(g, cols, present, 2, "a")
    if kind == "u":
        _image_code(g, cols, present_after or present, 2, "b")
        g.emit(2, "append((a, b))")
    else:
        g.emit(2, "append((None, a))" if kind == "c" else "append((a, None))")
    g.emit(1, "return rows, pos")
    env = dict(_STATIC_ENV, **g.env)
    exec(compile("\n".join(g.lines), f"<rows decoder {len(cols)} cols>", "exec"), env)
    fn = env["decode_rows"]
    _CACHE[key] = fn
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return fn


def compile_image_decoder(cols: tuple[ColumnSpec, ...], present: tuple[int, ...]) -> RowsDecoder:
    """Decode exactly one row image at ``pos``: returns ``([image], pos)``."""
    key = (cols, "image", present, None)
    fn = _CACHE.get(key)
    if fn is None:
        g = _Gen()
        g.emit(0, "def decode_image(data, pos, end):")
        _image_code(g, cols, present, 1, "a")
        g.emit(1, "return [a], pos")
        env = dict(_STATIC_ENV, **g.env)
        exec(compile("\n".join(g.lines), "<row image decoder>", "exec"), env)
        fn = _CACHE[key] = env["decode_image"]
    return fn
