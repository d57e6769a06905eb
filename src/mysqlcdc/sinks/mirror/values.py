"""Envelope JSON values (docs/ENVELOPE.md) -> Python values a SQL driver binds exactly."""

from __future__ import annotations

import base64
from datetime import date, datetime, timedelta
from decimal import Decimal

from mysqlcdc.schema.model import ColumnDef

__all__ = ["python_value", "parse_time", "is_zero_date", "INTEGER_TYPES", "TEXT_TYPES",
           "BINARY_TYPES", "GEOMETRY_TYPES"]

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
GEOMETRY_TYPES = ("geometry", "point", "linestring", "polygon", "multipoint",
                  "multilinestring", "multipolygon", "geometrycollection", "geomcollection")


def is_zero_date(text: str) -> bool:
    head = text[:10]
    return head.startswith("0000") or "-00" in head


def parse_time(text: str) -> timedelta:
    """``"-838:59:59.000000"`` -> timedelta (sign and hours past 24 kept)."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("-")
    hms, _, frac = body.partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    micros = int((frac + "000000")[:6]) if frac else 0
    return sign * timedelta(hours=h, minutes=m, seconds=s, microseconds=micros)


def python_value(col: ColumnDef, value, *, zero_dates: str = "null"):
    """The exact Python value of a column's envelope JSON value.

    ``zero_dates``: ``"null"`` turns zero or invalid dates into None (targets without
    them), ``"keep"`` returns the literal text (MySQL/MariaDB targets).
    """
    if value is None:
        return None
    t = col.data_type
    if t in ("decimal", "numeric"):
        return Decimal(value)
    if t in BINARY_TYPES or (t in TEXT_TYPES and col.charset == "binary"):
        return base64.b64decode(value)
    if t in GEOMETRY_TYPES:
        return bytes.fromhex(value)
    if t == "set":
        return ",".join(value) if isinstance(value, list) else value
    if t == "date":
        if is_zero_date(value):
            return value if zero_dates == "keep" else None
        try:
            return date.fromisoformat(value)
        except ValueError:
            return value if zero_dates == "keep" else None
    if t in ("datetime", "timestamp"):
        if is_zero_date(value):
            return value if zero_dates == "keep" else None
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value if zero_dates == "keep" else None
    if t == "time":
        return parse_time(value)
    return value
