"""A text-protocol result set, read whole and split into columns without a Python object
per value.

pymysql turns every value of a result set into a Python object (about 3 µs a value);
a snapshot reads millions. ``read_text_result`` sends ``COM_QUERY`` on a connection
pymysql has authenticated, receives the rows' packets into one buffer (a framing loop
that only notes where each row starts), then locates the length-encoded values of one
column of every row at a time with numpy, and hands each column out as an Arrow binary
array over the same bytes (NULL where the server sent 0xFB). The values are the
server's text, as ``mysql`` prints them; what they mean is the caller's business.

>>> result = read_text_result(conn, "SELECT id, name FROM shop.orders")   # doctest: +SKIP
>>> result.columns[1].to_pylist()[:2]                                     # doctest: +SKIP
[b'first', None]

An ERR packet (before or between rows, as when ``max_statement_time`` ends the query)
raises :class:`ResultError` with the server's code; a dropped connection raises
``Disconnected``. The connection is usable for the next statement afterwards.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pymysql

from mysqlcdc.arrowbuild import int64_array
from mysqlcdc.protocol.packet import MAX_PACKET, Disconnected, PacketChannel, ServerError, \
    parse_error_packet

__all__ = ["TextResult", "ResultError", "read_text_result", "split_columns"]

_U32 = struct.Struct("<I").unpack_from
_COM_QUERY = b"\x03"
_NULL, _U16, _U24, _U64, _EOF, _ERR = 0xFB, 0xFC, 0xFD, 0xFE, 0xFE, 0xFF
_READ = 1 << 20


class ResultError(Exception):
    """The server ended the statement with an ERR packet."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(f"({error.code}) {error.message}")
        self.error = error


@dataclass
class TextResult:
    """``columns[i]`` holds column ``i`` of every row (binary, null for SQL NULL)."""

    names: list[str]
    columns: list[pa.Array]
    rows: int
    size: int              # bytes of row data received


def read_text_result(conn: pymysql.connections.Connection, sql: str) -> TextResult:
    """Run ``sql`` and return its whole result set, split into columns."""
    channel = PacketChannel(conn)
    channel.send_command(_COM_QUERY + sql.encode("utf-8"))
    first, body = channel.read_payload()
    if first == _ERR:
        raise ResultError(parse_error_packet(body))
    if first == 0x00:                       # OK: a statement without a result set
        return TextResult([], [], 0, 0)
    count = _lenenc_int(bytes([first]) + body)
    names = [_column_name(channel.read_payload()) for _ in range(count)]
    first, _ = channel.read_payload()       # EOF after the definitions (no DEPRECATE_EOF)
    if first != _EOF:
        raise Disconnected(f"expected the end of the column definitions, got 0x{first:02x}")
    data, starts = _rows(conn, channel)
    size = len(data)
    return TextResult(names, split_columns(data, starts, count), len(starts), size)


def _lenenc_int(data: bytes) -> int:
    first = data[0]
    if first < 0xFB:
        return first
    width = {_U16: 2, _U24: 3, _U64: 8}[first]
    return int.from_bytes(data[1:1 + width], "little")


def _column_name(payload: tuple[int, bytes]) -> str:
    """The name (the fifth length-encoded string) of a column definition packet."""
    first, body = payload
    data, at = bytes([first]) + body, 0
    for _ in range(4):                      # catalog, schema, table, org_table
        at = _skip(data, at)
    size = data[at]
    return data[at + 1:at + 1 + size].decode("utf-8", "replace")


def _skip(data: bytes, at: int) -> int:
    first = data[at]
    if first < 0xFB:
        return at + 1 + first
    width = {_U16: 2, _U24: 3, _U64: 8}[first]
    return at + 1 + width + int.from_bytes(data[at + 1:at + 1 + width], "little")


