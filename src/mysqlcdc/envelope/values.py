"""Envelope values <-> typed Python values, by the column's MySQL type.

The envelope encodes values for exactness (docs/ENVELOPE.md): DECIMAL as a string,
DATE/DATETIME/TIMESTAMP/TIME as text, binary strings as base64. User code (python
transforms, plugins) gets them as Python types instead, and what it hands back is
encoded again; a value it did not touch comes back as exactly the same text.

================================  ==========================================
MySQL type                        Python type
================================  ==========================================
TINYINT .. BIGINT (any sign), BIT int
YEAR                              int
DECIMAL / NUMERIC                 decimal.Decimal
FLOAT, DOUBLE                     float
CHAR, VARCHAR, TEXT types, ENUM   str
BINARY, VARBINARY, BLOB types     bytes
SET                               set of str
DATE                              datetime.date
DATETIME                          datetime.datetime, naive
TIMESTAMP                         datetime.datetime, tzinfo UTC
TIME                              datetime.timedelta (negative and past 24 h kept)
JSON                              dict, list, str, int, float, bool or None
GEOMETRY types                    bytes (SRID-prefixed WKB)
zero or invalid dates             str, the text MySQL shows (``"0000-00-00"``)
NULL                              None
================================  ==========================================

Without a definition for the table (no schema history), values stay as the
envelope's JSON has them.
"""

from __future__ import annotations

import binascii

import orjson
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable

from mysqlcdc.schema.model import ColumnDef, TableDef

__all__ = ["image_decoder", "image_decoder_keeping", "image_encoder", "image_dumper",
           "encode_value", "time_text", "PYTHON_TYPES"]

PYTHON_TYPES = __doc__

Image = dict[str, Any]
_BINARY = frozenset(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"))
_TEXT = frozenset(("char", "varchar", "tinytext", "text", "mediumtext", "longtext"))
_GEOMETRY = frozenset(("geometry", "point", "linestring", "polygon", "multipoint",
                       "multilinestring", "multipolygon", "geometrycollection", "geomcollection"))


def _kind(col: ColumnDef) -> str | None:
    """The conversion a column's values need (None: the JSON value is the Python value)."""
    t = col.data_type
    if t in ("decimal", "numeric"):
        return "decimal"
    if t in _BINARY or (t in _TEXT and col.charset == "binary"):
        return "binary"
    if t in _GEOMETRY:
        return "geometry"
    if t in ("set", "date", "datetime", "timestamp", "time"):
        return t
    return None


# --- envelope -> Python ------------------------------------------------------


def _to_date(v: str) -> date | str:
    try:
        return date.fromisoformat(v)
    except ValueError:
        return v                       # a zero or invalid date stays as MySQL shows it


def _to_datetime(v: str) -> datetime | str:
    if v.startswith("0000") or "-00" in v[:10]:
        return v
    try:
        return datetime.fromisoformat(v)
    except ValueError:
        return v


def _to_time(v: str) -> timedelta:
    negative = v[0] == "-"
    h, m, rest = (v[1:] if negative else v).split(":")
    s, _, frac = rest.partition(".")
    us = int(frac.ljust(6, "0")[:6]) if frac else 0
    t = timedelta(seconds=int(h) * 3600 + int(m) * 60 + int(s), microseconds=us)
    return -t if negative else t


def _to_bytes(v: str) -> bytes:
    return binascii.a2b_base64(v)


_DECODE: dict[str, Callable[[Any], Any]] = {
    "decimal": Decimal, "binary": _to_bytes, "geometry": bytes.fromhex, "set": set,
    "date": _to_date, "datetime": _to_datetime, "timestamp": _to_datetime, "time": _to_time,
}


def image_decoder(table: TableDef | None) -> Callable[[Image], Image]:
    """A function turning one row image (the JSON object, parsed) into typed values, in
    place. Only the columns whose values need a conversion are visited."""
    plan = [] if table is None else [(c.name, _DECODE[k]) for c in table.columns
                                      if (k := _kind(c)) is not None]
    if not plan:
        return _same

    def decode(image: Image) -> Image:
        for name, fn in plan:
            value = image.get(name)
            if value is not None and (type(value) is str or type(value) is list):
                image[name] = fn(value)
        return image
    return decode


def _same(image: Image) -> Image:
    return image


# --- Python -> envelope ------------------------------------------------------


def _fraction(us: int, fsp: int | None) -> str:
    if fsp is None:
        return f".{us:06d}" if us else ""
    return f".{us:06d}"[: fsp + 1] if fsp else ""


def _datetime_text(v: datetime, fsp: int | None, utc: bool) -> str:
    if utc or v.tzinfo is not None:
        if v.tzinfo is not None:
            v = v.astimezone(timezone.utc)
        return f"{v:%Y-%m-%dT%H:%M:%S}{_fraction(v.microsecond, fsp)}Z"
    return f"{v:%Y-%m-%d %H:%M:%S}{_fraction(v.microsecond, fsp)}"


def time_text(v: timedelta, fsp: int | None = None) -> str:
    """A timedelta as MySQL TIME text: ``-838:59:59.000000`` style."""
    sign = "-" if v < timedelta(0) else ""
    total_us = abs(v) // timedelta(microseconds=1)
    secs, us = divmod(total_us, 1_000_000)
    h, rem = divmod(secs, 3600)
    return f"{sign}{h:02d}:{rem // 60:02d}:{rem % 60:02d}{_fraction(us, fsp)}"


def encode_value(value: Any, col: ColumnDef | None = None) -> Any:
    """One typed value as the envelope's JSON holds it (``col``: the column, when known).

    Raises TypeError for a value with no envelope encoding."""
    if value is None or type(value) in (int, str, float, bool):
        return value
    kind = _kind(col) if col is not None else None
    fsp = col.fsp if col is not None else None
    if isinstance(value, Decimal):
        scale = col.scale if col is not None else None
        return f"{value:.{scale}f}" if scale is not None else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return raw.hex() if kind == "geometry" else binascii.b2a_base64(raw, newline=False).decode()
    if isinstance(value, datetime):
        return _datetime_text(value, fsp, kind == "timestamp")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return time_text(value, fsp)
    if isinstance(value, (set, frozenset)):
        order = {label: i for i, label in enumerate(col.set_values)} if col is not None else {}
        return sorted(value, key=lambda s: (order.get(s, len(order)), s))
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, int):          # bool and int subclasses (IntEnum)
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"a value of type {type(value).__name__} has no envelope encoding "
                    f"(column {col.name if col is not None else '?'})")


