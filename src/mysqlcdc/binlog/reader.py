"""A bounds-checked cursor over one event's bytes, for the non-row parts."""

from __future__ import annotations

import struct

__all__ = ["Reader", "ShortRead", "read_packed_int"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_S64 = struct.Struct("<q").unpack_from


class ShortRead(ValueError):
    """A field runs past the end of the event body."""


def read_packed_int(buf: bytes, pos: int) -> tuple[int, int]:
    """MySQL length-encoded integer at ``pos`` -> (value, next position)."""
    b = buf[pos]
    if b < 251:
        return b, pos + 1
    if b == 252:
        return buf[pos + 1] | buf[pos + 2] << 8, pos + 3
    if b == 253:
        return buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16, pos + 4
    if b == 254:
        if pos + 9 > len(buf):
            raise ShortRead("packed integer overruns")
        return _U64(buf, pos + 1)[0], pos + 9
    raise ShortRead(f"invalid packed integer prefix {b}")


class Reader:
    """Sequential little-endian reads from ``buf[pos:end]``; overruns raise ShortRead."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise ShortRead(f"need {n} bytes at {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def u8(self) -> int:
        return self.buf[self._need(1)]

    def u16(self) -> int:
        return _U16(self.buf, self._need(2))[0]

    def u24(self) -> int:
        return int.from_bytes(self.buf[self._need(3):self.pos], "little")

    def u32(self) -> int:
        return _U32(self.buf, self._need(4))[0]

    def uint(self, n: int) -> int:
        return int.from_bytes(self.buf[self._need(n):self.pos], "little")

    def u64(self) -> int:
        return _U64(self.buf, self._need(8))[0]

    def s64(self) -> int:
        return _S64(self.buf, self._need(8))[0]

    def take(self, n: int) -> bytes:
        return bytes(self.buf[self._need(n):self.pos])

    def rest(self) -> bytes:
        return self.take(self.end - self.pos)

    def packed(self) -> int:
        if self.pos >= self.end:
            raise ShortRead("packed integer at end of body")
        value, nxt = read_packed_int(self.buf, self.pos)
        if nxt > self.end:
            raise ShortRead("packed integer overruns")
        self.pos = nxt
        return value

    def cstring(self) -> bytes:
        """Bytes up to a NUL (consumed, not returned)."""
        i = self.buf.find(b"\x00", self.pos, self.end)
        if i < 0:
            raise ShortRead("unterminated string")
        s = bytes(self.buf[self.pos:i])
        self.pos = i + 1
        return s

    def varlen_uint(self) -> int:
        """The serialization library's variable-length unsigned integer."""
        first = self.u8()
        extra = 0
        while first >> extra & 1 and extra < 8:
            extra += 1
        raw = self.buf[self.pos - 1:self._need(extra) + extra]
        value = int.from_bytes(raw, "little")
        return value >> 8 if extra == 8 else value >> (extra + 1)

    def varlen_int(self) -> int:
        u = self.varlen_uint()
        return -(u >> 1) - 1 if u & 1 else u >> 1