def _rows(conn, channel: PacketChannel) -> tuple[bytearray, np.ndarray]:
    """Every row packet up to the closing EOF, as one buffer of payloads and the offset
    of each row's payload in it."""
    data = bytearray(channel._buf[channel._at:])
    channel._buf, channel._at = b"", 0
    rfile = conn._rfile
    starts: list[int] = []
    note = starts.append
    at = 0
    unpack = _U32
    while True:
        size = len(data)
        last = size - 4
        while at <= last:
            length = unpack(data, at)[0] & MAX_PACKET
            end = at + 4 + length
            if end > size:
                break
            if 0 < length < MAX_PACKET and data[at + 4] < _EOF:     # a row: the hot path
                note(at + 4)
                at = end
                continue
            head = data[at + 4] if length else -1
            if head == _EOF and length < 9:
                if end != size:
                    raise Disconnected("the server sent bytes after the end of a result set")
                del data[at:]
                return data, np.array(starts, np.int64)
            if head == _ERR:
                raise ResultError(parse_error_packet(bytes(data[at + 5:end])))
            if length == MAX_PACKET:          # a row of 16 MiB or more: join its packets
                joined = _join_continued(data, at)
                if joined is None:
                    break
                note(at + 12)
                at, size, last = joined, len(data), len(data) - 4
                continue
            note(at + 4)                      # 0xFE as a row's first byte: a long value
            at = end
        try:
            more = rfile.read1(_READ)
        except (OSError, ValueError) as exc:
            raise Disconnected(f"read failed: {exc!r}") from exc
        if not more:
            raise Disconnected("server closed the connection inside a result set")
        data += more


def _join_continued(data: bytearray, at: int) -> int | None:
    """Make the multi-packet payload at ``at`` contiguous, if all of it has arrived:
    its packets are replaced by a 12-byte head and the joined payload, whose end is
    returned (None: wait for more bytes). The row is noted after the head."""
    parts, cursor = [], at
    while True:
        if len(data) - cursor < 4:
            return None
        length = _U32(data, cursor)[0] & MAX_PACKET
        if len(data) < cursor + 4 + length:
            return None
        parts.append((cursor, length))
        cursor += 4 + length
        if length < MAX_PACKET:
            break
    body = b"".join(bytes(data[c + 4:c + 4 + n]) for c, n in parts)
    data[at:cursor] = b"\0" * 12 + body
    return at + 12 + len(body)


def split_columns(data: bytes | bytearray, starts: np.ndarray, count: int) -> list[pa.Array]:
    """Column ``i`` of every row whose payload starts at ``starts`` (see module doc). A
    bytearray is padded in place (no copy), other bytes are copied once."""
    if isinstance(data, bytearray):
        data.extend(b"\0" * 16)
        padded = data
    else:
        padded = bytes(data) + b"\0" * 16
    buf = np.frombuffer(padded, np.uint8)
    arrow = pa.py_buffer(padded)
    off = starts.copy()
    out = []
    for _ in range(count):
        first = buf[off].astype(np.int64)
        null = first == _NULL
        size = np.where(first < _NULL, first, 0)
        begin = off + 1
        wide = first > _NULL
        if wide.any():
            for marker, width in ((_U16, 2), (_U24, 3), (_U64, 8)):
                hit = first == marker
                if hit.any():
                    value = np.zeros(len(off), np.int64)
                    for k in range(width):
                        value |= buf[off + 1 + k].astype(np.int64) << (8 * k)
                    size = np.where(hit, value, size)
                    begin = np.where(hit, off + 1 + width, begin)
        end = begin + size
        out.append(_slices(arrow, begin, end, null, len(padded)))
        off = end
    return out


def _slices(arrow: pa.Buffer, begin: np.ndarray, end: np.ndarray, null: np.ndarray,
            size: int) -> pa.Array:
    """A binary array of ``buffer[begin:end]`` per row (null where ``null``): an array
    whose even elements are the values and odd ones the bytes between them, no copy;
    ``take`` of the even ones makes it compact."""
    m = len(begin)
    if not m:
        return pa.nulls(0, pa.binary())
    bounds = np.empty(2 * m + 1, np.int64)
    bounds[0:2 * m:2] = begin
    bounds[1:2 * m:2] = end
    bounds[2 * m] = end[-1]
    if size >= 2**31:
        spread = pa.Array.from_buffers(pa.large_binary(), 2 * m,
                                       [None, pa.py_buffer(bounds), arrow])
        values = spread.take(int64_array(np.arange(0, 2 * m, 2))).cast(pa.binary())
    else:
        spread = pa.Array.from_buffers(pa.binary(), 2 * m,
                                       [None, pa.py_buffer(bounds.astype(np.int32)), arrow])
        values = spread.take(int64_array(np.arange(0, 2 * m, 2)))
    if not null.any():
        return values
    valid = pa.py_buffer(np.packbits(~null, bitorder="little"))
    compact = values.buffers()
    return pa.Array.from_buffers(pa.binary(), m, [valid, compact[1], compact[2]],
                                 null_count=int(null.sum()), offset=values.offset)
