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

__all__ = ["MAX_PACKET", "Disconnected", "PacketChannel", "ServerError", "frame_events", "packet_size",
           "parse_error_packet", "lenenc_str"]

MAX_PACKET = 0xFFFFFF
_HEADER = struct.Struct("<HBB")
_U32 = struct.Struct("<I").unpack_from
READ_CHUNK = 1 << 20  # most bytes one socket read asks for


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
    """Reads and writes whole payloads on an authenticated pymysql connection.

    Reads go through a buffer of our own, filled ``READ_CHUNK`` bytes at a time
    from pymysql's buffered reader (never past what the socket already holds,
    so nothing waits for data that has not arrived): a busy stream costs one
    read per many events, and :meth:`read_events` frames every whole event
    packet of the buffer in one loop.
    """

    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self._conn = conn
        self._rfile: BinaryIO = conn._rfile  # buffered reader over the (TLS) socket
        self._sock = conn._sock
        self._buf = b""
        self._at = 0       # bytes of _buf before this are handed out

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

    def read_events(self) -> list[bytes]:
        """The bodies (after the 0x00 byte) of the event packets now buffered.

        Reads from the socket only while not one packet is whole. Returns ``[]``
        when the next payload is anything but a one-packet event (an error,
        EOF, a payload continued past 16 MiB): :meth:`read_payload` reads it.
        """
        while True:
            events, self._at = frame_events(self._buf, self._at)
            if events:
                return events
            need = packet_size(self._buf, self._at)
            if need == 4 + MAX_PACKET or len(self._buf) - self._at >= need:
                return []     # a continued payload is read (and joined) as it comes
            self._fill(need)

    def buffered_events(self) -> tuple[bytes, int]:
        """``(buffer, offset)`` once a whole one-packet event is buffered at the offset
        (read from the socket until then), for a reader that frames the packets in place
        itself and says how far it got with :meth:`consumed`; ``(b"", 0)`` when the next
        payload is anything else (:meth:`read_events` returns ``[]`` there)."""
        while True:
            buf, at = self._buf, self._at
            if len(buf) - at >= 5:
                length = _U32(buf, at)[0] & MAX_PACKET
                if 0 < length < MAX_PACKET and at + 4 + length <= len(buf) and not buf[at + 4]:
                    return buf, at
            need = packet_size(buf, at)
            if need == 4 + MAX_PACKET or len(buf) - at >= need:
                return b"", 0
            self._fill(need)

    def consumed(self, buf: bytes, at: int) -> None:
        """The packets of ``buf`` (from :meth:`buffered_events`) before ``at`` are read."""
        if buf is self._buf:
            self._at = at

    def read_payload(self) -> tuple[int, bytes]:
        """One logical payload as (first byte, the bytes after it).

        Joins 16 MiB continuation packets, copying a large event only once more.
        """
        parts: list[bytes] = []
        while True:
            low, high, _seq = _HEADER.unpack(self._take(4))
            length = low | (high << 16)
            parts.append(self._take(length))
            if length < MAX_PACKET:
                break
        if not parts[0]:
            raise Disconnected("the server sent an empty packet where a payload was due")
        first = parts[0][0]
        if len(parts) == 1:
            return first, parts[0][1:]
        return first, b"".join([memoryview(parts[0])[1:], *parts[1:]])

    def _take(self, n: int) -> bytes:
        if len(self._buf) - self._at < n:
            self._fill(n)
        at = self._at
        self._at = at + n
        return self._buf[at:at + n]   # the buffer itself when it holds exactly n

    def _fill(self, need: int) -> None:
        """Buffer at least ``need`` unread bytes, plus whatever else has arrived."""
        chunks = [self._buf[self._at:]]
        have = len(chunks[0])
        try:
            while have < need:
                if need - have > READ_CHUNK:   # one large packet: read exactly its rest
                    data = self._rfile.read(need - have)
                    if data is not None and len(data) < need - have:
                        data = b""
                else:
                    data = self._rfile.read1(READ_CHUNK)
                if not data:                   # EOF (None: would block, never on a blocking socket)
                    raise Disconnected("server closed the connection")
                chunks.append(data)
                have += len(data)
        except (OSError, ValueError) as exc:  # timeouts, TLS errors, a closed file
            raise Disconnected(f"read failed: {exc!r}") from exc
        self._buf = b"".join(chunks)
        self._at = 0


def frame_events(buf: bytes, at: int) -> tuple[list[bytes], int]:
    """Cut ``buf`` from ``at`` into event bodies while the packets there are
    whole, one packet long and start with the 0x00 an event is sent after.

    Returns the bodies and the offset of the first packet not taken.
    """
    n = len(buf)
    events: list[bytes] = []
    append = events.append
    while n - at >= 4:
        length = _U32(buf, at)[0] & MAX_PACKET   # the fourth byte is the sequence id
        end = at + 4 + length
        if end > n or not 0 < length < MAX_PACKET or buf[at + 4]:
            break
        append(buf[at + 5:end])
        at = end
    return events, at


def packet_size(buf: bytes, at: int) -> int:
    """Bytes the packet at ``at`` takes with its header (4 while the header is incomplete)."""
    if len(buf) - at < 4:
        return 4
    return 4 + (_U32(buf, at)[0] & MAX_PACKET)
