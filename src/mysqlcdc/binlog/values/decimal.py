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
    lines = ["def decode(raw):", *("    " + line for line in decimal_code(precision, scale, "raw", "text", "_")),
             "    return text"]
    env: dict = {"FB": int.from_bytes, **DIGIT_TABLES}
    exec(compile("\n".join(lines), f"<DECIMAL({precision},{scale}) decoder>", "exec"), env)
    decode = env["decode"]
    decode.size = decimal_size(precision, scale)  # type: ignore[attr-defined]
    return decode


def decimal_code(precision: int, scale: int, raw: str, out: str, tmp: str) -> list[str]:
    """Python statements setting ``out`` to the text of the DECIMAL whose bytes are
    the expression ``raw`` (temporaries are named ``tmp`` + a suffix).

    Generated per shape: every group comes out by a fixed shift and the text is one
    ``%`` format, or for a scale of at most 6 an f-string with the fraction's digits
    looked up in tables; ``FB`` must be ``int.from_bytes`` and ``DIGIT_TABLES`` defined where
    the code runs. Out-of-range groups raise ValueError, checked in the order of
    ``decode_reference``.
    """
    if precision < 1 or scale < 0 or scale > precision or precision > 65:
        raise ValueError(f"invalid DECIMAL({precision},{scale})")
    intg0 = (precision - scale) // 9
    frac0, frac0x = divmod(scale, 9)
    size = decimal_size(precision, scale)
    sign_bit = 1 << (size * 8 - 1)
    trail_bits = _DIG2BYTES[frac0x] * 8
    v, sign = f"{tmp}v", f"{tmp}s"
    lines = [f"{v} = FB({raw}, 'big')",
             f"if {v} & {sign_bit}:",
             f"    {v} ^= {sign_bit}",
             f"    {sign} = ''",
             "else:",
             f"    {v} ^= {((1 << (size * 8)) - 1) ^ sign_bit}",
             f"    {sign} = '-'"]
    shift = 0

    def group(name: str) -> None:
        nonlocal shift
        lines.append(f"{name} = {v} >> {shift} & 0xFFFFFFFF" if shift else f"{name} = {v} & 0xFFFFFFFF")
        lines.append(f"if {name} >= {_GROUP_MAX}: raise ValueError('DECIMAL group out of range')")
        shift += 32

    trail = f"{tmp}t"
    if trail_bits:
        lines.append(f"{trail} = {v} & {(1 << trail_bits) - 1}")
        shift = trail_bits
    fracs = [f"{tmp}f{k}" for k in range(frac0)]      # least significant first
    for name in fracs:
        group(name)
    if trail_bits:
        lines.append(f"if {trail} >= {10 ** frac0x}: raise ValueError('DECIMAL fraction out of range')")
    wholes = [f"{tmp}w{k}" for k in range(intg0)]
    for name in wholes:
        group(name)
    expr = f"{v} >> {shift}" if shift else v
    for name in reversed(wholes):
        expr = f"({expr}) * {_GROUP_MAX} + {name}"
    if frac0 == 0 and frac0x <= 6:
        # no full fraction group: the text is an f-string, the digits looked up by threes
        lines.append(f"{out} = f'{{{sign}}}{{{expr}}}{_digits_code(trail, frac0x)}'")
        return lines
    fmt = "%s%d"
    args = [sign, expr]
    if scale:
        fmt += "." + "%09d" * frac0 + (f"%0{frac0x}d" if trail_bits else "")
        args += fracs[::-1] + ([trail] if trail_bits else [])
    lines.append(f"{out} = {fmt!r} % ({', '.join(args)})")
    return lines


# zero-padded texts of 1, 2, 3 digits, under the names the generated code uses
DIGIT_TABLES = {f"DIG{n}": tuple(f"{i:0{n}d}" for i in range(10 ** n)) for n in (1, 2, 3)}


def _digits_code(value: str, n: int) -> str:
    """f-string text of ``'.%0{n}d' % value`` (nothing for n = 0), for 0 <= value < 10**n
    and n <= 6: one or two lookups in ``DIGIT_TABLES`` (cheaper than formatting an int)."""
    if not n:
        return ""
    if n <= 3:
        return f".{{DIG{n}[{value}]}}"
    low = 10 ** (n - 3)
    return f".{{DIG3[{value} // {low}]}}{{DIG{n - 3}[{value} % {low}]}}"


def decode_reference(raw: bytes, precision: int, scale: int) -> str:
    """The same value by a plain loop over the groups: what the generated decoders
    are tested against."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    size = decimal_size(precision, scale)
    sign_bit = 1 << (size * 8 - 1)
    trail_bits = _DIG2BYTES[frac0x] * 8
    v = int.from_bytes(raw, "big")
    if v & sign_bit:
        v ^= sign_bit
        sign = ""
    else:
        v ^= ((1 << (size * 8)) - 1) ^ sign_bit
        sign = "-"
    frac = ""
    if trail_bits:
        frac = format(v & ((1 << trail_bits) - 1), f"0{frac0x}d")
        v >>= trail_bits
    for _ in range(frac0):
        g = v & 0xFFFFFFFF
        if g >= _GROUP_MAX:
            raise ValueError("DECIMAL group out of range")
        frac = format(g, "09d") + frac
        v >>= 32
    if len(frac) > scale:
        raise ValueError("DECIMAL fraction out of range")
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


_CACHE: dict[tuple[int, int], Callable[[bytes], str]] = {}


def decode_decimal(raw: bytes, precision: int, scale: int) -> str:
    """Decode one DECIMAL value; ``raw`` must hold exactly its bytes."""
    fn = _CACHE.get((precision, scale))
    if fn is None:
        fn = _CACHE[(precision, scale)] = make_decimal_decoder(precision, scale)
    return fn(raw)
