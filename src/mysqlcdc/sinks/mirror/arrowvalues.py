"""Envelope row images (JSON text, docs/ENVELOPE.md) -> typed Arrow columns, a column at a time.

The Delta target's type mapping (source column -> Arrow type -> Delta type):

========================================  =========================================
TINYINT (unsigned)                        int8 -> byte (int16 -> short)
SMALLINT (unsigned)                       int16 -> short (int32 -> integer)
MEDIUMINT, INT (unsigned INT)             int32 -> integer (int64 -> long)
BIGINT (unsigned)                         int64 -> long (decimal(20,0))
DECIMAL(p,s), p <= 38                     decimal(p,s); p > 38 cannot be held
FLOAT / DOUBLE                            float / double
BIT(n)                                    long, the number (BIT(64): decimal(20,0))
YEAR                                      short
DATE                                      date
DATETIME(f)                               timestamp_ntz (as stored, no zone)
TIMESTAMP(f)                              timestamp (UTC)
zero or invalid dates                     null (Delta has no zero date)
TIME(f)                                   long: signed microseconds (TIME spans ±838 h)
CHAR, VARCHAR, TEXT types, ENUM           string
SET                                       string, labels joined by commas
JSON                                      string holding the JSON text
INET6, INET4, UUID (MariaDB)              string, the server's text (``::ffff:1.2.3.4``)
BINARY, VARBINARY, BLOB types, GEOMETRY   binary (GEOMETRY: SRID-prefixed WKB)
========================================  =========================================

The images are parsed by Arrow's JSON reader with an explicit schema, then each
column is converted by Arrow kernels; base64 and hex texts (binary, GEOMETRY) are
decoded value by value, JSON columns (whose values are JSON, not text) are read from
the images with orjson, and values a cast refuses (invalid dates) go value by value.
"""

from __future__ import annotations

import binascii
import io
import json

import orjson

import pyarrow as pa
import pyarrow.compute as pc

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.values import (BINARY_TYPES, GEOMETRY_TYPES, TEXT_TYPES, is_zero_date,
                                          parse_time)

__all__ = ["arrow_type", "arrow_schema", "images_to_arrow", "UnsupportedType"]


class UnsupportedType(ValueError):
    """A column type the Arrow/Delta mapping cannot hold exactly."""


_INTS = {"tinyint": (pa.int8(), pa.int16()), "smallint": (pa.int16(), pa.int32()),
         "mediumint": (pa.int32(), pa.int32()), "int": (pa.int32(), pa.int64()),
         "integer": (pa.int32(), pa.int64()), "bigint": (pa.int64(), pa.decimal128(20, 0))}


def _is_binary(col: ColumnDef) -> bool:
    t = col.data_type
    return t in BINARY_TYPES or t in GEOMETRY_TYPES or (t in TEXT_TYPES and col.charset == "binary")


def arrow_type(col: ColumnDef) -> pa.DataType:
    """The Arrow type a column is held as (see the module's table)."""
    t = col.data_type
    if t in _INTS:
        return _INTS[t][1 if col.unsigned else 0]
    if t in ("decimal", "numeric"):
        p, s = col.precision or 10, col.scale or 0
        if p > 38:
            raise UnsupportedType(f"column {col.name!r}: DECIMAL({p},{s}) has more than the "
                                  "38 digits Delta's decimal holds")
        return pa.decimal128(p, s)
    if t == "float":
        return pa.float32()
    if t in ("double", "real"):
        return pa.float64()
    if t == "bit":
        return pa.decimal128(20, 0) if (col.length or 1) > 63 else pa.int64()
    if t == "year":
        return pa.int16()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.int64()
    if t == "bool":                          # history mode's is_current
        return pa.bool_()
    if _is_binary(col):
        return pa.binary()
    if t in TEXT_TYPES or t in ("enum", "set", "json", "inet6", "inet4", "uuid"):
        return pa.string()
    raise UnsupportedType(f"column {col.name!r}: type {col.column_type or t!r} has no Delta "
                          "mapping")


def arrow_schema(d: TableDef, extra: tuple[pa.Field, ...] = ()) -> pa.Schema:
    """The table's columns as an Arrow schema: key columns not null, the rest nullable."""
    fields = [pa.field(c.name, arrow_type(c), nullable=not c.is_primary_key) for c in d.columns]
    return pa.schema(fields + list(extra))


