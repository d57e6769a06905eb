"""Small value types shared by every layer."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BinlogPosition", "binlog_file_number", "make_seq", "SEQ_FILE", "SEQ_POS", "SEQ_EPOCH",
           "StartTimestamp", "parse_start", "START_FORMS"]

_FILE_NUMBER = re.compile(r"\.(\d+)$")


def binlog_file_number(name: str) -> int:
    """The numeric extension of a binlog file name: ``mysql-bin.000042`` -> 42."""
    m = _FILE_NUMBER.search(name)
    if m is None:
        raise ValueError(f"not a binlog file name (no numeric extension): {name!r}")
    return int(m.group(1))


@dataclass(frozen=True, order=True, slots=True)
class BinlogPosition:
    """A place in the binlog stream: a file name and a byte offset in it.

    Ordering follows the file's numeric extension, then the offset, so positions
    compare correctly across rotations (``mysql-bin.000009`` < ``mysql-bin.000010``).
    """

    file_number: int
    pos: int
    file: str

    @classmethod
    def of(cls, file: str, pos: int) -> "BinlogPosition":
        return cls(binlog_file_number(file), int(pos), file)

    @classmethod
    def parse(cls, text: str) -> "BinlogPosition":
        """Parse ``"mysql-bin.000042:1234"``."""
        file, sep, pos = text.rpartition(":")
        if not sep or not file or not pos.isdigit():
            raise ValueError(f"expected FILE:POS such as mysql-bin.000042:4, got {text!r}")
        return cls.of(file, int(pos))

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True, slots=True)
class StartTimestamp:
    """``start: 2026-11-01T12:00:00Z``: the first transaction committed at or after it."""

    ms: int                                   # milliseconds since the epoch, UTC

    @classmethod
    def parse(cls, value: object) -> "StartTimestamp":
        from datetime import datetime, timezone

        if isinstance(value, datetime):
            at = value
        else:
            text = str(value).strip()
            if not _TIMESTAMP.match(text):
                raise ValueError(f"not an ISO-8601 timestamp such as 2026-11-01T12:00:00Z: "
                                 f"{text!r}")
            at = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)     # a time without a zone is UTC
        return cls(round(at.timestamp() * 1000))

    def __str__(self) -> str:
        from datetime import datetime, timezone

        at = datetime.fromtimestamp(self.ms / 1000, tz=timezone.utc)
        text = at.isoformat(timespec="milliseconds" if self.ms % 1000 else "seconds")
        return text.replace("+00:00", "Z")


_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d:?\d\d)?$")

START_FORMS = ("earliest | latest | FILE:POS | GTID set (0-1-100, uuid:1-5) | "
               "timestamp (2026-11-01T12:00:00Z)")


def parse_start(value: object):
    """A start position as written: ``earliest``, ``latest``, ``FILE:POS``, a GTID set
    (MariaDB ``0-1-100[,...]``, MySQL ``uuid:1-5[,...]``, tagged) or an ISO timestamp.
    Returns the string, a BinlogPosition, a ``GtidSet`` or a StartTimestamp."""
    from mysqlcdc.gtidset import GtidSet

    if isinstance(value, (BinlogPosition, StartTimestamp, GtidSet)) or value in ("earliest",
                                                                                 "latest"):
        return value
    if not isinstance(value, str):
        if hasattr(value, "isoformat"):
            return StartTimestamp.parse(value)
        raise ValueError(f"expected {START_FORMS}, got {value!r}")
    text = value.strip()
    for kind in (BinlogPosition.parse, StartTimestamp.parse):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        found = GtidSet.parse(text)
    except ValueError:
        found = None
    if found is None or found.empty:
        raise ValueError(f"expected {START_FORMS}, got {text!r}")
    return found


# seq = file_number * SEQ_FILE + event_pos * SEQ_POS + 2 * row_index + part, part 1 only
# for the create half of an update that changed the row's key (docs/ENVELOPE.md).
# A decimal(38,0): exact, strictly increasing in binlog order across files,
# identical on replay and sortable everywhere (see docs/ENVELOPE.md).
SEQ_POS = 10**12
SEQ_FILE = 10**24
# a pipeline that followed a failover to another server adds epoch * SEQ_EPOCH, so the new
# server's changes sort after the old one's whatever its binlog files are numbered
SEQ_EPOCH = 10**34


def make_seq(file_number: int, event_pos: int, row_index: int, part: int = 0) -> int:
    return file_number * SEQ_FILE + event_pos * SEQ_POS + 2 * row_index + part
