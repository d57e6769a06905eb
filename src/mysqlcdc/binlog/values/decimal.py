"""MySQL binary DECIMAL (NEWDECIMAL) -> string with exactly ``scale`` decimals.

Layout: the integer digits and the fraction digits are each cut into groups of
nine decimal digits stored as 4-byte big-endian integers; a partial group at the
outer edge (left of the integer part, right of the fraction) uses the fewest
bytes that hold its digits. The top bit of the first byte is flipped (set means
non-negative); a negative value has every byte inverted.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["decimal_size", "make_decimal_decoder", "decode_decimal"]

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_GROUP_MAX = 10**9


def decimal_size(precision: int, scale: int) -> int:
    """Bytes a DECIMAL(precision, scale) value takes in a row image."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    return intg0 * 4 + _DIG2BYTES[intg0x] + frac0 * 4 + _DIG2BYTES[frac0x]


def make_decimal_decoder(precision: int, scale: int) -> Callable[[bytes], str]:
    """A function decoding the ``decimal_size`` bytes of one value to its text."""
    if precision < 1 or scale < 0 or scale > precision or precision > 65:
        raise ValueError(f"invalid DECIMAL({precision},{scale})")
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    size = decimal_size(precision, scale)
    sign_bit = 1 << (size * 8 - 1)
    neg_mask = ((1 << (size * 8)) - 1) ^ sign_bit
    trail_bits = _DIG2BYTES[frac0x] * 8
    trail_fmt = f"0{frac0x}d"
    frac_mask = (1 << trail_bits) - 1

    if not intg0 and not frac0:
        return _small_decoder(size, scale, trail_bits)

    def decode(raw: bytes) -> str:
        v = int.from_bytes(raw, "big")
        if v & sign_bit:
            v ^= sign_bit
            sign = ""
        else:
            v ^= neg_mask
            sign = "-"
        frac = ""
        if trail_bits:
            frac = format(v & frac_mask, trail_fmt)
            v >>= trail_bits
        for _ in range(frac0):
            g = v & 0xFFFFFFFF
            if g >= _GROUP_MAX:
                raise ValueError("DECIMAL group out of range")
            frac = format(g, "09d") + frac
            v >>= 32
        if len(frac) > scale:
            raise ValueError("DECIMAL fraction out of range")
        if not intg0:
            whole = v
        else:
            groups = []
            for _ in range(intg0):
                g = v & 0xFFFFFFFF
                if g >= _GROUP_MAX:
                    raise ValueError("DECIMAL group out of range")
                groups.append(g)
                v >>= 32
            whole = v
            for g in reversed(groups):
                whole = whole * _GROUP_MAX + g
        return f"{sign}{whole}.{frac}" if scale else f"{sign}{whole}"

    decode.size = size  # type: ignore[attr-defined]
    return decode


def _small_decoder(size: int, scale: int, frac_bits: int) -> Callable[[bytes], str]:
    """Fast path: at most 9 integer and 9 fraction digits (one partial group each)."""
    sign_bit = 1 << (size * 8 - 1)
    neg_mask = ((1 << (size * 8)) - 1) ^ sign_bit
    frac_mask = (1 << frac_bits) - 1
    limit = 10**scale
    text = f"%s%d.%0{scale}d" if scale else "%s%d"

    def decode(raw: bytes) -> str:
        v = int.from_bytes(raw, "big")
        if v & sign_bit:
            v ^= sign_bit
            sign = ""
        else:
            v ^= neg_mask
            sign = "-"
        if not scale:
            return text % (sign, v)
        frac = v & frac_mask
        if frac >= limit:
            raise ValueError("DECIMAL fraction out of range")
        return text % (sign, v >> frac_bits, frac)

    return decode


_CACHE: dict[tuple[int, int], Callable[[bytes], str]] = {}


def decode_decimal(raw: bytes, precision: int, scale: int) -> str:
    """Decode one DECIMAL value; ``raw`` must hold exactly its bytes."""
    fn = _CACHE.get((precision, scale))
    if fn is None:
        fn = _CACHE[(precision, scale)] = make_decimal_decoder(precision, scale)
    return fn(raw)
