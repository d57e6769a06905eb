"""What an ERR packet during registration or binlog dump means for us.

The server answers ``COM_BINLOG_DUMP`` problems almost always with error 1236
(ER_MASTER_FATAL_ERROR_READING_BINLOG); the message text tells the cases apart,
so we match on stable fragments of it (MySQL and MariaDB wording).
"""

from __future__ import annotations

from mysqlcdc.errors import (
    BinlogPurgedError,
    MissingPrivilegeError,
    MysqlcdcError,
    ProtocolError,
    ServerIdInUseError,
)
from mysqlcdc.protocol.packet import ServerError
from mysqlcdc.protocol.retry import TRANSIENT_SERVER_CODES

__all__ = ["TRANSIENT_CODES", "map_dump_error"]

# Connection killed, query interrupted, server shutting down, net errors: one list,
# kept in protocol.retry with the rest of the transient/terminal decision.
TRANSIENT_CODES = TRANSIENT_SERVER_CODES
_PRIVILEGE_CODES = frozenset({1045, 1142, 1227, 1044})
_PURGED = ("could not find first log file", "purged required binary logs")
_IMPOSSIBLE = ("impossible position", "position beyond", "requested master to start replication from")
_SAME_ID = ("same server_uuid/server_id", "same server_id", "duplicate server")


def map_dump_error(err: ServerError, *, start: str, server_id: int,
                   oldest: str | None) -> MysqlcdcError:
    """A terminal mysqlcdc error for an ERR packet that is not transient.

    ``start`` is the requested ``file:pos``; ``oldest`` the oldest binlog the
    server still has (or None if it could not be listed).
    """
    text = err.message.lower()
    said = f"(server error {err.code}: {err.message})"
    if err.code in _PRIVILEGE_CODES:
        return MissingPrivilegeError(f"the server refused binlog streaming {said}")
    if any(s in text for s in _SAME_ID):
        return ServerIdInUseError(f"another replica or reader uses server_id {server_id} {said}")
    if any(s in text for s in _PURGED + _IMPOSSIBLE):
        what = "lies beyond the end of its binlog file" if any(s in text for s in _IMPOSSIBLE) \
            else "is not on the server (purged or never written)"
        where = f"the oldest binlog still on the server is {oldest}" if oldest else \
            "the server's binlog list could not be read"
        return BinlogPurgedError(f"cannot stream from {start}: it {what}; {where} {said}")
    return ProtocolError(f"the server stopped the binlog stream {said}",
                         hint="Read the server's message; it names what it refused.")
