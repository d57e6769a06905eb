"""Micro-benchmark of the binlog row decoder: rows/s on one core, no server.

Builds synthetic MySQL 8.0 events (FORMAT_DESCRIPTION, TABLE_MAP with full
optional metadata, WRITE_ROWS v2 of 1000 rows) for a wide 19-type table and a
narrow 3-int + varchar table, then times ``BinlogParser.parse`` on the rows event.

    python bench/decode_micro.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from mysqlcdc.binlog import constants as C  # noqa: E402
from mysqlcdc.binlog.parser import BinlogParser  # noqa: E402

ROWS_PER_EVENT = 1000


def packed(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def event(type_code: int, body: bytes, log_pos: int = 0) -> bytes:
    """A v4 event with a CRC32 footer."""
    size = 19 + len(body) + 4
    head = struct.pack("<IBIIIH", 1_700_000_000, type_code, 1, size, log_pos, 0)
    raw = head + body
    return raw + zlib.crc32(raw).to_bytes(4, "little")


def fde() -> bytes:
    post = bytes([0, 13, 0, 8, 0, 18, 0, 4, 4, 4, 4, 18, 0, 0, 95, 0, 4, 26, 8, 0, 0, 0, 8, 8, 8, 2,
                  0, 0, 10, 10, 10, 42, 42, 0, 18, 52, 0, 10, 40, 0, 0, 0])
    body = struct.pack("<H", 4) + b"8.0.40".ljust(50, b"\0") + struct.pack("<I", 0) + bytes([19])
    return event(C.FORMAT_DESCRIPTION_EVENT, body + post + bytes([C.BINLOG_CHECKSUM_ALG_CRC32]))


def table_map(table_id: int, name: str, cols: list[tuple[str, int, bytes, bool]]) -> bytes:
    types = bytes(c[1] for c in cols)
    meta = b"".join(c[2] for c in cols)
    n = len(cols)
    body = table_id.to_bytes(6, "little") + b"\x01\x00"
    body += bytes([5]) + b"bench\0" + bytes([len(name)]) + name.encode() + b"\0"
    body += packed(n) + types + packed(len(meta)) + meta + b"\xff" * ((n + 7) // 8)
    numeric = [c[3] for c in cols if c[1] in C.NUMERIC_TYPES]
    sign = bytearray((len(numeric) + 7) // 8)
    for i, uns in enumerate(numeric):
        if uns:
            sign[i // 8] |= 0x80 >> (i % 8)
    names = b"".join(packed(len(c[0])) + c[0].encode() for c in cols)
    body += bytes([C.SIGNEDNESS]) + packed(len(sign)) + bytes(sign)
    cs = packed(255) + (packed(2) + packed(63) if len(cols) > 10 else b"")  # "raw" is binary
    body += bytes([C.DEFAULT_CHARSET]) + packed(len(cs)) + cs
    body += bytes([C.COLUMN_NAME]) + packed(len(names)) + names
    labels = packed(3) + packed(1) + b"a" + packed(1) + b"b" + packed(1) + b"c"
    if any(c[2][:1] == b"\xf7" for c in cols):
        body += bytes([C.ENUM_STR_VALUE]) + packed(len(labels)) + labels
        body += bytes([C.SET_STR_VALUE]) + packed(len(labels)) + labels
    return event(C.TABLE_MAP_EVENT, body)


def rows_event(table_id: int, ncols: int, rows: list[bytes]) -> bytes:
    body = table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00"
    body += packed(ncols) + b"\xff" * ((ncols + 7) // 8) + b"".join(rows)
    return event(C.WRITE_ROWS_EVENT, body)


def s(x: bytes) -> bytes:
    return struct.pack("<H", len(x)) + x


WIDE = [  # name, type, metadata bytes, unsigned
    ("id", C.MYSQL_TYPE_LONG, b"", False), ("big", C.MYSQL_TYPE_LONGLONG, b"", True),
    ("price", C.MYSQL_TYPE_NEWDECIMAL, bytes([10, 2]), False),
    ("name", C.MYSQL_TYPE_VARCHAR, struct.pack("<H", 1020), False),
    ("note", C.MYSQL_TYPE_BLOB, b"\x02", False),
    ("created", C.MYSQL_TYPE_DATETIME2, b"\x06", False), ("ts", C.MYSQL_TYPE_TIMESTAMP2, b"\x00", False),
    ("day", C.MYSQL_TYPE_DATE, b"", False), ("dur", C.MYSQL_TYPE_TIME2, b"\x00", False),
    ("score", C.MYSQL_TYPE_DOUBLE, b"\x08", False), ("ratio", C.MYSQL_TYPE_FLOAT, b"\x04", False),
    ("color", C.MYSQL_TYPE_STRING, b"\xf7\x01", False), ("tags", C.MYSQL_TYPE_STRING, b"\xf8\x01", False),
    ("doc", C.MYSQL_TYPE_JSON, b"\x04", False), ("raw", C.MYSQL_TYPE_BLOB, b"\x02", False),
    ("flag", C.MYSQL_TYPE_TINY, b"", False), ("small", C.MYSQL_TYPE_SHORT, b"", False),
    ("bits", C.MYSQL_TYPE_BIT, b"\x00\x01", False), ("yr", C.MYSQL_TYPE_YEAR, b"", False),
]
NARROW = [("a", C.MYSQL_TYPE_LONG, b"", False), ("b", C.MYSQL_TYPE_LONG, b"", False),
          ("c", C.MYSQL_TYPE_LONG, b"", False),
          ("d", C.MYSQL_TYPE_VARCHAR, struct.pack("<H", 128), False)]

_JSON = bytes([1, 0, 12, 0, 11, 0, 1, 0, 5, 1, 0]) + b"a"  # {"a": 1}


def wide_row(i: int) -> bytes:
    dec = ((12345 + i) | 0x80000000).to_bytes(4, "big") + bytes([67])
    ymd = (2024 * 13 + 2) << 5 | 29
    dt = ((ymd << 17 | 13 << 12 | 45 << 6 | 7) + 0x8000000000).to_bytes(5, "big") + (123456).to_bytes(3, "big")
    time2 = (0x800000 + (1 << 12 | 2 << 6 | 3)).to_bytes(3, "big")
    date = (2024 << 9 | 2 << 5 | 29).to_bytes(3, "little")
    doc = struct.pack("<I", len(_JSON) + 1) + b"\x00" + _JSON
    return (b"\x00\x00\x00" + struct.pack("<iQ", i, 2**64 - 1 - i) + dec
            + s(f"name-{i}".encode()) + s(b"some longer text value " * 3) + dt
            + struct.pack(">I", 1_700_000_000 + i) + date + time2 + struct.pack("<df", i * 1.5, 0.25)
            + bytes([2, 5]) + doc + s(bytes(range(16))) + struct.pack("<bh", -5, 1234)
            + bytes([0xA5, 124]))


def narrow_row(i: int) -> bytes:
    return b"\x00" + struct.pack("<iii", i, i * 2, i * 3) + bytes([8]) + b"value-%02d" % (i % 100)


def bench(name: str, cols: list, make_row, seconds: float) -> float:
    parser = BinlogParser(file="bench.000001")
    parser.parse(fde())
    parser.parse(table_map(7, name, cols))
    ev = rows_event(7, len(cols), [make_row(i) for i in range(ROWS_PER_EVENT)])
    parser.parse(ev)  # compile the decoder once
    # CPU time of this process: fair on a shared machine, equal to wall time when idle
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        parser.parse(ev)
        n += ROWS_PER_EVENT
    rate = n / (time.process_time() - start)
    print(f"{name:7s} {len(cols):2d} columns: {rate:10,.0f} rows/s")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    bench("wide", WIDE, wide_row, args.seconds)
    bench("narrow", NARROW, narrow_row, args.seconds)


if __name__ == "__main__":
    main()
