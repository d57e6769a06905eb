"""Differential test: random and edge values of the column types in ``COLS`` (MariaDB
10.11's types and storage forms, except INET4, INET6, UUID and the pre-5.6 temporal
formats), written to a real server, decoded by mysqlcdc from the binlog and compared,
value by value and image by image (inserts, both images of updates, the before image
of deletes), with two references:

* what ``SELECT`` returns, put in the envelope's encoding (docs/ENVELOPE.md);
* what the server's own ``mariadb-binlog -vv --base64-output=decode-rows`` prints for
  the same row images, after the per-kind normalisation described at ``_binlog_pair``.

The workload runs once per seed (a module fixture); each column is a test item of its
own, so a decoder disagreement shows as the one column it concerns.
"""

from __future__ import annotations

import base64
import calendar
import datetime as dt
import json
import os
import random
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from mysqlcdc.capture.filters import TableFilter
from mysqlcdc.capture.server import current_position
from mysqlcdc.capture.task import RangeTask, read_range
from mysqlcdc.protocol.connection import ConnectionSettings, connect_sql
from mysqlcdc.schema.introspect import load_tables
from tests.support.binlogtext import (Printed, PrintedChange, binlog_files, parse_rows,
                                      print_rows, quoted)

pytestmark = pytest.mark.integration

Gen = Callable[[random.Random], Any]


@dataclass(frozen=True)
class Col:
    name: str
    sql: str                   # the column definition
    kind: str                  # how values are compared: see _expected and _binlog_pair
    gen: Gen                   # a random value to write
    edges: tuple = ()          # values written with a higher chance than random ones
    codec: str | None = None   # text kinds: Python codec of the column's charset
    fsp: int = 0               # temporal kinds
    labels: tuple = ()         # enum and set kinds
    write: str = "%s"          # the value's SQL expression in INSERT and UPDATE
    read: str | None = None    # the SELECT expression (default: the column)

    @property
    def label(self) -> str:
        """Name and type for messages (long ENUM/SET lists cut)."""
        return f"{self.name} {self.sql if len(self.sql) <= 40 else self.sql[:36] + '...)'}"


def _ints(lo: int, hi: int) -> Gen:
    return lambda rnd: rnd.randint(lo, hi)


def _int_col(name: str, sql: str, bits: int, unsigned: bool) -> Col:
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2**(bits - 1)), 2**(bits - 1) - 1)
    edges = (lo, hi, 0, 1) if unsigned else (lo, hi, 0, -1)
    return Col(name, sql, "uint" if unsigned else "int", _ints(lo, hi), edges)


def _decimal_col(name: str, precision: int, scale: int, unsigned: bool = False) -> Col:
    whole = precision - scale

    def gen(rnd: random.Random) -> str:
        digits = "".join(rnd.choice("0123456789") for _ in range(precision))
        sign = "" if unsigned or rnd.random() < 0.5 else "-"
        return f"{sign}{digits[:whole] or '0'}" + (f".{digits[whole:]}" if scale else "")

    nines = ("9" * whole or "0") + ("." + "9" * scale if scale else "")
    tiny = "0." + "0" * (scale - 1) + "1" if scale else "1"
    edges = (nines, "0", tiny) + (() if unsigned else ("-" + nines, "-" + tiny))
    sql = f"DECIMAL({precision},{scale})" + (" UNSIGNED" if unsigned else "")
    return Col(name, sql, "decimal", gen, edges)


def _float(rnd: random.Random, exponent: int) -> float:
    return rnd.choice((1, -1)) * rnd.uniform(1, 10) * 10.0 ** rnd.randint(-exponent, exponent)


def _date(rnd: random.Random) -> dt.date:
    return dt.date(rnd.randint(1000, 9999), rnd.randint(1, 12), rnd.randint(1, 28))


def _micros(rnd: random.Random, fsp: int) -> int:
    return rnd.randint(0, 10**fsp - 1) * 10 ** (6 - fsp) if fsp else 0


