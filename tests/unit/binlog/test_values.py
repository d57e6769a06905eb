"""Byte-literal tests of each value codec, at the edges DESIGN.md names."""

from __future__ import annotations

import struct

import pytest

from mysqlcdc.binlog.rows import float32_value, vector_value
from mysqlcdc.binlog.values import temporal as T
from mysqlcdc.binlog.values.charsets import codec_for_charset, codec_for_collation, decode_text
from mysqlcdc.binlog.values.decimal import decode_decimal, decimal_size
from mysqlcdc.binlog.values.json_binary import decode_json
from mysqlcdc.binlog.values.json_diff import apply_json_diffs, parse_json_path

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw, p, s, text", [
    (bytes.fromhex("8000303943"), 10, 2, "12345.67"),          # 4 bytes int, 1 byte frac
    (bytes.fromhex("7fffcfc6bc"), 10, 2, "-12345.67"),
    (bytes.fromhex("8000000000"), 10, 2, "0.00"),
    (bytes.fromhex("73f2b7"), 6, 4, "-12.3400"),
    (bytes.fromhex("81"), 1, 0, "1"),
])
def test_decimal(raw, p, s, text):
    assert decimal_size(p, s) == len(raw)
    assert decode_decimal(raw, p, s) == text


def _decimal_bytes(text: str, p: int, s: int) -> bytes:
    """Encode for the round trip below (groups of nine digits, big-endian)."""
    neg = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    whole = whole.rjust(p - s, "0")
    frac = frac.ljust(s, "0")
    out = b""
    lead = len(whole) % 9
    if lead:
        out += int(whole[:lead]).to_bytes(sizes[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i:i + 9]).to_bytes(4, "big")
    for i in range(0, s - s % 9, 9):
        out += int(frac[i:i + 9]).to_bytes(4, "big")
    if s % 9:
        out += int(frac[s - s % 9:]).to_bytes(sizes[s % 9], "big")
    b = bytearray(out)
    b[0] ^= 0x80
    return bytes(x ^ 0xFF for x in b) if neg else bytes(b)


@pytest.mark.parametrize("text", [
    "-" + "9" * 35 + "." + "9" * 30, "1" + "0" * 34 + "." + "0" * 29 + "1", "0." + "0" * 30,
])
def test_decimal_65_30(text):
    assert decode_decimal(_decimal_bytes(text, 65, 30), 65, 30) == text


def test_temporals():
    assert T.format_date(2024 << 9 | 2 << 5 | 29) == "2024-02-29"
    assert T.format_date(0) == "0000-00-00"
    assert T.format_datetime2(0, 0, 0) == "0000-00-00 00:00:00"
    ymd = (2024 * 13 + 2) << 5 | 29
    assert T.format_datetime2(ymd << 17 | 13 << 12 | 45 << 6 | 7, 123456, 6) == "2024-02-29 13:45:07.123456"
    assert T.format_datetime2(ymd << 17, 120000, 3) == "2024-02-29 00:00:00.120"
    assert T.format_timestamp(1709214307, 123000, 3) == "2024-02-29T13:45:07.123Z"
    assert T.format_timestamp(0, 0, 0) == "0000-00-00 00:00:00"
    assert T.format_old_datetime(20240229134507) == "2024-02-29 13:45:07"
    assert T.format_old_time(-8385959) == "-838:59:59"


@pytest.mark.parametrize("raw, fsp, text", [
    (bytes.fromhex("800000"), 0, "00:00:00"),
    (bytes.fromhex("4b9105"), 0, "-838:59:59"),       # 0x800000 - (838<<12|59<<6|59)
    (bytes.fromhex("7fffffff"), 2, "-00:00:00.01"),
    (bytes.fromhex("7fffff9d"), 2, "-00:00:00.99"),
    (bytes.fromhex("7ffffe f6".replace(" ", "")), 2, "-00:00:01.10"),
    (bytes.fromhex("80100000"), 2, "01:00:00.00"),
    (bytes.fromhex("800000000001"), 6, "00:00:00.000001"),
])
def test_time2(raw, fsp, text):
    assert T.format_time_packed(T.time2_packed(raw, fsp), fsp) == text


def test_float_and_vector():
    assert float32_value(struct.pack("<f", 1.1)) == 1.1
    assert float32_value(struct.pack("<f", -2.5e-7)) == -2.5e-7
    assert vector_value(bytes.fromhex("cdcc8c3fcdcc0c4033335340")) == [1.1, 2.2, 3.3]


def test_charsets():
    assert codec_for_collation(8) == "cp1252" and codec_for_collation(63) is None
    assert codec_for_collation(255) == "utf-8" and codec_for_collation(45) == "utf-8"
    assert codec_for_collation(1057) == "utf-8"                  # MariaDB utf8mb3 nopad
    assert codec_for_charset("cp1250") == "cp1250" and codec_for_charset("binary") is None
    assert decode_text(b"caf\xe9 \x81", "cp1252") == "café \x81"  # MySQL latin1 keeps 0x81
    assert decode_text("żółw".encode("cp1250"), "cp1250") == "żółw"


def test_json_scalars_containers_and_opaque():
    assert decode_json(b"") is None
    assert decode_json(b"\x04\x01") is True
    assert decode_json(b"\x0c\x03abc") == "abc"
    assert decode_json(b"\x0a" + (2**64 - 1).to_bytes(8, "little")) == 2**64 - 1
    assert decode_json(b"\x00" + bytes([1, 0, 12, 0, 11, 0, 1, 0, 5, 1, 0]) + b"a") == {"a": 1}
    assert decode_json(b"\x02" + bytes([2, 0, 10, 0, 4, 0, 0, 5, 0xFF, 0xFF])) == [None, -1]
    assert decode_json(b"\x0f\x0f\x01U") == "base64:type15:VQ=="
    assert decode_json(b"\x0f\xf6\x04\x03\x02\x89\x00") == "9.00"   # DECIMAL(3,2) opaque


def test_json_diff_paths_and_ops():
    assert parse_json_path('$.a[2]."b c"') == ["a", 2, "b c"]
    before = {"a": [1, 2], "b": {"c": 1}}
    after = apply_json_diffs(before, [(0, "$.b.c", 5), (1, "$.a[1]", 9), (2, "$.a[0]", None),
                                      (1, "$.d", "new")])
    assert after == {"a": [9, 2], "b": {"c": 5}, "d": "new"}
    assert before == {"a": [1, 2], "b": {"c": 1}}
