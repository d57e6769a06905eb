"""Compressed event parts: MariaDB's zlib blocks and MySQL's TRANSACTION_PAYLOAD."""

from __future__ import annotations

import zlib

import zstandard

from . import constants as C
from .reader import Reader, ShortRead

__all__ = ["mariadb_uncompress", "read_payload", "iter_inner_events", "MAX_UNCOMPRESSED"]

MAX_UNCOMPRESSED = 1 << 32   # MySQL's own limit for one transaction payload


def mariadb_uncompress(buf: bytes, pos: int, end: int) -> bytes:
    """MariaDB compressed block: a header byte (0x80 | len-bytes), big-endian length, zlib data."""
    if pos >= end:
        raise ShortRead("empty compressed block")
    head = buf[pos]
    lenlen = head & 0x07
    if not head & 0x80 or lenlen == 0 or lenlen > 4 or (head >> 4) & 0x07:
        raise ShortRead(f"bad compressed block header 0x{head:02x}")
    if pos + 1 + lenlen > end:
        raise ShortRead("compressed block length overruns")
    size = int.from_bytes(buf[pos + 1:pos + 1 + lenlen], "big")
    d = zlib.decompressobj()
    out = d.decompress(buf[pos + 1 + lenlen:end], size + 1)
    if len(out) != size:
        raise ShortRead(f"compressed block holds {len(out)} bytes, header says {size}")
    return out


def read_payload(buf: bytes, pos: int, end: int) -> bytes:
    """The uncompressed inner events of a TRANSACTION_PAYLOAD body."""
    r = Reader(buf, pos, end)
    ctype, usize, size = C.PAYLOAD_COMPRESSION_NONE, None, None
    while True:
        field = r.packed()
        if field == C.OTW_PAYLOAD_HEADER_END_MARK:
            break
        length = r.packed()
        value = Reader(buf, r.pos, r.pos + length).packed() if length else 0
        r.take(length)
        if field == C.OTW_PAYLOAD_COMPRESSION_TYPE_FIELD:
            ctype = value
        elif field == C.OTW_PAYLOAD_UNCOMPRESSED_SIZE_FIELD:
            usize = value
        elif field == C.OTW_PAYLOAD_SIZE_FIELD:
            size = value
    data = r.rest()
    if size is not None and size != len(data):
        raise ShortRead(f"payload holds {len(data)} bytes, header says {size}")
    if ctype == C.PAYLOAD_COMPRESSION_NONE:
        return data
    if ctype != C.PAYLOAD_COMPRESSION_ZSTD:
        raise ShortRead(f"unknown payload compression type {ctype}")
    limit = usize if usize is not None else MAX_UNCOMPRESSED
    if limit > MAX_UNCOMPRESSED:
        raise ShortRead("payload uncompressed size out of range")
    try:
        out = _zstd_bounded(data, limit)
    except zstandard.ZstdError as e:
        raise ShortRead(f"zstd: {e}") from None
    if usize is not None and len(out) != usize:
        raise ShortRead(f"payload inflates to {len(out)} bytes, header says {usize}")
    return out


def _zstd_bounded(data: bytes, limit: int) -> bytes:
    """Inflate in chunks so a lying size field cannot make us allocate gigabytes up front."""
    chunks, total = [], 0
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as rd:
        while True:
            chunk = rd.read(1 << 20)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                raise ShortRead("payload inflates beyond its declared size")
            chunks.append(chunk)


def iter_inner_events(data: bytes):
    """(offset, event bytes) of the events packed in a payload."""
    pos = 0
    while pos < len(data):
        if pos + C.LOG_EVENT_HEADER_LEN > len(data):
            raise ShortRead("payload ends inside an event header")
        size = int.from_bytes(data[pos + 9:pos + 13], "little")
        if size < C.LOG_EVENT_HEADER_LEN or pos + size > len(data):
            raise ShortRead(f"inner event size {size} out of range")
        yield pos, data[pos:pos + size]
        pos += size