def _datetime_col(fsp: int) -> Col:
    def gen(rnd):
        return dt.datetime.combine(_date(rnd), dt.time(rnd.randint(0, 23), rnd.randint(0, 59),
                                                       rnd.randint(0, 59), _micros(rnd, fsp)))
    frac = "." + "9" * fsp if fsp else ""
    edges = ("0000-00-00 00:00:00", "1000-01-01 00:00:00", f"9999-12-31 23:59:59{frac}",
             "2024-02-30 12:00:00",   # invalid: written under ALLOW_INVALID_DATES
             "2024-00-00 00:00:01")   # zero month and day
    return Col(f"dtm{fsp}", f"DATETIME({fsp})", "datetime", gen, edges, fsp=fsp)


def _timestamp_col(fsp: int) -> Col:
    def gen(rnd):
        secs = rnd.randint(1, 2**31 - 1)
        return dt.datetime.fromtimestamp(secs, dt.timezone.utc).replace(
            tzinfo=None, microsecond=_micros(rnd, fsp))
    frac = "." + "9" * fsp if fsp else ""
    edges = ("0000-00-00 00:00:00", "1970-01-01 00:00:01", f"2038-01-19 03:14:07{frac}")
    return Col(f"ts{fsp}", f"TIMESTAMP({fsp}) NULL", "timestamp", gen, edges, fsp=fsp)


def _time_col(fsp: int) -> Col:
    def gen(rnd):
        frac = f".{rnd.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else ""
        return (f"{rnd.choice(['', '-'])}{rnd.randint(0, 838)}:{rnd.randint(0, 59):02d}:"
                f"{rnd.randint(0, 59):02d}{frac}")
    frac = "." + "9" * fsp if fsp else ""
    edges = (f"-838:59:59{frac}", f"838:59:59{frac}", "-00:00:01", "00:00:00", "24:00:00",
             "100:00:00" + ("." + "0" * (fsp - 1) + "1" if fsp else ""))
    if fsp:
        edges += ("-00:00:00." + "0" * (fsp - 1) + "1",)
    return Col(f"tm{fsp}", f"TIME({fsp})", "time", gen, edges, fsp=fsp)


def _bit_col(n: int) -> Col:
    return Col(f"bt{n}", f"BIT({n})", "bit", _ints(0, 2**n - 1), (0, 2**n - 1, 1 << (n - 1)))


def _text(alphabet: str, most: int) -> Gen:
    return lambda rnd: "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, most)))


def _text_col(name: str, sql: str, codec: str, alphabet: str, most: int) -> Col:
    return Col(name, sql, "text", _text(alphabet, most), ("", " ", "a  "), codec=codec)


def _bytes_col(name: str, sql: str, most: int, kind: str = "binary") -> Col:
    return Col(name, sql, kind, lambda rnd: rnd.randbytes(rnd.randint(0, most)),
               (b"", b"\x00", b"\x00" * min(most, 4), b"'\\\n"))


def _json(rnd: random.Random) -> str:
    doc = {"k": rnd.randint(-5, 5), "s": _text(UTF8MB4, 10)(rnd), "a": [1, None, True, 2.5],
           "n": {"deep": [rnd.random(), {"x": "y"}]}}
    return json.dumps(doc, ensure_ascii=rnd.random() < 0.5)


def _wkt(rnd: random.Random) -> str:
    def pt():
        return f"{rnd.uniform(-180, 180):.6f} {rnd.uniform(-90, 90):.6f}"
    return rnd.choice([
        lambda: f"POINT({pt()})",
        lambda: f"LINESTRING({pt()}, {pt()}, {pt()})",
        lambda: "POLYGON((0 0, 10 0, 10 10, 0 10, 0 0), (1 1, 2 1, 2 2, 1 1))",
        lambda: f"MULTIPOINT({pt()}, {pt()})",
        lambda: f"GEOMETRYCOLLECTION(POINT({pt()}), LINESTRING({pt()}, {pt()}))",
    ])()


UTF8MB4 = "abcxyz ÄÖü日本😀\"'\\\n\t\r\x01\x1f\x00"
ENUM_LABELS = ("red", "green", "blue", "it's", "ünï", "x,y")
ENUM300 = tuple(f"v{i:03d}" for i in range(300))     # more than 255 labels: 2 bytes
SET_LABELS = ("a", "b", "c", "d")
SET64 = tuple(f"s{i:02d}" for i in range(64))        # 64 members: 8 bytes


def _enum_sql(labels: tuple) -> str:
    return ",".join("'" + label.replace("'", "''") + "'" for label in labels)