def image_encoder(table: TableDef | None) -> Callable[[Image], Image]:
    """A function turning a typed image back into the envelope's JSON values (a new dict)."""
    columns = {} if table is None else {c.name: c for c in table.columns}

    def encode(image: Image) -> Image:
        out = {}
        for name, value in image.items():
            if value is None or type(value) in (int, str, float, bool):
                out[name] = value
            else:
                out[name] = encode_value(value, columns.get(name))
        return out
    return encode


def _generic(value: Any) -> Any:
    """orjson's ``default``: a value of a type JSON has not (Decimal, bytes, dates ...)."""
    return encode_value(value)


_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


Originals = dict[str, tuple[Any, Any]]    # column -> (typed value handed out, its JSON value)


def image_dumper(table: TableDef | None) -> Callable[..., bytes]:
    """``dump(image, originals=None)``: a typed image -> its envelope JSON text (bytes), in
    one pass. Columns whose type needs it are encoded by that type, except a value that
    is still the very (immutable) object :func:`image_decoder_keeping` handed out, which
    gets its original JSON value back without any work; anything else of a non-JSON type
    is encoded generically."""
    plan = [] if table is None else [(c.name, c) for c in table.columns if _kind(c) is not None]
    dumps = orjson.dumps

    def dump(image: Image, originals: Originals | None = None) -> bytes:
        if plan:
            image = dict(image)
            for name, col in plan:
                value = image.get(name)
                if value is None or type(value) in _PLAIN_TYPES:
                    continue
                kept = originals.get(name) if originals else None
                image[name] = kept[1] if kept is not None and kept[0] is value \
                    else encode_value(value, col)
        return dumps(image, default=_generic, option=_OPTIONS)
    return dump


_PLAIN_TYPES = (int, str, float, bool)


def image_decoder_keeping(table: TableDef | None) -> Callable[[Image], Originals]:
    """Like :func:`image_decoder` (in place), returning what it converted, so that
    :func:`image_dumper` can give an untouched value its exact text back for free. SET
    values (mutable sets) are not kept: they are always encoded again."""
    plan = [] if table is None else [(c.name, _DECODE[k], k != "set") for c in table.columns
                                      if (k := _kind(c)) is not None]

    def decode(image: Image) -> Originals:
        kept: Originals = {}
        for name, fn, keep in plan:
            value = image.get(name)
            if value is not None and (type(value) is str or type(value) is list):
                typed = image[name] = fn(value)
                if keep:
                    kept[name] = (typed, value)
        return kept
    return decode
