"""FLOAT's arithmetic shortest round-trip (``float32_value``) against the text
reference (``float32_text``: format with 6, 7, 8 digits, parse, pack, compare):
the same double, bit for bit, on random bit patterns of every class."""

from __future__ import annotations

import random
import struct

import pytest

from mysqlcdc.binlog.values.float32 import float32_text, float32_value

pytestmark = pytest.mark.unit

_D = struct.Struct("<d").pack
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")


def _same(raw: bytes) -> None:
    assert _D(float32_value(raw)) == _D(float32_text(raw)), raw.hex()


def _bits(b: int) -> bytes:
    return _U32.pack(b)


@pytest.mark.parametrize("seed", range(4))
def test_random_bit_patterns(seed):
    rng = random.Random(seed)
    for _ in range(20000):
        _same(rng.randbytes(4))                                  # every class, NaN payloads too
    for _ in range(20000):                                       # the exponents of the fast path
        _same(_bits(rng.getrandbits(32) & 0x807FFFFF | rng.randint(100, 150) << 23))
    for _ in range(5000):                                        # subnormals and zeros
        _same(_bits(rng.getrandbits(32) & 0x807FFFFF))


@pytest.mark.parametrize("seed", range(2))
def test_decimal_like_values_and_ties(seed):
    rng = random.Random(100 + seed)
    for _ in range(20000):
        _same(_F32.pack(round(rng.uniform(-1e6, 1e6), rng.randint(0, 6))))
        _same(_F32.pack(rng.randint(-10**9, 10**9) / 10 ** rng.randint(0, 14)))
        # x * 10**k exactly halfway between two integers: rounded half to even
        _same(_F32.pack((rng.randint(0, 10**8) + 0.5) / 10 ** rng.randint(0, 3) * rng.choice((1, -1))))


def test_around_powers_of_ten_and_two():
    for p in range(-45, 39):
        for v in (10.0 ** p, 2.0 ** p):
            try:
                c = _U32.unpack(_F32.pack(v))[0]
            except OverflowError:
                continue
            for w in range(max(c - 64, 0), min(c + 64, 0x7F800001)):
                _same(_bits(w))
                _same(_bits(w | 0x80000000))


def test_special_values():
    for b in (0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
              0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF):
        _same(_bits(b))
    assert float32_value(_F32.pack(1.1)) == 1.1
    assert float32_value(_F32.pack(123456.78)) == 123456.78
    assert float32_value(_F32.pack(0.1)) == 0.1
    assert float32_value(_F32.pack(16777216.0)) == 16777216.0
