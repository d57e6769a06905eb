"""TABLE_MAP_EVENT body: column types, per-type metadata and optional metadata."""

from __future__ import annotations

from typing import Any

from . import constants as C
from .reader import Reader, ShortRead

__all__ = ["read_column_metas", "read_optional_metadata"]

_ONE_BYTE = frozenset({
    C.MYSQL_TYPE_FLOAT, C.MYSQL_TYPE_DOUBLE, C.MYSQL_TYPE_BLOB, C.MYSQL_TYPE_TINY_BLOB,
    C.MYSQL_TYPE_MEDIUM_BLOB, C.MYSQL_TYPE_LONG_BLOB, C.MYSQL_TYPE_GEOMETRY, C.MYSQL_TYPE_JSON,
    C.MYSQL_TYPE_VECTOR, C.MYSQL_TYPE_TIMESTAMP2, C.MYSQL_TYPE_DATETIME2, C.MYSQL_TYPE_TIME2,
})
_BIG_ENDIAN_PAIR = frozenset({
    C.MYSQL_TYPE_NEWDECIMAL, C.MYSQL_TYPE_STRING, C.MYSQL_TYPE_ENUM, C.MYSQL_TYPE_SET,
})


def read_column_metas(types: bytes, meta: bytes) -> tuple[int, ...]:
    """Per-column metadata as ints, in mysqlbinlog's convention (``meta=`` in its output)."""
    out = []
    pos = 0
    for t in types:
        if t in _ONE_BYTE:
            out.append(meta[pos])
            pos += 1
        elif t in (C.MYSQL_TYPE_VARCHAR, C.MYSQL_TYPE_VAR_STRING):
            out.append(meta[pos] | meta[pos + 1] << 8)
            pos += 2
        elif t == C.MYSQL_TYPE_BIT:
            out.append(meta[pos + 1] << 8 | meta[pos])
            pos += 2
        elif t in _BIG_ENDIAN_PAIR:
            out.append(meta[pos] << 8 | meta[pos + 1])
            pos += 2
        else:
            out.append(0)
    if pos != len(meta):
        raise ShortRead(f"column metadata is {len(meta)} bytes, the column types need {pos}")
    return tuple(out)


def _bits(raw: bytes) -> tuple[bool, ...]:
    """Bitmap with the first column in the most significant bit."""
    return tuple(bool(b & (0x80 >> i)) for b in raw for i in range(8))


def _ints(r: Reader) -> tuple[int, ...]:
    out = []
    while r.remaining():
        out.append(r.packed())
    return tuple(out)


def _pairs(r: Reader) -> tuple[tuple[int, int], ...]:
    out = []
    while r.remaining():
        out.append((r.packed(), r.packed()))
    return tuple(out)


def _strings(r: Reader) -> tuple[str, ...]:
    out = []
    while r.remaining():
        out.append(r.take(r.packed()).decode("utf-8", "backslashreplace"))
    return tuple(out)


def _string_lists(r: Reader) -> tuple[tuple[str, ...], ...]:
    out = []
    while r.remaining():
        n = r.packed()
        out.append(tuple(r.take(r.packed()).decode("utf-8", "backslashreplace") for _ in range(n)))
    return tuple(out)


def _default_charset(r: Reader) -> tuple[int, tuple[tuple[int, int], ...]]:
    default = r.packed()
    return default, _pairs(r)


_FIELDS: dict[int, tuple[str, Any]] = {
    C.SIGNEDNESS: ("signedness", lambda r: _bits(r.rest())),
    C.DEFAULT_CHARSET: ("default_charset", _default_charset),
    C.COLUMN_CHARSET: ("column_charset", _ints),
    C.COLUMN_NAME: ("column_name", _strings),
    C.SET_STR_VALUE: ("set_str_value", _string_lists),
    C.ENUM_STR_VALUE: ("enum_str_value", _string_lists),
    C.GEOMETRY_TYPE: ("geometry_type", _ints),
    C.SIMPLE_PRIMARY_KEY: ("simple_primary_key", _ints),
    C.PRIMARY_KEY_WITH_PREFIX: ("primary_key_with_prefix", _pairs),
    C.ENUM_AND_SET_DEFAULT_CHARSET: ("enum_and_set_default_charset", _default_charset),
    C.ENUM_AND_SET_COLUMN_CHARSET: ("enum_and_set_column_charset", _ints),
    C.COLUMN_VISIBILITY: ("column_visibility", lambda r: _bits(r.rest())),
    C.VECTOR_DIMENSIONALITY: ("vector_dimensionality", _ints),
}


def read_optional_metadata(r: Reader, ncols: int) -> dict[str, Any]:
    """TLV fields after the null bitmap; unknown field types kept raw as ``type_N``."""
    opt: dict[str, Any] = {}
    while r.remaining():
        ftype = r.u8()
        length = r.packed()
        sub = Reader(r.buf, r.pos, r.pos + length)
        r.take(length)
        name, read = _FIELDS.get(ftype, (f"type_{ftype}", lambda x: x.rest()))
        opt[name] = read(sub)
    if "column_visibility" in opt:
        opt["column_visibility"] = opt["column_visibility"][:ncols]
    return opt