COLS: list[Col] = [
    _int_col("ti", "TINYINT", 8, False), _int_col("tiu", "TINYINT UNSIGNED", 8, True),
    _int_col("si", "SMALLINT", 16, False), _int_col("siu", "SMALLINT UNSIGNED", 16, True),
    _int_col("mi", "MEDIUMINT", 24, False), _int_col("miu", "MEDIUMINT UNSIGNED", 24, True),
    _int_col("i", "INT", 32, False), _int_col("iu", "INT UNSIGNED", 32, True),
    _int_col("bi", "BIGINT", 64, False), _int_col("biu", "BIGINT UNSIGNED", 64, True),
    _decimal_col("d65", 65, 30), _decimal_col("d10u", 10, 2, unsigned=True),
    _decimal_col("d5", 5, 0), _decimal_col("d65i", 65, 0), _decimal_col("d30f", 30, 30),
    _decimal_col("d19", 19, 9), _decimal_col("d1", 1, 1),
    Col("f", "FLOAT", "float", lambda rnd: _float(rnd, 30),
        (0.0, 1.0, -1.5, 3.40282e38, -1.17549e-38, 16777217.0), read="CAST(f AS DOUBLE)"),
    Col("db", "DOUBLE", "double", lambda rnd: _float(rnd, 300),
        (0.0, 1.7976931348623157e308, -2.2250738585072014e-308, 5e-324, 0.1)),
    Col("dt", "DATE", "date", _date,
        ("0000-00-00", "1000-01-01", "9999-12-31", "2024-02-30", "2024-00-00", "2024-02-29")),
    *(_datetime_col(p) for p in range(7)),
    *(_timestamp_col(p) for p in range(7)),
    *(_time_col(p) for p in range(7)),
    Col("yr", "YEAR", "year", _ints(1901, 2155), (1901, 2155, 0)),
    *(_bit_col(n) for n in (1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64)),
    Col("en", f"ENUM({_enum_sql(ENUM_LABELS)})", "enum", lambda rnd: rnd.choice(ENUM_LABELS),
        labels=ENUM_LABELS),
    Col("en300", f"ENUM({_enum_sql(ENUM300)})", "enum", lambda rnd: rnd.choice(ENUM300),
        ("v000", "v255", "v299"), labels=ENUM300),
    Col("st", f"SET({_enum_sql(SET_LABELS)})", "set",
        lambda rnd: ",".join(rnd.sample(SET_LABELS, rnd.randint(0, 4))), ("", "a,b,c,d"),
        labels=SET_LABELS),
    Col("st64", f"SET({_enum_sql(SET64)})", "set",
        lambda rnd: ",".join(rnd.sample(SET64, rnd.randint(0, 64))), ("", ",".join(SET64), "s63"),
        labels=SET64),
    # text in many charsets; the alphabets hold control bytes, quotes, backslashes,
    # multi-byte characters and (sjis, gbk) trail bytes that look like ASCII
    _text_col("c", "CHAR(8) CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 8),
    _text_col("cl", "CHAR(100) CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 100),
    _text_col("vc", "VARCHAR(300) CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 300),
    _text_col("u3", "VARCHAR(40) CHARACTER SET utf8mb3", "utf-8", "abc éñЖ日本\\'\n", 40),
    _text_col("l1", "VARCHAR(40) CHARACTER SET latin1", "mysql-latin1", "aé€ÿ\x81\x9d \n'", 40),
    _text_col("l1c", "CHAR(10) CHARACTER SET latin1", "mysql-latin1", "aé€ÿ '", 10),
    _text_col("cp", "VARCHAR(40) CHARACTER SET cp1250", "cp1250", "ačřžĚß \n", 40),
    _text_col("c51", "VARCHAR(20) CHARACTER SET cp1251", "cp1251", "Привет ёЁ", 20),
    _text_col("kr", "VARCHAR(20) CHARACTER SET koi8r", "koi8_r", "Жизнь ok", 20),
    _text_col("ac", "VARCHAR(20) CHARACTER SET ascii", "ascii", "az09 ~\\'\"\t\x00\x7f", 20),
    _text_col("sj", "VARCHAR(20) CHARACTER SET sjis", "shift_jis", "aｱ日本語ソ表能~", 20),
    # the server stores a backslash written to sjis as 0x815F, its own reverse solidus
    Col("sj5c", "VARCHAR(4) CHARACTER SET sjis", "text",
        lambda rnd: rnd.choice(["\\", "a\\", "\\\\b"]), codec="mysql-sjis"),
    _text_col("gb", "VARCHAR(20) CHARACTER SET gbk", "gbk", "中文字节ab 丂", 20),
    _text_col("u16", "VARCHAR(20) CHARACTER SET utf16", "utf-16-be", "aé日😀\n", 20),
    _text_col("u32", "VARCHAR(20) CHARACTER SET utf32", "utf-32-be", "aé日😀\n", 20),
    _text_col("tt", "TINYTEXT CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 60),
    _text_col("tx", "TEXT CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 2000),
    _text_col("mt", "MEDIUMTEXT CHARACTER SET utf8mb4", "utf-8", UTF8MB4, 300),
    _text_col("lt", "LONGTEXT CHARACTER SET latin1", "mysql-latin1", "aé€ÿ\x81 \n", 300),
    # binary strings: the binary charset in each of its forms
    _bytes_col("bn", "BINARY(4)", 4, "fixed_binary"),
    _bytes_col("vb", "VARBINARY(64)", 64),
    _bytes_col("vcb", "VARCHAR(16) CHARACTER SET binary", 16),
    _bytes_col("tb", "TINYBLOB", 255),
    _bytes_col("bl", "BLOB", 3000),
    _bytes_col("mb", "MEDIUMBLOB", 300),
    _bytes_col("lb", "LONGBLOB", 300),
    Col("js", "JSON", "json", _json,
        ("{}", "[]", "null", '"x"', "1e300", ' {"a" : 1 } ', "[[[[]]]]")),
    Col("geo", "GEOMETRY", "geometry", _wkt, ("POINT(0 0)", "GEOMETRYCOLLECTION EMPTY"),
        write="ST_GeomFromText(%s)"),
    Col("pt", "POINT", "geometry", lambda rnd: f"POINT({rnd.uniform(-1e9, 1e9)} {rnd.random()})",
        ("POINT(-0.5 1e300)",), write="ST_GeomFromText(%s, 4326)"),
]
BY_NAME = {c.name: c for c in COLS}

# Disagreements that are mysqlcdc decoding bugs, by column name: each is an
# xfail(strict=True) of that one comparison until the decoder is fixed.
KNOWN_SELECT_DISAGREEMENTS: dict[str, str] = {}
KNOWN_BINLOG_DISAGREEMENTS: dict[str, str] = {}


def _columns(known: dict[str, str]) -> list:
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=known[n])) if n in known
            else n for n in BY_NAME]


def _random_value(rnd: random.Random, col: Col):
    if rnd.random() < 0.08:
        return None
    if col.edges and rnd.random() < 0.3:
        return rnd.choice(col.edges)
    return col.gen(rnd)


# --- reference 1: SELECT, in the envelope's encoding --------------------------------

def _frac(micros: int, fsp: int) -> str:
    return f".{micros // 10 ** (6 - fsp):0{fsp}d}" if fsp else ""


def _expected(col: Col, value):
    """A SELECT result (pymysql's Python value) in the envelope's encoding. Zero and
    invalid dates come back from pymysql as the server's text, which is what the
    envelope holds too."""
    if value is None or isinstance(value, str) and col.kind in ("date", "datetime", "timestamp"):
        return value
    kind = col.kind
    if kind == "decimal":
        return format(value, "f")
    if kind in ("binary", "fixed_binary"):
        return base64.b64encode(bytes(value)).decode()
    if kind == "geometry":
        return bytes(value).hex()
    if kind == "bit":
        return int.from_bytes(value, "big")
    if kind == "set":
        return sorted(value.split(",")) if isinstance(value, str) and value else sorted(value or [])
    if kind == "date":
        return value.isoformat()
    if kind == "datetime":
        return value.strftime("%Y-%m-%d %H:%M:%S") + _frac(value.microsecond, col.fsp)
    if kind == "timestamp":
        return value.strftime("%Y-%m-%dT%H:%M:%S") + _frac(value.microsecond, col.fsp) + "Z"
    if kind == "time":
        micros = value // dt.timedelta(microseconds=1)
        secs, rest = divmod(abs(micros), 1_000_000)
        sign = "-" if micros < 0 else ""
        return f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}{_frac(rest, col.fsp)}"
    return value


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _same(col: Col, got, want) -> bool:
    if got is None or want is None:
        return got is want
    if col.kind in ("float", "double") and isinstance(got, bool):
        return False
    if col.kind == "float":        # JSON may spell the float32 shorter: compare as float32
        return isinstance(got, (int, float)) and _f32(got) == _f32(want)
    if col.kind == "double":       # a JSON number, integral or not
        return isinstance(got, (int, float)) and got == want
    if col.kind == "set" and isinstance(got, list):
        return sorted(got) == want
    return got == want and type(got) is type(want)


# --- reference 2: mariadb-binlog -vv -------------------------------------------------

def _encode_text(text: str, codec: str) -> bytes:
    if codec == "mysql-sjis":      # the server writes a backslash in sjis as 0x815F
        return text.replace("\\", "\uff3c").encode("shift_jis")
    if codec == "mysql-latin1":
        # MySQL's latin1 is cp1252 whose five unassigned bytes are the C1 controls
        return b"".join(bytes((ord(ch),)) if ch in "\x81\x8d\x8f\x90\x9d"
                        else ch.encode("cp1252") for ch in text)
    return text.encode(codec)


def _epoch_text(ours: str, fsp: int) -> str:
    """Envelope TIMESTAMP ``YYYY-MM-DDTHH:MM:SS[.f]Z`` -> ``seconds[.f]`` since the epoch."""
    if ours.startswith("0000-00-00"):
        return "0" + ours[19:]
    stamp = dt.datetime.strptime(ours[:19], "%Y-%m-%dT%H:%M:%S")
    return str(calendar.timegm(stamp.timetuple())) + ours[19:-1]


def _binlog_pair(col: Col, ours, printed: Printed) -> tuple[Any, Any]:
    """(mysqlcdc's value, mariadb-binlog's) brought to one form, compared with ``==``.

    mariadb-binlog's rendering, per kind, and what is compared:

    * NULL prints as ``NULL`` (unquoted; strings are always quoted): both sides None.
    * int: signed, plus `` (unsigned)`` in parentheses when the stored bits read
      negative (the tool does not know the signedness): the first number; uint: the
      parenthesised one when present. Exact.
    * decimal: ``-12.3400``; compared as Decimal numbers (exact; a printer dropping
      trailing zeros still agrees; the scale itself is checked against SELECT).
    * float: ``%-20g`` of the float32, i.e. 6 significant digits - LOSSY. mysqlcdc's
      value is narrowed to float32 and printed with ``%g`` too: agreement to the 6
      digits the tool shows, the tolerance being half a unit in the 6th digit.
    * double: ``%.20g``, which round-trips: compared as floats, exactly.
    * bit: ``b'0101'`` with exactly n digits: as an integer. set: a bit string of
      its bytes in stored (little-endian) order, each byte most significant bit
      first: read back as that integer and compared with mysqlcdc's labels as a
      mask. enum: the 1-based index of the label (0: the invalid ''). year: the
      stored byte + 1900, so YEAR 0000 prints as 1900: mapped back to 0. All exact.
    * date: ``'YYYY:MM:DD'`` (colons): the colons become dashes. datetime and time:
      ``'2024-02-29 13:45:07.123'`` / ``'-838:59:59.000'``, exactly the envelope's
      text once unquoted. timestamp: ``seconds.fff`` since the epoch (``0`` for the
      zero date): mysqlcdc's UTC text is turned into that. All exact.
    * text, json (MariaDB keeps JSON as text), binary, geometry: the stored bytes in
      single quotes, bytes below 0x20 as ``\\xNN``, all others raw, so quotes and
      backslashes are not escaped and the text cannot be parsed back unambiguously:
      mysqlcdc's value is encoded in the column's charset (base64- or hex-decoded for
      binary and geometry) and rendered the same way; the bytes are compared exactly.
      fixed_binary (BINARY(n)): the binlog stores the value without its trailing
      0x00 padding, which mysqlcdc restores: the padding is stripped before rendering.
    """
    if printed.is_null != (printed.text == b"NULL"):
        return ours, printed                     # the tool contradicts itself: report it
    if printed.is_null or ours is None:
        return ours, None if printed.is_null else printed.text
    t, kind = printed.text, col.kind
    if kind == "int":
        return ours, int(t.split(b" ")[0])
    if kind == "uint":
        m = re.fullmatch(rb"(-?\d+)(?: \((\d+)\))?", t)
        return ours, int(m.group(2) or m.group(1)) if m else t
    if kind == "decimal":
        return Decimal(ours), Decimal(t.decode())
    if kind == "float":
        return "%g" % _f32(ours), t.decode().strip()
    if kind == "double":
        return float(ours), float(t)
    if kind in ("bit", "set"):
        if not re.fullmatch(rb"b'[01]+'", t):
            return ours, t
        bits = int(t[2:-1], 2)
        if kind == "set":         # the bytes as stored, little-endian, each MSB first
            bits = int.from_bytes(bits.to_bytes((len(t) - 3) // 8, "big"), "little")
            ours = sum(1 << col.labels.index(label) for label in ours)
        return ours, bits
    if kind == "enum":
        return (col.labels.index(ours) + 1 if ours else 0), int(t)
    if kind == "year":
        return ours, 0 if t == b"1900" else int(t)
    if kind == "date":
        return ours, t[1:-1].replace(b":", b"-").decode()
    if kind in ("datetime", "time"):
        return ours, t[1:-1].decode()
    if kind == "timestamp":
        return _epoch_text(ours, col.fsp), t.decode()
    if kind in ("text", "json"):
        return quoted(_encode_text(ours, col.codec or "utf-8")), t
    if kind in ("binary", "fixed_binary"):
        raw = base64.b64decode(ours)
        return quoted(raw.rstrip(b"\x00") if kind == "fixed_binary" else raw), t
    if kind == "geometry":
        return quoted(bytes.fromhex(ours)), t
    raise AssertionError(f"no binlog normalisation for kind {kind}")


def _short(value, most: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + f"...({len(text)} chars)"


# --- the workload ------------------------------------------------------------------

@dataclass
class Workload:
    ours: list[dict]                     # mysqlcdc's rows: op, id, before, after (dicts)
    printed: list[PrintedChange]         # mariadb-binlog's, for the same table
    inserted: dict[int, dict]            # SELECT after the inserts, envelope-encoded
    updated: dict[int, dict]             # SELECT after the updates
    files: list                          # the binlog files the range spans


def _snapshot(conn, db: str) -> dict[int, dict]:
    with conn.cursor() as cur:
        select = ", ".join(c.read or c.name for c in COLS)
        cur.execute(f"SELECT id, {select} FROM `{db}`.v ORDER BY id")
        return {row[0]: {c.name: _expected(c, v) for c, v in zip(COLS, row[1:])}
                for row in cur.fetchall()}


def _decode(mariadb, db: str, start, end) -> list[dict]:
    settings = ConnectionSettings(mariadb.host, port=mariadb.port, user=mariadb.user)
    conn = connect_sql(settings)
    tables = TableFilter((f"{db}.v",))
    defs = load_tables(conn, tables)
    conn.close()
    task = RangeTask(settings, 3901, start, end, tables, defs)
    rows = []
    for batch in read_range(task):
        for r in batch.to_pylist():
            rows.append({"op": r["op"], "id": json.loads(r["key"])["id"],
                         "before": json.loads(r["before"]) if r["before"] else None,
                         "after": json.loads(r["after"]) if r["after"] else None})
    return rows


@pytest.fixture(scope="module", params=[1, 2], ids=lambda seed: f"seed{seed}")
def workload(request, mariadb):
    rnd, db = random.Random(request.param), f"diff{os.getpid()}_{request.param}"
    mariadb.sql(f"DROP DATABASE IF EXISTS `{db}`", f"CREATE DATABASE `{db}`")
    try:
        mariadb.sql(f"CREATE TABLE `{db}`.v (id INT PRIMARY KEY, "
                    + ", ".join(f"{c.name} {c.sql}" for c in COLS) + ")")
        conn = mariadb.connect(database=db)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            # strict, but zero dates and zero or invalid date parts are allowed
            cur.execute("SET sql_mode = 'STRICT_ALL_TABLES,ALLOW_INVALID_DATES'")
        start = current_position(conn)
        names = ", ".join(c.name for c in COLS)
        values = ", ".join(c.write for c in COLS)
        with conn.cursor() as cur:
            for i in range(1, 121):
                cur.execute(f"INSERT INTO v (id, {names}) VALUES (%s, {values})",
                            [i, *(_random_value(rnd, c) for c in COLS)])
        inserted = _snapshot(conn, db)
        sets = ", ".join(f"{c.name} = {c.write}" for c in COLS)
        with conn.cursor() as cur:
            for i in range(1, 121, 2):
                cur.execute(f"UPDATE v SET {sets} WHERE id = %s",
                            [*(_random_value(rnd, c) for c in COLS), i])
        updated = _snapshot(conn, db)
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")   # the range spans a rotation, both decoders follow it
            cur.execute("DELETE FROM v WHERE id % 3 = 0")
        end = current_position(conn)
        conn.close()
        ours = _decode(mariadb, db, start, end)
        files = binlog_files(mariadb.datadir, start.file, end.file)
        printed = [c for c in parse_rows(print_rows(files, start.pos, end.pos))
                   if (c.db, c.table) == (db, "v")]
        yield Workload(ours, printed, inserted, updated, files)
    finally:
        mariadb.sql(f"DROP DATABASE IF EXISTS `{db}`")


def test_change_sequence(workload):
    """The same row changes, in the same order, as mariadb-binlog; all of them logged,
    across the binlog rotation."""
    assert len(workload.files) == 2
    ours = [(r["op"], r["id"]) for r in workload.ours]
    assert ours == [(c.op, int((c.after or c.before)[1].text)) for c in workload.printed]
    ops = [op for op, _ in ours]
    assert ops.count("c") == 120 and ops.count("d") == 40
    assert ops.count("u") >= 55          # an UPDATE that changes nothing is not logged


@pytest.mark.parametrize("name", _columns(KNOWN_SELECT_DISAGREEMENTS))
def test_values_equal_select(workload, name):
    col, problems = BY_NAME[name], []
    for r in workload.ours:
        key = r["id"]
        images = {"c": [("after", workload.inserted)],
                  "u": [("before", workload.inserted), ("after", workload.updated)],
                  "d": [("before", workload.updated)]}[r["op"]]
        for image, snapshot in images:
            got = r[image].get(name, "<absent>")
            want = snapshot[key][name]
            if not _same(col, got, want):
                problems.append(f"id={key} {r['op']} {image} {col.label}: "
                                f"decoded {_short(got)} != selected {_short(want)}")
    assert not problems, f"{len(problems)} values differ:\n" + "\n".join(problems[:15])


@pytest.mark.parametrize("name", _columns(KNOWN_BINLOG_DISAGREEMENTS))
def test_values_equal_mariadb_binlog(workload, name):
    col, position, problems = BY_NAME[name], 2 + list(BY_NAME).index(name), []
    assert len(workload.ours) == len(workload.printed), "row changes differ: see test_change_sequence"
    for n, (r, ref) in enumerate(zip(workload.ours, workload.printed)):
        for image in ("before", "after"):
            mine, theirs = r[image], getattr(ref, image)
            if (mine is None) != (theirs is None):
                problems.append(f"change #{n} id={r['id']} {r['op']}: {image} image "
                                f"{'missing' if mine is None else 'extra'} in mysqlcdc's row")
                continue
            if mine is None:
                continue
            got, printed = mine.get(name, "<absent>"), theirs.get(position)
            if printed is None:
                problems.append(f"change #{n} id={r['id']} {r['op']} {image}: mariadb-binlog "
                                f"prints no @{position} for {name}")
                continue
            try:
                a, b = _binlog_pair(col, got, printed)
            except Exception as exc:   # a value one side cannot even be normalised
                a, b = f"<{type(exc).__name__}: {exc}>", printed.text
            if a != b or type(a) is not type(b):
                problems.append(
                    f"change #{n} id={r['id']} {r['op']} {image} column {col.label} "
                    f"(@{position}, {printed.type}): mysqlcdc {_short(got)} -> {_short(a)} != "
                    f"mariadb-binlog {_short(printed.text)} -> {_short(b)}")
    assert not problems, f"{len(problems)} values differ:\n" + "\n".join(problems[:15])