def _parse_type(col: ColumnDef) -> pa.DataType | None:
    """How the JSON reader reads the column (None: from the images, value by value)."""
    t = col.data_type
    if t in _INTS or t in ("bit", "year"):
        return pa.uint64() if (col.unsigned and t == "bigint") or t == "bit" else pa.int64()
    if t in ("float", "double", "real"):
        return pa.float64()
    if t == "set":
        return pa.list_(pa.string())
    if t == "json":
        return None
    return pa.string()


def images_to_arrow(d: TableDef, images: list[str], schema: pa.Schema | None = None) -> pa.Table:
    """Row images (the envelope's ``after`` JSON texts) of table ``d`` -> an Arrow table of
    ``schema`` (default :func:`arrow_schema`); columns missing from an image are null."""
    schema = schema or arrow_schema(d)
    cols = {c.name: c for c in d.columns}
    parse = {n: _parse_type(c) for n, c in cols.items() if n in schema.names}
    parsed = _read_json(images, pa.schema([(n, t) for n, t in parse.items() if t is not None]))
    slow = [n for n, t in parse.items() if t is None]
    loaded = [orjson.loads(text) for text in images] if slow else []
    arrays = []
    for f in schema:
        col = cols.get(f.name)
        if col is None:
            arrays.append(pa.nulls(len(images), f.type))
        elif parse[f.name] is None:
            arrays.append(_by_value(col, [row.get(f.name) for row in loaded], f.type))
        else:
            arrays.append(_cast(col, parsed.column(f.name), f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _read_json(images: list[str], parse_schema: pa.Schema) -> pa.Table:
    import pyarrow.json as pj

    if not images or not len(parse_schema):
        return pa.table({n: pa.nulls(len(images), t) for n, t in
                         zip(parse_schema.names, parse_schema.types)})
    data = "\n".join(images).encode()
    longest = max(len(t) for t in images) * 4 + 1024       # a row must fit one block
    return pj.read_json(io.BytesIO(data),
                        read_options=pj.ReadOptions(block_size=max(1 << 20, longest)),
                        parse_options=pj.ParseOptions(explicit_schema=parse_schema,
                                                      unexpected_field_behavior="ignore"))


def _cast(col: ColumnDef, values: pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    t = col.data_type
    if t == "set":
        return pc.binary_join(values, ",").cast(target)
    if t == "time":
        return _micros(values)
    if t in GEOMETRY_TYPES:
        return pa.array([None if v is None else bytes.fromhex(v) for v in values.to_pylist()],
                        type=target)
    if _is_binary(col):
        return pa.array([None if v is None else binascii.a2b_base64(v)
                         for v in values.to_pylist()], type=target)
    if t in ("date", "datetime", "timestamp"):
        try:
            return _dates(values, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _by_value(col, values.to_pylist(), target)
    return values.cast(target)


def _dates(values: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Zero dates (``0000-00-00``, ``2024-00-10``) are null; the rest cast (an invalid date
    such as ``2024-02-30`` makes the cast fail: the caller goes value by value)."""
    head = pc.utf8_slice_codeunits(values, 0, 10)
    zero = pc.or_(pc.starts_with(head, "0000"), pc.match_substring(head, "-00"))
    return pc.if_else(zero, pa.scalar(None, pa.string()), values).cast(target)


_TIME = r"^(?P<sign>-?)(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)(?:\.(?P<f>\d{1,6}))?$"


def _micros(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """``'-838:59:59.500000'`` -> -3023999500000: TIME texts as signed microseconds."""
    parts = pc.extract_regex(values, _TIME)
    field = lambda name: pc.struct_field(parts, name)          # noqa: E731
    whole = pc.add(pc.multiply(pc.add(pc.multiply(field("h").cast(pa.int64()), 60),
                                      field("m").cast(pa.int64())), 60),
                   field("s").cast(pa.int64()))
    frac = pc.utf8_rpad(pc.fill_null(field("f"), ""), 6, "0").cast(pa.int64())
    micros = pc.add(pc.multiply(whole, 1_000_000), frac)
    return pc.if_else(pc.equal(field("sign"), "-"), pc.negate(micros), micros)


def _by_value(col: ColumnDef, values: list, target: pa.DataType) -> pa.Array:
    return pa.array([None if v is None else _value(col, v) for v in values], type=target)


def _value(col: ColumnDef, v):
    from datetime import date, datetime

    t = col.data_type
    if t == "time":
        d = parse_time(v)
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if t in GEOMETRY_TYPES:
        return bytes.fromhex(v)
    if _is_binary(col):
        return binascii.a2b_base64(v)
    if t == "json":
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    if t in ("date", "datetime", "timestamp"):
        if is_zero_date(v):
            return None
        try:
            return date.fromisoformat(v) if t == "date" else \
                datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return None
    return v
