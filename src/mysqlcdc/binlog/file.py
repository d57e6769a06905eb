"""Read a binlog file from disk as raw events (framing only; decoding is the parser's)."""

from __future__ import annotations

import os
from typing import Iterator

from ..errors import EncryptedBinlogError, MalformedEventError, TruncatedEventError
from . import constants as C

__all__ = ["iter_binlog_file", "iter_binlog_bytes"]


def iter_binlog_file(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield ``(start_pos, raw event)`` for every event after the 4-byte magic.

    Raises EncryptedBinlogError for encrypted files (MySQL's ``\\xfdbin`` magic or a
    MariaDB START_ENCRYPTION event), TruncatedEventError when the file ends inside
    an event, MalformedEventError for impossible sizes or a wrong magic.
    """
    with open(path, "rb") as f:
        data = f.read()
    yield from iter_binlog_bytes(data, os.path.basename(os.fspath(path)))


def iter_binlog_bytes(data: bytes, name: str | None = None) -> Iterator[tuple[int, bytes]]:
    """As ``iter_binlog_file`` over a binlog file's bytes already in memory."""
    magic = data[:4]
    if magic == C.BINLOG_MAGIC_ENCRYPTED:
        raise EncryptedBinlogError("MySQL encrypted binlog file (magic fd 62 69 6e)", file=name, pos=0)
    if magic != C.BINLOG_MAGIC:
        if len(data) < 4 and C.BINLOG_MAGIC.startswith(magic):
            raise TruncatedEventError("file ends inside the binlog magic", file=name, pos=0)
        raise MalformedEventError(f"not a binlog file (magic {magic.hex()})", file=name, pos=0)
    pos, total = 4, len(data)
    while pos < total:
        if total - pos < C.LOG_EVENT_HEADER_LEN:
            raise TruncatedEventError(f"file ends {total - pos} bytes into an event header",
                                      file=name, pos=pos)
        type_code = data[pos + 4]
        size = int.from_bytes(data[pos + 9:pos + 13], "little")
        if size < C.LOG_EVENT_HEADER_LEN:
            raise MalformedEventError(f"event size {size} is below the header size",
                                      file=name, pos=pos, event_type=type_code)
        if pos + size > total:
            raise TruncatedEventError(f"event of {size} bytes runs past the end of the file",
                                      file=name, pos=pos, event_type=type_code)
        yield pos, data[pos:pos + size]
        if type_code == C.MARIA_START_ENCRYPTION_EVENT:
            raise EncryptedBinlogError("MariaDB START_ENCRYPTION: the events after it are encrypted",
                                       file=name, pos=pos, event_type=type_code)
        pos += size
