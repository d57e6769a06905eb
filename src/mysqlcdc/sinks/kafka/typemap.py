"""Column types -> Debezium's field schemas and value encodings, under its four modes.

``column_codec(col, modes)`` gives a column's Kafka Connect schema (as
:mod:`.connect` writes it) and a converter from the envelope's value (see
docs/ENVELOPE.md) to Debezium's, or None where the envelope's value already is
Debezium's (integers, strings, floats, ENUM labels, YEAR, TIMESTAMP strings, and
BINARY/BLOB base64 in ``bytes`` mode). The mapping is the one Debezium's MySQL
connector documents (docs/KAFKA.md has the table); converters are built once per
column and only run on non-null values.
"""

from __future__ import annotations

import base64
import struct as _struct
from dataclasses import dataclass
from datetime import date
from typing import Any, Callable

import orjson

from mysqlcdc.schema.model import ColumnDef
from mysqlcdc.sinks.kafka.connect import member, schema

__all__ = ["Modes", "ColumnCodec", "column_codec", "MODES", "decimal_bytes"]

Convert = Callable[[Any], Any]

# setting -> allowed values, the first one Debezium's default
MODES = {
    "decimal_handling_mode": ("precise", "double", "string"),
    "time_precision_mode": ("adaptive_time_microseconds", "connect"),
    "bigint_unsigned_handling_mode": ("long", "precise"),
    "binary_handling_mode": ("bytes", "base64", "base64-url-safe", "hex"),
}

_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_GEOMETRY = {"geometry", "linestring", "polygon", "multipoint", "multilinestring",
             "multipolygon", "geometrycollection", "geomcollection"}
_SIGNED_INT = {"tinyint": "int8", "smallint": "int16", "mediumint": "int32", "int": "int32",
               "integer": "int32", "bigint": "int64"}
_UNSIGNED_INT = {"tinyint": "int16", "smallint": "int32", "mediumint": "int32", "int": "int64",
                 "integer": "int64"}
_EPOCH_ORDINAL = 719163            # date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class Modes:
    decimal: str = "precise"
    time: str = "adaptive_time_microseconds"
    bigint_unsigned: str = "long"
    binary: str = "bytes"


@dataclass(frozen=True)
class ColumnCodec:
    schema: dict                   # the column's field schema (without ``field``)
    convert: Convert | None        # envelope value (not null) -> Debezium's; None: as is

    def member(self, name: str) -> dict:
        return member(name, self.schema)


def column_codec(col: ColumnDef, modes: Modes) -> ColumnCodec:
    """The schema and converter of ``col`` (optional = the column is nullable)."""
    make = _BY_TYPE.get(col.data_type)
    if make is None:
        make = _binary if col.data_type in _BINARY else _geometry if col.data_type in _GEOMETRY \
            else _text
    type_, extra, convert = make(col, modes)
    return ColumnCodec(schema(type_, col.nullable, **extra), convert)


# --- integers and floating point ------------------------------------------


def _integer(col: ColumnDef, modes: Modes):
    if col.data_type == "bigint" and col.unsigned:
        if modes.bigint_unsigned == "precise":
            return "bytes", _decimal_schema(20, 0), _int_decimal
        return "int64", {}, _wrap_int64
    table = _UNSIGNED_INT if col.unsigned else _SIGNED_INT
    return table[col.data_type], {}, None


def _wrap_int64(v: int) -> int:
    """BIGINT UNSIGNED as a Java long: values past 2^63-1 come out negative (Debezium's
    documented ``long`` behaviour)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _float(col: ColumnDef, modes: Modes):
    # FLOAT(M,D) is a double for Debezium; a plain FLOAT (precision up to 24) is single
    single = col.data_type == "float" and "," not in col.column_type
    return ("float" if single else "double"), {}, None


# --- decimals -------------------------------------------------------------


def _decimal_schema(precision: int, scale: int) -> dict:
    return {"name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)}}


def _unscaled(text: str, scale: int) -> int:
    """``"-12.34"`` at scale 2 -> -1234, exactly (no float, no context precision)."""
    whole, _, frac = text.partition(".")
    return int(whole + (frac + "0" * scale)[:scale]) if scale else int(whole)


def decimal_bytes(unscaled: int) -> str:
    """Base64 of the big-endian two's-complement bytes, as short as possible (Java's
    ``BigInteger.toByteArray``): what Kafka Connect's JSON converter writes for Decimal."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    raw = unscaled.to_bytes(bits // 8 + 1, "big", signed=True)
    return base64.b64encode(raw).decode()


