"""Small value types shared by every layer."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BinlogPosition", "binlog_file_number", "make_seq", "SEQ_FILE", "SEQ_POS"]

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


# seq = file_number * SEQ_FILE + event_pos * SEQ_POS + 2 * row_index + part, part 1 only
# for the create half of an update that changed the row's key (docs/ENVELOPE.md).
# A decimal(38,0): exact, strictly increasing in binlog order across files,
# identical on replay and sortable everywhere (see docs/ENVELOPE.md).
SEQ_POS = 10**12
SEQ_FILE = 10**24


def make_seq(file_number: int, event_pos: int, row_index: int, part: int = 0) -> int:
    return file_number * SEQ_FILE + event_pos * SEQ_POS + 2 * row_index + part
