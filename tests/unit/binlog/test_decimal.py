"""The generated DECIMAL decoders against ``decode_reference`` (a plain loop over the
groups): the same text, or a ValueError from both, for every shape, on valid values
and random bytes."""

from __future__ import annotations

import random

import pytest

from mysqlcdc.binlog.values.decimal import decimal_size, decode_reference, make_decimal_decoder

pytestmark = pytest.mark.unit


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError:
        return "error"


def _valid(rng: random.Random, precision: int, scale: int) -> bytes:
    """A valid encoding: random digits, random sign (groups of nine, big-endian)."""
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    digits = "".join(rng.choice("0123456789") for _ in range(precision))
    if rng.random() < 0.2:
        digits = rng.choice(("0", "9")) * precision
    whole, frac = digits[:precision - scale], digits[precision - scale:]
    out = b""
    lead = len(whole) % 9
    if lead:
        out += int(whole[:lead]).to_bytes(sizes[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i:i + 9]).to_bytes(4, "big")
    for i in range(0, scale - scale % 9, 9):
        out += int(frac[i:i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[scale - scale % 9:]).to_bytes(sizes[scale % 9], "big")
    b = bytearray(out)
    b[0] ^= 0x80
    return bytes(x ^ 0xFF for x in b) if rng.random() < 0.5 else bytes(b)


@pytest.mark.parametrize("precision", range(1, 66))
def test_generated_decoders_equal_the_reference(precision):
    rng = random.Random(precision)
    for scale in sorted({0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, precision // 2, min(precision, 30)}):
        if scale > min(precision, 30):
            continue
        decode = make_decimal_decoder(precision, scale)
        size = decimal_size(precision, scale)
        for _ in range(60):
            raw = _valid(rng, precision, scale)
            assert len(raw) == size
            assert decode(raw) == decode_reference(raw, precision, scale), (precision, scale, raw.hex())
        for _ in range(30):
            raw = rng.randbytes(size)
            assert _outcome(decode, raw) == _outcome(decode_reference, raw, precision, scale)
