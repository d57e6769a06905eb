"""Packet framing of the replication stream on crafted bytes: packets split
across socket reads, 16 MiB continuations, error and end packets. No server;
tests/integration/test_protocol.py covers the same code against mariadbd."""

from __future__ import annotations

import io

import pytest

from mysqlcdc.protocol.packet import MAX_PACKET, Disconnected, PacketChannel, frame_events, packet_size

pytestmark = pytest.mark.unit


def packet(payload: bytes, seq: int = 1) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def event(n: int, size: int = 30) -> bytes:
    """An event packet's payload: 0x00 then ``size`` bytes tagged with ``n``."""
    return b"\x00" + bytes([n % 256]) * size


class Trickle(io.RawIOBase):
    """A socket that returns at most the given number of bytes per read, in turn."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.at, self.reads = data, sizes, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        size = min(len(b), self.sizes[self.reads % len(self.sizes)], len(self.data) - self.at)
        b[:size] = self.data[self.at:self.at + size]
        self.at += size
        self.reads += 1
        return size


class Conn:
    """What PacketChannel takes from an authenticated pymysql connection."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._rfile = io.BufferedReader(Trickle(data, sizes), buffer_size=64)
        self._sock = None


def channel(data: bytes, sizes: list[int] = [1 << 30]) -> PacketChannel:
    return PacketChannel(Conn(data, sizes))


def drain(ch: PacketChannel) -> list[tuple[int, bytes]]:
    """Every payload until the end, as (first byte, rest), the way the stream reads."""
    out = []
    while True:
        try:
            events = ch.read_events()
        except Disconnected:
            return out
        if events:
            out += [(0, e) for e in events]
        else:
            out.append(ch.read_payload())


def test_frame_events_takes_every_whole_event_packet_and_stops_at_a_partial_one():
    data = packet(event(1)) + packet(event(2, 5)) + packet(event(3))[:-1]
    events, at = frame_events(data, 0)
    assert events == [event(1)[1:], event(2, 5)[1:]]
    assert at == len(packet(event(1))) + len(packet(event(2, 5)))
    assert packet_size(data, at) == len(packet(event(3)))
    assert frame_events(data, at) == ([], at)


@pytest.mark.parametrize("other", [b"", b"\xff\x15\x04#HY000oops", b"\xfe\x00\x00\x02\x00"])
def test_frame_events_leaves_empty_error_and_eof_packets_to_read_payload(other):
    data = packet(event(1)) + packet(other) + packet(event(2))
    events, at = frame_events(data, 0)
    assert events == [event(1)[1:]] and at == len(packet(event(1)))


def test_frame_events_leaves_a_continued_payload_and_a_short_header():
    big = MAX_PACKET.to_bytes(3, "little") + b"\x01" + b"\x00" + b"x" * 10
    assert frame_events(big, 0) == ([], 0)
    assert packet_size(big, 0) == 4 + MAX_PACKET
    assert frame_events(b"\x05\x00", 0) == ([], 0) and packet_size(b"\x05\x00", 0) == 4


@pytest.mark.parametrize("sizes", [[1], [3], [5, 1, 7], [37], [1 << 20]])
def test_packets_split_anywhere_across_reads_arrive_whole_and_in_order(sizes):
    payloads = [event(i, size) for i, size in enumerate([19, 30, 1, 200, 64, 65, 3000, 19])]
    ch = channel(b"".join(packet(p) for p in payloads), sizes)
    assert drain(ch) == [(0, p[1:]) for p in payloads]


def test_a_payload_of_16_mib_and_more_is_joined_from_its_packets():
    body = bytes(range(256)) * (MAX_PACKET // 256 + 300)          # 16 MiB + ~77 KB
    payload = b"\x00" + body
    first, rest = payload[:MAX_PACKET], payload[MAX_PACKET:]
    exact = b"\x00" + (body * 2)[:2 * MAX_PACKET - 1]                # ends on a packet edge
    data = (packet(event(1)) + packet(first) + packet(rest) + packet(event(2))
            + packet(exact[:MAX_PACKET]) + packet(exact[MAX_PACKET:]) + packet(b"") + packet(event(3)))
    ch = channel(data, [70_000, 1 << 20, 5])
    assert drain(ch) == [(0, event(1)[1:]), (0, body), (0, event(2)[1:]), (0, exact[1:]),
                         (0, event(3)[1:])]


def test_error_and_eof_packets_come_out_of_read_payload_between_events():
    err = b"\xff\x15\x04#HY000server going away"
    ch = channel(packet(event(1)) + packet(err) + packet(event(2)) + packet(b"\xfe\x00\x00\x02\x00"))
    assert drain(ch) == [(0, event(1)[1:]), (0xFF, err[1:]), (0, event(2)[1:]), (0xFE, b"\x00\x00\x02\x00")]


def test_the_connection_closing_inside_a_packet_is_a_disconnect():
    ch = channel(packet(event(1)) + packet(event(2))[:-3], [7])
    assert ch.read_events() == [event(1)[1:]]
    with pytest.raises(Disconnected, match="server closed the connection"):
        ch.read_events()


def test_an_empty_packet_where_a_payload_is_due_is_a_disconnect():
    ch = channel(packet(b"") + packet(event(1)))
    assert ch.read_events() == []
    with pytest.raises(Disconnected, match="empty packet"):
        ch.read_payload()


def test_a_failing_read_is_a_disconnect_naming_the_error():
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:
            raise TimeoutError("timed out")

    conn = Conn(b"", [1])
    conn._rfile = io.BufferedReader(Broken())
    with pytest.raises(Disconnected, match="read failed: TimeoutError"):
        PacketChannel(conn).read_events()
