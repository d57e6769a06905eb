"""FLOAT (IEEE binary32) values -> the shortest decimal that round-trips.

A FLOAT column's value is emitted as the Python float of the shortest decimal
(6, 7 or 8 significant digits) that packs back to the same four bytes: 1.1, not
1.100000023841858. ``float32_text`` says what that means: the nearest 6-digit
decimal (``'%.6g'``), parsed, if it packs back to the stored bytes, else the
nearest 7-digit one, else the 8-digit one, else the binary32 value itself.

``float32_value`` computes the same float without formatting and parsing text,
for the values most columns hold (1e-5 <= |x| < 1e6): with x = m / 2**s (m the
24-bit significand) and k = n - 1 - floor(log10(x)) for n digits,

* ``r = m * (10**k / 2**s)`` is x * 10**k exactly (m < 2**24 and 5**k <= 5**12
  < 2**29, so the product fits the 53 bits of a double); ``(r + 1.5 * 2**52) -
  1.5 * 2**52`` rounds it to an integer d half to even, as ``'%.ng'`` rounds the
  exact binary value;
* ``d / 10**k`` is a correctly rounded quotient of two exact doubles: the double
  nearest to d * 10**-k, which is what ``float()`` makes of the n-digit text;
* when ``|r - d|`` is at least ``10**k / 2**s`` (one binary32 step of x, scaled)
  the n-digit decimal lies a whole step or more from x, so it cannot pack back to
  x (rounding is monotonic and the neighbours of x are doubles too): that attempt
  is skipped without dividing or packing;
* every other candidate is packed and compared with the stored bytes, exactly
  as ``float32_text`` does.

floor(log10(x)) comes from the binary exponent: each binade [2**23, 2**24) / 2**s
holds at most one power of ten, at significand ``thr``. Exponents whose decades
need k outside 0..12 (and zero, subnormals, inf, NaN) take ``float32_text``.
"""

from __future__ import annotations

import math
import struct

__all__ = ["float32_text", "float32_value"]

_F32 = struct.Struct("<f")
_F32_UNPACK, _F32_PACK = _F32.unpack, _F32.pack
_DIGITS = (6, 7, 8)
_MAX_K = 12                          # 5**12 * 2**24 < 2**53: x * 10**k exact


def float32_text(raw: bytes) -> float:
    """The reference: format with 6, 7, 8 significant digits, parse, pack, compare."""
    x = _F32_UNPACK(raw)[0]
    y = float("%.6g" % x)
    if _F32_PACK(y) == raw:
        return y
    for fmt in ("%.7g", "%.8g"):
        y = float(fmt % x)
        if _F32_PACK(y) == raw:
            return y
    return x  # 9 significant digits always round-trip: x itself is the shortest


def _floor_log10_pow2(j: int) -> int:
    """floor(log10(2**j)), exactly."""
    if j >= 0:
        return len(str(1 << j)) - 1
    return -len(str(1 << -j))        # 2**-j (j < 0) is never a power of ten but 1


def _decade_steps(s: int, d: int, negative: bool) -> tuple[tuple[float, float], ...] | None:
    """(10**k / 2**s, +-10**k) per digit count for values whose floor(log10) is ``d``;
    None when some k is outside 0.._MAX_K."""
    steps = []
    for n in _DIGITS:
        k = n - 1 - d
        if not 0 <= k <= _MAX_K:
            return None
        steps.append((math.ldexp(float(10 ** k), -s), float(-10 ** k if negative else 10 ** k)))
    return tuple(steps)


def _exponent_table() -> tuple:
    """Indexed by the top 9 bits (sign, biased exponent): (thr, steps at or above
    the binade's power of ten, steps below it)."""
    table: list[tuple] = [(0, None, None)] * 512
    for e in range(1, 150):                  # normal, x < 2**23: s >= 1
        s = 150 - e                          # x = m / 2**s, m in [2**23, 2**24)
        low = _floor_log10_pow2(23 - s)      # floor(log10) at the binade's bottom
        p = low + 1                          # 10**p is in the binade iff thr < 2**24
        thr = 10 ** p << s if p >= 0 else -(-(1 << s) // 10 ** -p)   # ceil(10**p * 2**s)
        for negative in (False, True):
            table[negative << 8 | e] = (thr, _decade_steps(s, p, negative),
                                        _decade_steps(s, low, negative))
    return tuple(table)


_TABLE = _exponent_table()


def float32_value(raw: bytes) -> float:
    """The same float as ``float32_text(raw)``, by exact double arithmetic where it can."""
    b = int.from_bytes(raw, "little")
    thr, high, low = _TABLE[b >> 23]
    m = b & 0x7FFFFF | 0x800000
    steps = high if m >= thr else low
    if steps is None:
        return float32_text(raw)
    for c, p in steps:
        r = m * c
        d = r + 6755399441055744.0 - 6755399441055744.0     # 1.5 * 2**52
        if -c < r - d < c:
            y = d / p
            if _F32_PACK(y) == raw:
                return y
    return _F32_UNPACK(raw)[0]
