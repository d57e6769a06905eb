"""MySQL binary JSON (the JSON column's storage format) -> Python values.

A value is a type byte and its data. Objects and arrays come in a small form
(2-byte counts and offsets) and a large one (4-byte); their entries point at
values by offset from the container's start, or hold small scalars inline.
Opaque values carry a MySQL column type: DECIMAL becomes its exact text, dates
and times their MySQL text (always 6 fraction digits), anything else
``"base64:typeN:..."`` as MySQL's own JSON output prints it.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from . import temporal
from .decimal import decode_decimal

__all__ = ["decode_json", "decode_json_value", "JsonDecodeError"]

_MAX_DEPTH = 150
_S16 = struct.Struct("<h").unpack_from
_U16 = struct.Struct("<H").unpack_from
_S32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_S64 = struct.Struct("<q").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct("<d").unpack_from

JSONB_TYPE_SMALL_OBJECT, JSONB_TYPE_LARGE_OBJECT = 0x0, 0x1
JSONB_TYPE_SMALL_ARRAY, JSONB_TYPE_LARGE_ARRAY = 0x2, 0x3
JSONB_TYPE_LITERAL = 0x4
JSONB_TYPE_INT16, JSONB_TYPE_UINT16 = 0x5, 0x6
JSONB_TYPE_INT32, JSONB_TYPE_UINT32 = 0x7, 0x8
JSONB_TYPE_INT64, JSONB_TYPE_UINT64 = 0x9, 0xA
JSONB_TYPE_DOUBLE = 0xB
JSONB_TYPE_STRING = 0xC
JSONB_TYPE_OPAQUE = 0xF

_LITERALS = {0: None, 1: True, 2: False}
_FIXED = {
    JSONB_TYPE_INT16: (2, _S16), JSONB_TYPE_UINT16: (2, _U16),
    JSONB_TYPE_INT32: (4, _S32), JSONB_TYPE_UINT32: (4, _U32),
    JSONB_TYPE_INT64: (8, _S64), JSONB_TYPE_UINT64: (8, _U64),
    JSONB_TYPE_DOUBLE: (8, _F64),
}


class JsonDecodeError(ValueError):
    """Binary JSON that does not follow the format."""


def decode_json(raw: bytes) -> Any:
    """A whole JSON column value (type byte first). Empty means JSON null."""
    if not raw:
        return None
    return decode_json_value(raw[0], bytes(raw), 1, len(raw))


def decode_json_value(t: int, buf: bytes, start: int, end: int, depth: int = 0) -> Any:
    """The value of type ``t`` whose data is ``buf[start:end]``."""
    if depth > _MAX_DEPTH:
        raise JsonDecodeError("JSON nested too deeply")
    if t <= JSONB_TYPE_LARGE_ARRAY:
        return _container(t, buf, start, end, depth)
    if t == JSONB_TYPE_STRING:
        n, pos = _varlen(buf, start, end)
        if pos + n > end:
            raise JsonDecodeError("JSON string overruns its value")
        return buf[pos:pos + n].decode("utf-8", "backslashreplace")
    fixed = _FIXED.get(t)
    if fixed is not None:
        if start + fixed[0] > end:
            raise JsonDecodeError("JSON number overruns its value")
        return fixed[1](buf, start)[0]
    if t == JSONB_TYPE_LITERAL:
        return _literal(buf[start] if start < end else -1)
    if t == JSONB_TYPE_OPAQUE:
        return _opaque(buf, start, end)
    raise JsonDecodeError(f"unknown JSON value type {t}")


def _literal(code: int) -> Any:
    if code not in _LITERALS:
        raise JsonDecodeError(f"unknown JSON literal {code}")
    return _LITERALS[code]


def _varlen(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """JSON's 7-bit little-endian length with continuation bits."""
    n = shift = 0
    while True:
        if pos >= end or shift > 28:
            raise JsonDecodeError("bad JSON length")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def _container(t: int, buf: bytes, start: int, end: int, depth: int) -> Any:
    large = t & 1
    w = 4 if large else 2
    rd = _U32 if large else _U16
    if start + 2 * w > end:
        raise JsonDecodeError("JSON container header overruns")
    count, size = rd(buf, start)[0], rd(buf, start + w)[0]
    cend = start + size
    if cend > end:
        raise JsonDecodeError("JSON container overruns its value")
    is_obj = t <= JSONB_TYPE_LARGE_OBJECT
    pos = start + 2 * w
    keys = []
    if is_obj:
        for _ in range(count):
            if pos + w + 2 > cend:
                raise JsonDecodeError("JSON key entry overruns")
            koff, klen = rd(buf, pos)[0], _U16(buf, pos + w)[0]
            if start + koff + klen > cend:
                raise JsonDecodeError("JSON key overruns")
            keys.append(buf[start + koff:start + koff + klen].decode("utf-8", "backslashreplace"))
            pos += w + 2
    values = []
    for _ in range(count):
        if pos + 1 + w > cend:
            raise JsonDecodeError("JSON value entry overruns")
        values.append(_entry(buf[pos], buf, pos + 1, start, cend, large, depth))
        pos += 1 + w
    return dict(zip(keys, values)) if is_obj else values


def _entry(vt: int, buf: bytes, pos: int, start: int, cend: int, large: int, depth: int) -> Any:
    """One value entry: inline scalar, or an offset from the container start."""
    if vt == JSONB_TYPE_LITERAL:
        return _literal(buf[pos])
    if vt == JSONB_TYPE_INT16:
        return _S16(buf, pos)[0]
    if vt == JSONB_TYPE_UINT16:
        return _U16(buf, pos)[0]
    if large and vt == JSONB_TYPE_INT32:
        return _S32(buf, pos)[0]
    if large and vt == JSONB_TYPE_UINT32:
        return _U32(buf, pos)[0]
    off = (_U32 if large else _U16)(buf, pos)[0]
    if start + off >= cend:
        raise JsonDecodeError("JSON value offset out of range")
    return decode_json_value(vt, buf, start + off, cend, depth + 1)


def _opaque(buf: bytes, start: int, end: int) -> Any:
    if start >= end:
        raise JsonDecodeError("JSON opaque value is empty")
    field_type = buf[start]
    n, pos = _varlen(buf, start + 1, end)
    if pos + n > end:
        raise JsonDecodeError("JSON opaque value overruns")
    data = buf[pos:pos + n]
    if field_type == 246 and n >= 2:                       # MYSQL_TYPE_NEWDECIMAL
        return decode_decimal(data[2:], data[0], data[1])
    if field_type in (7, 10, 11, 12, 14) and n >= 8:        # TIMESTAMP, DATE, TIME, DATETIME
        return _packed_temporal(field_type, _S64(data, 0)[0])
    return f"base64:type{field_type}:{base64.b64encode(data).decode('ascii')}"


def _packed_temporal(field_type: int, packed: int) -> str:
    if field_type == 11:
        return temporal.format_time_packed(packed, 6)
    if packed < 0:
        packed = -packed
    intpart, us = packed >> 24, packed & 0xFFFFFF
    if field_type in (10, 14):
        return temporal.format_date_packed(intpart >> 17)
    return temporal.format_datetime2(intpart, us, 6)