def _int_decimal(v: int) -> str:
    return decimal_bytes(int(v))


def _decimal(col: ColumnDef, modes: Modes):
    precision, scale = col.precision or 10, col.scale or 0
    if modes.decimal == "double":
        return "double", {}, float
    if modes.decimal == "string":
        return "string", {}, None                # the envelope's text is toPlainString's
    return "bytes", _decimal_schema(precision, scale), lambda v: decimal_bytes(_unscaled(v, scale))


# --- temporal -------------------------------------------------------------


def _zero(col: ColumnDef, epoch: Any) -> Any:
    """A zero or invalid date: null where the column allows it, else the epoch."""
    return None if col.nullable else epoch


_DAYS: dict[str, int | None] = {}      # a table rarely holds more than a few thousand days


def _epoch_day(text: str) -> int | None:
    """``YYYY-MM-DD`` (what follows is ignored) -> days since 1970-01-01; None for zero or
    invalid dates. Memoised per date."""
    day = text[:10]
    try:
        return _DAYS[day]
    except KeyError:
        pass
    if len(_DAYS) > 100_000:
        _DAYS.clear()
    try:
        found = date(int(day[0:4]), int(day[5:7]), int(day[8:10])).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        found = None
    _DAYS[day] = found
    return found


def _micros_of_day(text: str) -> int:
    """``HH:MM:SS[.f]`` (hours may exceed 24) -> microseconds."""
    hms, _, frac = text.partition(".")
    h, m, s = hms.split(":")
    us = ((int(h) * 60 + int(m)) * 60 + int(s)) * 1_000_000
    return us + int(frac.ljust(6, "0")) if frac else us


def _datetime_micros(text: str) -> int | None:
    """``YYYY-MM-DD HH:MM:SS[.f]`` read as UTC -> microseconds since the epoch."""
    days = _epoch_day(text)
    if days is None:
        return None
    seconds = days * 86_400 + int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
    frac = text[20:]
    return seconds * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)


def _date(col: ColumnDef, modes: Modes):
    name = ("org.apache.kafka.connect.data.Date" if modes.time == "connect"
            else "io.debezium.time.Date")

    def convert(v: str) -> int | None:
        days = _epoch_day(v)
        return _zero(col, 0) if days is None else days
    return "int32", {"name": name, "version": 1}, convert


def _signed_micros(v: str) -> int:
    return -_micros_of_day(v[1:]) if v.startswith("-") else _micros_of_day(v)


def _millis_toward_zero(us: int) -> int:
    return us // 1000 if us >= 0 else -(-us // 1000)     # as Duration.toMillis


def _time(col: ColumnDef, modes: Modes):
    if modes.time == "connect":     # Connect's Time: int32 milliseconds (truncated)
        return ("int32", {"name": "org.apache.kafka.connect.data.Time", "version": 1},
                lambda v: _millis_toward_zero(_signed_micros(v)))
    return "int64", {"name": "io.debezium.time.MicroTime", "version": 1}, _signed_micros


def _datetime(col: ColumnDef, modes: Modes):
    micro = modes.time != "connect" and (col.fsp or 0) > 3
    if modes.time == "connect":
        name = "org.apache.kafka.connect.data.Timestamp"
    else:
        name = "io.debezium.time.MicroTimestamp" if micro else "io.debezium.time.Timestamp"

    def convert(v: str) -> int | None:
        us = _datetime_micros(v)
        if us is None:
            return _zero(col, 0)
        return us if micro else us // 1000            # Instant.toEpochMilli floors
    return "int64", {"name": name, "version": 1}, convert


