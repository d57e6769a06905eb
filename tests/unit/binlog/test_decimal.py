"""The generated DECIMAL decoders against ``decode_reference`` (a plain loop over the
groups): the same text, or a ValueError from both, for every shape, on valid values
and random bytes."""

from __future__ import annotations

import random

import pytest

from mysqlcdc.binlog.values.decimal import decimal_size, decode_reference, make_decimal_decoder
from tests.unit.binlog.test_values import _decimal_bytes

pytestmark = pytest.mark.unit


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError:
        return "error"


def _valid(rng: random.Random, precision: int, scale: int) -> bytes:
    """A valid encoding: random digits (all 0s or 9s a fifth of the time), random sign."""
    digits = "".join(rng.choice("0123456789") for _ in range(precision))
    if rng.random() < 0.2:
        digits = rng.choice(("0", "9")) * precision
    whole, frac = digits[:precision - scale], digits[precision - scale:]
    text = ("-" if rng.random() < 0.5 else "") + whole + ("." + frac if scale else "")
    return _decimal_bytes(text, precision, scale)


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
