"""Packet framing on a socket that pymysql has already authenticated.

A MySQL packet is a 3-byte little-endian payload length, a 1-byte sequence id
and the payload. A payload of 2**24-1 bytes or more is split into packets of
exactly 0xFFFFFF bytes followed by a shorter one (possibly empty), so a binlog
event of up to 1 GiB arrives as many packets that we join back into one.

pymysql's ``_read_packet`` would do the same but wraps each payload in a
``MysqlPacket`` and raises on error packets; here we keep raw bytes and decide
ourselves what an error packet means.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

import pymysql

__all__ = ["MAX_PACKET", "Disconnected", "PacketChannel", "ServerError", "parse_error_packet", "lenenc_str"]

MAX_PACKET = 0xFFFFFF
_HEADER = struct.Struct("<HBB")


class Disconnected(Exception):
    """The socket closed, timed out or failed: the stream may be resumed."""


@dataclass(frozen=True, slots=True)
class ServerError:
    """An ERR packet: error number, SQLSTATE and the server's message."""

    code: int
    sqlstate: str
    message: str


def parse_error_packet(body: bytes) -> ServerError:
    """Decode an ERR packet sent after the handshake, without its 0xFF byte."""
    code = int.from_bytes(body[0:2], "little")
    rest = body[2:]
    sqlstate = ""
    if rest[:1] == b"#":
        sqlstate, rest = rest[1:6].decode("ascii", "replace"), rest[6:]
    return ServerError(code, sqlstate, rest.decode("utf-8", "replace"))


def lenenc_str(value: bytes) -> bytes:
    """A string prefixed by its one-byte length (all we need: < 251 bytes)."""
    if len(value) > 250:
        raise ValueError(f"string too long for a one-byte length prefix: {len(value)} bytes")
    return bytes([len(value)]) + value


class PacketChannel:
    """Reads and writes whole payloads on an authenticated pymysql connection."""

    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self._conn = conn
        self._rfile: BinaryIO = conn._rfile  # buffered reader over the (TLS) socket
        self._sock = conn._sock

    def set_timeout(self, seconds: float | None) -> None:
        """Socket timeout for reads and writes; None blocks forever."""
        self._sock.settimeout(seconds)
        self._conn._current_timeout = seconds  # keep pymysql's cache honest

    def send_command(self, payload: bytes) -> None:
        """Send one command packet (sequence id 0); commands are small."""
        if len(payload) >= MAX_PACKET:
            raise ValueError("command payload too large for one packet")
        try:
            self._sock.sendall(len(payload).to_bytes(3, "little") + b"\x00" + payload)
        except OSError as exc:
            raise Disconnected(f"send failed: {exc}") from exc

    def read_payload(self) -> tuple[int, bytes]:
        """One logical payload as (first byte, the bytes after it).

        Joins 16 MiB continuation packets, copying a large event only once.
        """
        parts: list[bytes] = []
        while True:
            low, high, _seq = _HEADER.unpack(self._read_exact(4))
            length = low | (high << 16)
            parts.append(self._read_exact(length))
            if length < MAX_PACKET:
                break
        if not parts[0]:
            raise Disconnected("the server sent an empty packet where a payload was due")
        first = parts[0][0]
        if len(parts) == 1:
            return first, parts[0][1:]
        return first, b"".join([memoryview(parts[0])[1:], *parts[1:]])

    def _read_exact(self, n: int) -> bytes:
        try:
            data = self._rfile.read(n)
        except (OSError, ValueError) as exc:  # timeouts, TLS errors, a closed file
            raise Disconnected(f"read failed: {exc!r}") from exc
        if data is None or len(data) < n:
            raise Disconnected("server closed the connection")
        return data