def _timestamp(col: ColumnDef, modes: Modes):
    # the envelope's TIMESTAMP already is ISO-8601 UTC with exactly fsp fraction digits
    def convert(v: str) -> str | None:
        return _zero(col, "1970-01-01T00:00:00Z") if v.startswith("0000-") else v
    return "string", {"name": "io.debezium.time.ZonedTimestamp", "version": 1}, convert


def _year(col: ColumnDef, modes: Modes):
    return "int32", {"name": "io.debezium.time.Year", "version": 1}, None


# --- strings, binary, bits, enums, JSON, spatial ----------------------------


def _text(col: ColumnDef, modes: Modes):
    return "string", {}, None


def _binary(col: ColumnDef, modes: Modes):
    if modes.binary == "bytes":
        return "bytes", {}, None                     # JSON bytes are base64, as we hold them
    if modes.binary == "base64":
        return "string", {}, None
    if modes.binary == "base64-url-safe":
        return "string", {}, lambda v: v.replace("+", "-").replace("/", "_")
    return "string", {}, lambda v: base64.b64decode(v).hex()


def _bit(col: ColumnDef, modes: Modes):
    n = col.length or 1
    if n == 1:
        return "boolean", {}, bool
    width = (n + 7) // 8

    def convert(v: int) -> str:                       # little-endian, padded to the width
        return base64.b64encode(int(v).to_bytes(width, "little")).decode()
    return "bytes", {"name": "io.debezium.data.Bits", "version": 1,
                     "parameters": {"length": str(n)}}, convert


def _enum(col: ColumnDef, modes: Modes):
    return "string", {"name": "io.debezium.data.Enum", "version": 1,
                      "parameters": {"allowed": ",".join(col.enum_values)}}, None


def _set(col: ColumnDef, modes: Modes):
    return "string", {"name": "io.debezium.data.EnumSet", "version": 1,
                      "parameters": {"allowed": ",".join(col.set_values)}}, ",".join


def _json(col: ColumnDef, modes: Modes):
    return "string", {"name": "io.debezium.data.Json", "version": 1}, \
        lambda v: orjson.dumps(v).decode()


def _srid_wkb(hex_text: str) -> tuple[int | None, bytes]:
    raw = bytes.fromhex(hex_text)
    srid = int.from_bytes(raw[:4], "little")
    return (srid or None), raw[4:]


def _geometry(col: ColumnDef, modes: Modes):
    fields = [member("wkb", schema("bytes")), member("srid", schema("int32", True))]

    def convert(v: str) -> dict:
        srid, wkb = _srid_wkb(v)
        return {"wkb": base64.b64encode(wkb).decode(), "srid": srid}
    return "struct", {"fields": fields, "name": "io.debezium.data.geometry.Geometry",
                      "version": 1, "doc": "Geometry"}, convert


def _point(col: ColumnDef, modes: Modes):
    fields = [member("x", schema("double")), member("y", schema("double")),
              member("wkb", schema("bytes", True)), member("srid", schema("int32", True))]

    def convert(v: str) -> dict:
        srid, wkb = _srid_wkb(v)
        order = "<" if wkb[0] == 1 else ">"
        x, y = _struct.unpack(order + "dd", wkb[5:21])
        return {"x": x, "y": y, "wkb": base64.b64encode(wkb).decode(), "srid": srid}
    return "struct", {"fields": fields, "name": "io.debezium.data.geometry.Point",
                      "version": 1, "doc": "Geometry (POINT)"}, convert


_BY_TYPE: dict[str, Callable] = {
    **{t: _integer for t in _SIGNED_INT},
    "float": _float, "double": _float, "real": _float,
    "decimal": _decimal, "numeric": _decimal,
    "date": _date, "time": _time, "datetime": _datetime, "timestamp": _timestamp, "year": _year,
    "bit": _bit, "enum": _enum, "set": _set, "json": _json, "point": _point,
    **{t: _text for t in _TEXT},
}
