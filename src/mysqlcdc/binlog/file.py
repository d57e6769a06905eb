"""Read a binlog file from disk as raw events (framing only; decoding is the parser's)."""

from __future__ import annotations

import os
import struct
from typing import Iterator

from ..errors import EncryptedBinlogError, MalformedEventError, TruncatedEventError
from . import constants as C

__all__ = ["iter_binlog_file", "iter_binlog_bytes"]

_U32 = struct.Struct("<I").unpack_from
_CHUNK = 1 << 20


def iter_binlog_file(path: str | os.PathLike[str], chunk: int = _CHUNK) -> Iterator[tuple[int, bytes]]:
    """Yield ``(start_pos, raw event)`` for every event after the 4-byte magic.

    Raises EncryptedBinlogError for encrypted files (MySQL's ``\\xfdbin`` magic or a
    MariaDB START_ENCRYPTION event), TruncatedEventError when the file ends inside
    an event, MalformedEventError for impossible sizes or a wrong magic. The file is
    read ``chunk`` bytes at a time (more for a larger event), so a reader that stops
    early reads little and memory stays bounded.
    """
    name = os.path.basename(os.fspath(path))
    with open(path, "rb") as f:
        buf = f.read(max(chunk, 4))
        _check_magic(buf[:4], name)
        base, i, eof = 0, 4, len(buf) < max(chunk, 4)
        head, encryption = C.LOG_EVENT_HEADER_LEN, C.MARIA_START_ENCRYPTION_EVENT
        while True:
            # frame every whole event of the buffer first, then hand them out in C
            # (``yield from`` a list); anything wrong comes after the events before it
            n = len(buf)
            events = []
            append = events.append
            bad = encrypted = False
            while n - i >= head:
                end = i + _U32(buf, i + 9)[0]
                if end - i < head:
                    bad = True
                    break
                if end > n:
                    break
                append((base + i, buf[i:end]))
                if buf[i + 4] == encryption:
                    encrypted = True
                    break
                i = end
            yield from events
            if bad:              # a size below the header's: raised as for bytes in memory
                yield from _frame(buf, i, name, base)
            if encrypted:
                raise EncryptedBinlogError("MariaDB START_ENCRYPTION: the events after it are encrypted",
                                           file=name, pos=base + i, event_type=encryption)
            if eof:
                break
            need = _U32(buf, i + 9)[0] if n - i >= head else 0
            more = f.read(max(chunk, need - (n - i)))
            eof = not more
            base, buf, i = base + i, buf[i:] + more, 0
    # the rest of the file holds no whole event: the same errors as for the bytes
    for _ in _frame(buf, i, name, base):
        pass


def iter_binlog_bytes(data: bytes, name: str | None = None) -> Iterator[tuple[int, bytes]]:
    """As ``iter_binlog_file`` over a binlog file's bytes already in memory."""
    _check_magic(data[:4], name)
    yield from _frame(data, 4, name, 0)


def _check_magic(magic: bytes, name: str | None) -> None:
    if magic == C.BINLOG_MAGIC_ENCRYPTED:
        raise EncryptedBinlogError("MySQL encrypted binlog file (magic fd 62 69 6e)", file=name, pos=0)
    if magic != C.BINLOG_MAGIC:
        if len(magic) < 4 and C.BINLOG_MAGIC.startswith(magic):
            raise TruncatedEventError("file ends inside the binlog magic", file=name, pos=0)
        raise MalformedEventError(f"not a binlog file (magic {magic.hex()})", file=name, pos=0)


def _frame(data: bytes, pos: int, name: str | None, base: int) -> Iterator[tuple[int, bytes]]:
    """Events of ``data`` from ``pos`` (``base`` is the file position of ``data[0]``)."""
    total = len(data)
    while pos < total:
        if total - pos < C.LOG_EVENT_HEADER_LEN:
            raise TruncatedEventError(f"file ends {total - pos} bytes into an event header",
                                      file=name, pos=base + pos)
        type_code = data[pos + 4]
        size = _U32(data, pos + 9)[0]
        if size < C.LOG_EVENT_HEADER_LEN:
            raise MalformedEventError(f"event size {size} is below the header size",
                                      file=name, pos=base + pos, event_type=type_code)
        if pos + size > total:
            raise TruncatedEventError(f"event of {size} bytes runs past the end of the file",
                                      file=name, pos=base + pos, event_type=type_code)
        yield base + pos, data[pos:pos + size]
        if type_code == C.MARIA_START_ENCRYPTION_EVENT:
            raise EncryptedBinlogError("MariaDB START_ENCRYPTION: the events after it are encrypted",
                                       file=name, pos=base + pos, event_type=type_code)
        pos += size
