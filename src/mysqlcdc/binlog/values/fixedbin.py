"""MariaDB's fixed-length binary types (``INET6``, ``INET4``, ``UUID``) in their text form.

The binlog carries such a value as a ``BINARY(n)`` column would (type STRING, binary
collation, trailing zero bytes left out), in the byte order the server shows it in
(a ``UUID`` whose storage order is swapped for its index is swapped back before it is
logged). Only the table's definition says which type a column is; with it the value is
written as the server writes it in a result set, so a streamed value and the same value
read by a snapshot's ``SELECT`` are the same text:

* ``INET4`` ``192.0.2.1``;
* ``INET6`` lower-case hex groups without leading zeros, the longest run of zero groups
  (the first of equal runs, one group long or more) written ``::``, and an address whose
  first 96 bits are zero with a non-zero seventh group, or whose first 80 are zero and
  next 16 are ``ffff``, ending in its IPv4 address (``::192.0.2.1``,
  ``::ffff:192.0.2.1``);
* ``UUID`` ``123e4567-e89b-12d3-a456-426655440000``.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FIXED_TEXT_TYPES", "inet4_text", "inet6_text", "uuid_text", "text_of"]


def inet4_text(raw: bytes) -> str:
    b = raw.ljust(4, b"\x00")
    return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}"


def inet6_text(raw: bytes) -> str:
    b = raw.ljust(16, b"\x00")
    words = [b[i] << 8 | b[i + 1] for i in range(0, 16, 2)]
    gap_at, gap_len = -1, 0              # the first longest run of zero groups
    i = 0
    while i < 8:
        if words[i]:
            i += 1
            continue
        j = i
        while j < 8 and not words[j]:
            j += 1
        if j - i > gap_len:
            gap_at, gap_len = i, j - i
        i = j
    if gap_at == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        head = "::" if gap_len == 6 else "::ffff:"
        return head + inet4_text(b[12:])
    if gap_at < 0:
        return ":".join(f"{w:x}" for w in words)
    left = ":".join(f"{w:x}" for w in words[:gap_at])
    right = ":".join(f"{w:x}" for w in words[gap_at + gap_len:])
    return f"{left}::{right}"


def uuid_text(raw: bytes) -> str:
    h = raw.ljust(16, b"\x00").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


FIXED_TEXT_TYPES: dict[str, tuple[int, Callable[[bytes], str]]] = {
    "inet4": (4, inet4_text), "inet6": (16, inet6_text), "uuid": (16, uuid_text)}


def text_of(data_type: str | None) -> Callable[[bytes], str] | None:
    """The text writer of a fixed-length binary type's values (None: not one)."""
    entry = FIXED_TEXT_TYPES.get(data_type or "")
    return entry[1] if entry else None
